"""Prompts that ask a model to rewrite a KernelBench reference module as fast kernels.

Covers: the CUDA (`load_inline`) and Triton templates, KernelBench-compatible (the reference code,
one worked example, "name the result ModelNew"); the cold-start variant that also states the
optimisation principles (tiling, fusion, vectorised memory access, reductions); optional GPU
facts (name, memory bandwidth, SM count); and the task metadata the replay backend matches on.
Not covered: multi-turn repair messages (`kernelzero.coder.repair`) or extraction
(`kernelzero.coder.extract`).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kernelzero.tasks import Task, canonical_source

EXAMPLE_REFERENCE = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return a + b


def get_inputs():
    return [torch.randn(1, 128), torch.randn(1, 128)]


def get_init_inputs():
    return []
'''

EXAMPLE_CUDA = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>

__global__ void add_kernel(const float* a, const float* b, float* out, int size) {
    int idx = blockIdx.x * blockDim.x + threadIdx.x;
    if (idx < size) {
        out[idx] = a[idx] + b[idx];
    }
}

torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b) {
    auto out = torch::empty_like(a);
    int size = a.numel();
    const int block_size = 256;
    const int num_blocks = (size + block_size - 1) / block_size;
    add_kernel<<<num_blocks, block_size>>>(a.data_ptr<float>(), b.data_ptr<float>(),
                                           out.data_ptr<float>(), size);
    return out;
}
"""
cpp_source = "torch::Tensor add_cuda(torch::Tensor a, torch::Tensor b);"

