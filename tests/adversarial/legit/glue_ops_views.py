# legit: heavy on allowed glue: flattens with view/reshape, runs the kernel on the flat buffer,
#        reshapes back, and round-trips a dtype move that changes nothing (.to(float32)).
# expect: correct
# policies: strict, kernelbench
# target: relu.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        shape = x.shape
        flat = x.to(torch.float32).contiguous().view(-1)
        out = torch.empty_like(flat)
        relu_kernel[(triton.cdiv(flat.numel(), 2048),)](flat, out, flat.numel(), BLOCK=2048)
        return out.reshape(shape)
