# legit: writes ReLU into a (dim, batch) buffer, transposed, and returns the transposed view:
#        the right shape and values, but not contiguous (stride (1, batch)).
# expect: correct
# policies: strict, kernelbench
# target: relu.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_transpose_kernel(x_ptr, out_ptr, rows, cols, BLOCK: tl.constexpr):
    r = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    x = tl.load(x_ptr + r * cols + c, mask=mask)
    tl.store(out_ptr + c * rows + r, tl.maximum(x, 0.0), mask=mask)   # column-major store


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        out_t = torch.empty((cols, rows), device=x.device, dtype=x.dtype)
        relu_transpose_kernel[(rows,)](x, out_t, rows, cols, BLOCK=triton.next_power_of_2(cols))
        return out_t.t()
