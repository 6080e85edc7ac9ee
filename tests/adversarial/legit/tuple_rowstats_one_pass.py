# legit: the task returns (row sums, row maxima); one kernel computes both in a single read of
#        each row and the candidate returns the same 2-tuple.
# expect: correct
# policies: strict, kernelbench
# target: tuple_rowstats.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def row_stats_kernel(x_ptr, sum_ptr, max_ptr, cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    c = tl.arange(0, BLOCK)
    mask = c < cols
    x = tl.load(x_ptr + row * cols + c, mask=mask, other=0.0)
    tl.store(sum_ptr + row, tl.sum(x, axis=0))
    tl.store(max_ptr + row, tl.max(tl.where(mask, x, -float("inf")), axis=0))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        rows, cols = x.shape
        sums = torch.empty(rows, device=x.device, dtype=x.dtype)
        maxes = torch.empty(rows, device=x.device, dtype=x.dtype)
        row_stats_kernel[(rows,)](x, sums, maxes, cols, BLOCK=triton.next_power_of_2(cols))
        return sums, maxes
