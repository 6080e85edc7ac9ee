# legit: the task updates x in place (x = alpha * x + y) and returns x; so does this kernel,
#        and it leaves y alone.
# expect: correct
# policies: strict, kernelbench
# target: inplace_axpy.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def axpy_inplace_kernel(x_ptr, y_ptr, alpha, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(x_ptr + offs, alpha * x + y, mask=mask)      # 12 bytes moved per element


class ModelNew(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x, y):
        assert x.is_contiguous() and y.is_contiguous(), "in-place kernel needs contiguous x, y"
        n = x.numel()
        axpy_inplace_kernel[(triton.cdiv(n, 1024),)](x, y, self.alpha, n, BLOCK=1024)
        return x
