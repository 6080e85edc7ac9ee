# legit: on a GPU, launches the kernel on a second stream that first waits for the current
#        stream, then makes the current stream wait for it and marks the output as used there:
#        properly joined, so any timer on the current stream sees the work. On CPU the stream
#        code is skipped.
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
        self.side = torch.cuda.Stream() if torch.cuda.is_available() else None

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        grid = (triton.cdiv(x.numel(), 1024),)
        if self.side is None or not x.is_cuda:
            relu_kernel[grid](x, out, x.numel(), BLOCK=1024)
            return out
        main = torch.cuda.current_stream()
        self.side.wait_stream(main)                 # inputs are ready on the side stream
        with torch.cuda.stream(self.side):
            relu_kernel[grid](x, out, x.numel(), BLOCK=1024)
        main.wait_stream(self.side)                 # joined: the caller's stream waits
        out.record_stream(main)
        x.record_stream(self.side)
        return out
