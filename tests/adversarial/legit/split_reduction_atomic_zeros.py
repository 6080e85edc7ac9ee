# legit: a split reduction: each row is cut into 4 chunks reduced by separate programs that
#        atomically add into an accumulator created with torch.zeros (an allocation, like
#        empty, plus a fill), then scaled by 1/cols in a second kernel.
# expect: correct
# policies: strict, kernelbench
# target: row_mean.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def partial_sum_kernel(x_ptr, acc_ptr, cols, CHUNK: tl.constexpr):
    row, part = tl.program_id(0), tl.program_id(1)
    c = part * CHUNK + tl.arange(0, CHUNK)
    x = tl.load(x_ptr + row * cols + c, mask=c < cols, other=0.0)
    tl.atomic_add(acc_ptr + row, tl.sum(x, axis=0))


@triton.jit
def scale_kernel(acc_ptr, out_ptr, rows, inv, BLOCK: tl.constexpr):
    r = tl.arange(0, BLOCK)
    tl.store(out_ptr + r, tl.load(acc_ptr + r, mask=r < rows) * inv, mask=r < rows)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        acc = torch.zeros(rows, device=x.device, dtype=torch.float32)
        partial_sum_kernel[(rows, triton.cdiv(cols, 1024))](x, acc, cols, CHUNK=1024)
        out = torch.empty(rows, device=x.device, dtype=x.dtype)
        scale_kernel[(1,)](acc, out, rows, 1.0 / cols, BLOCK=triton.next_power_of_2(rows))
        return out
