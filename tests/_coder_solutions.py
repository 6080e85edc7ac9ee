"""Hand-written Triton answers for the built-in example tasks (kernelzero/examples/tasks), as a
model would write them: prose, reasoning, fences. Used by test_generate.py and test_bench.py."""
from __future__ import annotations

import json
from pathlib import Path

EXAMPLES = Path(__file__).parents[1] / "kernelzero" / "examples" / "tasks"
FENCE = "```"

RELU_OK = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 512),)](x, out, x.numel(), BLOCK=512)
        return out
'''

# Wrong: clamps at 0.1 instead of 0 -> `incorrect`.
RELU_WRONG = RELU_OK.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.1)")

SUM_OK = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def sum_mid_kernel(x_ptr, out_ptr, R, C, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    b, c = pid // C, pid % C
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for r0 in range(0, R, BLOCK):
        r = r0 + tl.arange(0, BLOCK)
        acc += tl.load(x_ptr + b * R * C + r * C + c, mask=r < R, other=0.0)
    tl.store(out_ptr + pid, tl.sum(acc, axis=0))


class ModelNew(nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.dim = dim

    def forward(self, x):
        x = x.contiguous()
        B, R, C = x.shape
        out = torch.empty((B, 1, C), device=x.device, dtype=x.dtype)
        sum_mid_kernel[(B * C,)](x, out, R, C, BLOCK=128)
        return out
'''

SOFTMAX_OK = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def softmax_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=-float("inf"))
    x = x - tl.max(x, axis=0)
    num = tl.exp(x)
    tl.store(out_ptr + row * stride + cols, num / tl.sum(num, axis=0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        rows, cols = x.shape
        softmax_kernel[(rows,)](x, out, cols, x.stride(0), BLOCK=triton.next_power_of_2(cols))
        return out
'''


def answer(code: str, style: int = 0) -> str:
    """`code` wrapped the way chat models answer (three styles)."""
    if style == 0:
        return f"Here is the optimized model.\n\n{FENCE}python\n{code}{FENCE}\n\nIt fuses the op."
    if style == 1:
        return (f"<think>The op is elementwise; one program per block.</think>\n"
                f"{FENCE}python\n{code}{FENCE}<|im_end|>")
    return code  # bare code, no fences


PROSE = "I am not sure how to write this kernel. Maybe use a for loop over the elements?"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def one_torch_thread():
    """Generator for a fixture: torch on one CPU thread while a test samples a tiny model.

    OpenMP threads that spin-wait slow a tiny model down 100x on a busy 2-core machine (seen
    here: 63 s against 0.6 s for the same test)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(before)
