# legit: the tiny-output task (values ~1e-6 to 2e-5) computed properly: a relative check must
#        not reject a correct small answer while it rejects zeros.
# expect: correct
# policies: strict, kernelbench
# target: tiny_scale.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def scaled_mul_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, x * y * 1e-6, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x, y):
        x, y = x.contiguous(), y.contiguous()
        out = torch.empty_like(x)
        scaled_mul_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, out, x.numel(), BLOCK=1024)
        return out
