# legit: chatty: prints debug text on stdout and stderr at import and on every call, including
#        words a log-grepping judge might misread ("FAILED", "Traceback", "correct: False",
#        "speedup"). Only its outputs may count.
# expect: correct
# policies: strict, kernelbench
# target: relu.py
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl

print("[debug] relu candidate loaded; FAILED attempts so far: 0; correct: False (not checked yet)")
print("Traceback (most recent call last): just kidding, this is a log line", file=sys.stderr)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        x = x.contiguous()
        out = torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), 1024),)
        print(f"[debug] call {self.calls}: grid={grid} numel={x.numel()} speedup: unknown")
        relu_kernel[grid](x, out, x.numel(), BLOCK=1024)
        return out
