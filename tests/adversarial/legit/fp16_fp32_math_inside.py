# legit: fp16 in, fp16 out; tanh(x) * y computed in fp32 registers (tanh through exp) and
#        rounded once on store -- within the fp16 tolerance.
# expect: correct
# policies: strict, kernelbench
# target: fp16_tanh_mul.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def tanh_mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    y = tl.load(y_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    t = 1.0 - 2.0 / (tl.exp(2.0 * x) + 1.0)          # tanh(x), stable for large |x|
    tl.store(out_ptr + offs, (t * y).to(tl.float16), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        tanh_mul_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
        return out