add_ext = load_inline(name="add_ext", cpp_sources=cpp_source, cuda_sources=cuda_source,
                      functions=["add_cuda"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return add_ext.add_cuda(a.contiguous(), b.contiguous())
'''

EXAMPLE_TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def add_kernel(a_ptr, b_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):
    pid = tl.program_id(axis=0)
    offsets = pid * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
    mask = offsets < n_elements          # the last block may run past the end
    a = tl.load(a_ptr + offsets, mask=mask)
    b = tl.load(b_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, a + b, mask=mask)


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a, b = a.contiguous(), b.contiguous()
    out = torch.empty_like(a)
    n = out.numel()
    grid = (triton.cdiv(n, 1024),)
    add_kernel[grid](a, b, out, n, BLOCK_SIZE=1024)
    return out


class ModelNew(nn.Module):
    def __init__(self) -> None:
        super().__init__()

    def forward(self, a, b):
        return add(a, b)
'''

LANG = {
    "cuda": ("custom CUDA kernels", "CUDA",
             "embed the CUDA source with torch.utils.cpp_extension.load_inline"),
    "triton": ("custom Triton kernels", "Triton",
               "write @triton.jit kernels and launch them from Python"),
}

PRINCIPLES = """Principles that make kernels fast:
- Tiling: split the work into tiles that fit in shared memory / registers and reuse each loaded
  value many times (matrix products, convolutions).
- Fusion: combine consecutive operators (e.g. a GEMM with its bias and activation) into one kernel
  so intermediate results never travel through global memory.
- Vectorised, coalesced memory access: neighbouring threads read neighbouring addresses; use wide
  loads (float4 in CUDA, contiguous blocks in Triton); most operators are limited by memory
  bandwidth, so count the bytes moved.
- Reductions: reduce within a thread, then a warp (shuffles), then a block (shared memory);
  accumulate in float32 and subtract the maximum before exponentials (softmax, logsumexp).
- Correctness first: mask the tails when sizes are not multiples of the block size, keep the
  reference's dtypes, shapes and parameter names, and handle every input size the module sees.
"""


@dataclass
class GPUFacts:
    """What the prompt tells the model about the target GPU (all optional)."""

    name: str
    memory_bandwidth_gbs: float | None = None
    sm_count: int | None = None

    def describe(self) -> str:
        parts = [f"Target GPU: {self.name}"]
        if self.sm_count:
            parts.append(f"{self.sm_count} streaming multiprocessors")
        if self.memory_bandwidth_gbs:
            parts.append(f"about {self.memory_bandwidth_gbs:,.0f} GB/s of memory bandwidth")
        return ", ".join(parts) + "."


# Peak DRAM bandwidth by marketing name (vendor data sheets), for GPUs torch cannot measure.
_BANDWIDTH_GBS = {"H200": 4800.0, "H100 SXM": 3350.0, "H100 PCIe": 2000.0, "H100": 3350.0,
                  "A100-SXM4-80GB": 2039.0, "A100 80GB": 1935.0, "A100": 1555.0,
                  "L40S": 864.0, "L4": 300.0, "RTX 4090": 1008.0, "V100": 900.0}


def detect_gpu_facts(device_index: int = 0) -> GPUFacts | None:
    """Facts about the local CUDA GPU, or None without one."""
    import torch

    if not torch.cuda.is_available():
        return None
    props = torch.cuda.get_device_properties(device_index)
    bw = next((v for k, v in _BANDWIDTH_GBS.items() if k in props.name), None)
    return GPUFacts(name=props.name, memory_bandwidth_gbs=bw,
                    sm_count=props.multi_processor_count)


STYLES = ("kernelbench", "principles", "compact")


@dataclass
class PromptConfig:
    """How the prompt is worded.

    backend: kernel language asked for, `triton` or `cuda`.
    style: `kernelbench` (KernelBench's one-shot prompt), `principles` (the cold-start variant
        that also states the optimisation principles) or `compact` (one user message: a line
        naming the kernel language, then the module as `canonical_source` writes it; no
        system message, no example: the prompt of the small Coders trained from scratch).
    gpu: facts about the target GPU to state, or None to state none.
    example: include the worked example (an elementwise add rewritten as a kernel).
    """

    backend: Literal["triton", "cuda"] = "triton"
    style: Literal["kernelbench", "principles", "compact"] = "kernelbench"
    gpu: GPUFacts | None = None
    example: bool = True

    def __post_init__(self) -> None:
        if self.backend not in LANG:
            raise ValueError(f"PromptConfig.backend={self.backend!r}: use triton or cuda")
        if self.style not in STYLES:
            raise ValueError(f"PromptConfig.style={self.style!r}: use one of {', '.join(STYLES)}")


def system_message(config: PromptConfig) -> str:
    what, lang, _ = LANG[config.backend]
    return (f"You are an expert GPU performance engineer. You rewrite PyTorch modules with "
            f"{what} that are correct and as fast as possible. You answer with one complete "
            f"Python file in a ```python code block.")


def user_message(task: Task, config: PromptConfig) -> str:
    what, lang, how = LANG[config.backend]
    parts = [
        f"You write {what} to replace the PyTorch operators in a given architecture and make it "
        f"faster. You may replace some operators and keep others, fuse several operators into one "
        f"kernel (for example matmul + relu), or change the algorithm (for example an online "
        f"softmax). To do so, {how}.",
    ]
    if config.style == "principles":
        parts.append(PRINCIPLES)
    if config.gpu is not None:
        parts.append(config.gpu.describe())
    if config.example:
        example = EXAMPLE_CUDA if config.backend == "cuda" else EXAMPLE_TRITON
        parts.append(f"Here is an example. The given architecture:\n\n```python\n"
                     f"{EXAMPLE_REFERENCE}```\n\nThe same architecture rewritten with {what}:\n\n"
                     f"```python\n{example}```")
    parts.append(f"You are given the following architecture:\n\n```python\n"
                 f"{task.source.rstrip()}\n```")
    parts.append(
        f"Optimize the architecture named Model with {what}. Name your optimized architecture "
        f"ModelNew, with the same constructor arguments and the same forward inputs and outputs "
        f"as Model (keep parameter names such as `linear.weight` so the same weights load). "
        f"Do the computation in your own {lang} kernels; use PyTorch only to allocate outputs "
        f"and reshape views. Output the complete new code in one ```python code block: real, "
        f"working code, no pseudocode, no tests and no example usage.")
    return "\n\n".join(parts)


def compact_message(task: Task, config: PromptConfig) -> str:
    """The compact prompt: what to write, then the module in canonical form."""
    lang = LANG[config.backend][1]
    return f"ModelNew with {lang} kernels for:\n```python\n{canonical_source(task.source)}```"


def task_meta(task: Task, sample: int = 0, turn: int = 1) -> dict:
    """What a backend needs to know about the request besides its text (used by `replay:`)."""
    return {"task": task.key, "task_hash": task.hash, "level": task.level,
            "problem_id": task.problem_id, "sample": sample, "turn": turn}


def build_prompt(task: Task, config: PromptConfig | None = None, sample: int = 0) -> list[dict]:
    """The first-turn chat for `task`. `sample` is the index of the first completion asked for
    (recorded in the metadata so a replay can continue an interrupted run)."""
    config = config or PromptConfig()
    if config.style == "compact":
        return [{"role": "user", "content": compact_message(task, config),
                 "meta": task_meta(task, sample=sample)}]
    return [{"role": "system", "content": system_message(config)},
            {"role": "user", "content": user_message(task, config),
             "meta": task_meta(task, sample=sample)}]
