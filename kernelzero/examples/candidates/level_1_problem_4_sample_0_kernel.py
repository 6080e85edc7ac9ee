# Correct: sum over the middle dimension of a (B, R, C) tensor, keepdim. One program per (b, c)
# column reduces R values in BLOCK chunks, accumulating in fp32.
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_dim1_kernel(x_ptr, out_ptr, R, C, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    b, c = pid // C, pid % C
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r0 in range(0, R, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + b * R * C + r * C + c, mask=r < R, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        assert dim == 1, "this kernel reduces dimension 1"

    def forward(self, x):
        x = x.contiguous()
        B, R, C = x.shape
        out = torch.empty((B, 1, C), device=x.device, dtype=x.dtype)
        sum_dim1_kernel[(B * C,)](x, out, R, C, BLOCK=256)
        return out
