# legit: CUDA-graph style: one output buffer allocated on the first call and rewritten in place
#        by every later call (the same tensor object is returned each time). Correct as long as
#        the judge copies each output before the next call.
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
        self._out = None

    def forward(self, x):
        x = x.contiguous()
        if self._out is None or self._out.shape != x.shape or self._out.device != x.device:
            self._out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, self._out, x.numel(), BLOCK=1024)
        return self._out
