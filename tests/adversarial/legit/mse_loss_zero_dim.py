# legit: MSE as a two-stage reduction (per-block partial sums, then one program sums the
#        partials and divides), returning a 0-dim tensor like the reference.
# expect: correct
# policies: strict, kernelbench
# target: mse_loss.py
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sq_diff_partial_kernel(a_ptr, b_ptr, part_ptr, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    d = tl.load(a_ptr + offs, mask=mask, other=0.0) - tl.load(b_ptr + offs, mask=mask, other=0.0)
    tl.store(part_ptr + pid, tl.sum(d * d, axis=0))


@triton.jit
def finish_kernel(part_ptr, out_ptr, n_parts, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    p = tl.load(part_ptr + i, mask=i < n_parts, other=0.0)
    tl.store(out_ptr, tl.sum(p, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a, b):
        a, b = a.contiguous(), b.contiguous()
        n = a.numel()
        parts = triton.cdiv(n, 512)
        partial = torch.empty(parts, device=a.device, dtype=torch.float32)
        sq_diff_partial_kernel[(parts,)](a, b, partial, n, BLOCK=512)
        out = torch.empty((), device=a.device, dtype=torch.float32)
        finish_kernel[(1,)](partial, out, parts, n, BLOCK=triton.next_power_of_2(parts))
        return out
