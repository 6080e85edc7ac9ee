# legit: correct but slow: 16 elements per program (250 programs) and one launch per row.
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
        x = x.contiguous()
        out = torch.empty_like(x)
        cols = x.shape[1]
        for r in range(x.shape[0]):
            relu_kernel[(triton.cdiv(cols, 16),)](x[r], out[r], cols, BLOCK=16)
        return out
