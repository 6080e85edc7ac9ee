"""A tiny random causal LM and its tokenizer, built offline for tests and smoke runs.

`build_tiny_model(out_dir)` trains a byte-level BPE tokenizer (with `tokenizers`) on a small
built-in corpus of Python, PyTorch, Triton and CUDA text, gives it a ChatML chat template, builds a
randomly initialised Qwen2 causal LM from a config (about 1M parameters by default) and saves both
with `save_pretrained`. No network access, a few seconds on a laptop CPU, and deterministic: the
same arguments give byte-identical files.

Not covered: anything about model quality. The weights are random; the completions are noise.
"""
from __future__ import annotations

import json
from pathlib import Path

from kernelzero.models.scratch import (CHAT_TEMPLATE, MARKER, SPECIAL_TOKENS, ModelPreset,  # noqa: F401
                                       build_model, train_tokenizer)

_CORPUS = [
    "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n",
    "import triton\nimport triton.language as tl\n",
    "from torch.utils.cpp_extension import load_inline\n",
    "class Model(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
    "    def forward(self, x: torch.Tensor) -> torch.Tensor:\n        return torch.relu(x)\n",
    "class ModelNew(nn.Module):\n    def __init__(self):\n        super().__init__()\n\n"
    "    def forward(self, x):\n        return relu(x)\n",
    "def get_inputs():\n    x = torch.randn(batch_size, dim)\n    return [x]\n\n"
    "def get_init_inputs():\n    return []\n",
    "@triton.jit\ndef add_kernel(x_ptr, y_ptr, out_ptr, n_elements, BLOCK_SIZE: tl.constexpr):\n"
    "    pid = tl.program_id(axis=0)\n    block_start = pid * BLOCK_SIZE\n"
    "    offsets = block_start + tl.arange(0, BLOCK_SIZE)\n    mask = offsets < n_elements\n"
    "    x = tl.load(x_ptr + offsets, mask=mask)\n    y = tl.load(y_ptr + offsets, mask=mask)\n"
    "    tl.store(out_ptr + offsets, x + y, mask=mask)\n",
    "def add(x: torch.Tensor, y: torch.Tensor):\n    out = torch.empty_like(x)\n"
    "    n_elements = out.numel()\n"
    "    grid = lambda meta: (triton.cdiv(n_elements, meta['BLOCK_SIZE']),)\n"
    "    add_kernel[grid](x, y, out, n_elements, BLOCK_SIZE=1024)\n    return out\n",
    "@triton.jit\ndef softmax_kernel(out_ptr, in_ptr, in_row_stride, out_row_stride, n_cols, "
    "BLOCK_SIZE: tl.constexpr):\n    row = tl.program_id(0)\n    cols = tl.arange(0, BLOCK_SIZE)\n"
    "    x = tl.load(in_ptr + row * in_row_stride + cols, mask=cols < n_cols, "
    "other=-float('inf'))\n"
    "    x = x - tl.max(x, axis=0)\n    num = tl.exp(x)\n    den = tl.sum(num, axis=0)\n"
    "    tl.store(out_ptr + row * out_row_stride + cols, num / den, mask=cols < n_cols)\n",
    "@triton.jit\ndef matmul_kernel(a_ptr, b_ptr, c_ptr, M, N, K, BLOCK_M: tl.constexpr, "
    "BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):\n    acc = tl.zeros((BLOCK_M, BLOCK_N), "
    "dtype=tl.float32)\n    for k in range(0, tl.cdiv(K, BLOCK_K)):\n"
    "        acc += tl.dot(a, b)\n",
    'cuda_source = """\n#include <torch/extension.h>\n\n'
    '__global__ void relu_kernel(const float* x, '
    'float* out, int size) {\n    int idx = blockIdx.x * blockDim.x + threadIdx.x;\n'
    '    if (idx < size) {\n        out[idx] = x[idx] > 0.f ? x[idx] : 0.f;\n    }\n}\n\n'
    'torch::Tensor relu_cuda(torch::Tensor x) {\n    auto out = torch::empty_like(x);\n'
    '    const int block_size = 256;\n    const int num_blocks = (x.numel() + block_size - 1) / '
    'block_size;\n    relu_kernel<<<num_blocks, block_size>>>(x.data_ptr<float>(), '
    'out.data_ptr<float>(), x.numel());\n    return out;\n}\n"""\n',
    "relu = load_inline(name='relu', cpp_sources=cpp_source, cuda_sources=cuda_source, "
    "functions=['relu_cuda'], verbose=False)\n",
    "You write fast and correct GPU kernels. Replace the PyTorch operators with custom Triton or "
    "CUDA kernels. Name the optimized module ModelNew. Output the new code in a code block.\n",
    "Tiling, operator fusion, vectorised memory access, shared memory, warp reductions, "
    "coalesced loads, occupancy, memory bandwidth, tensor cores.\n",
    "```python\n# code\n```\n",
]


def corpus() -> list[str]:
    """The built-in training text (repeated so that merges of common code pieces win)."""
    return _CORPUS * 4


def build_tokenizer(vocab_size: int = 1024):
    """A byte-level BPE `PreTrainedTokenizerFast` trained on `corpus()`, with a chat template."""
    return train_tokenizer(corpus(), vocab_size)


def build_tiny_model(out_dir: str | Path, vocab_size: int = 1024, seed: int = 0,
                     hidden_size: int = 128, num_layers: int = 4,
                     max_position_embeddings: int = 4096) -> Path:
    """Build the tokenizer and a random Qwen2 causal LM, save both to `out_dir`, return it.

    vocab_size: BPE vocabulary size (at least 256 + the special tokens; the model's embedding
        matrix is this size rounded up to a multiple of 64).
    seed: seeds the weight initialisation (tokenizer training is deterministic by itself).
    hidden_size / num_layers: model width and depth (~1M parameters at the defaults).
    """
    if hidden_size % 32:
        raise ValueError(f"hidden_size={hidden_size}: must be a multiple of 32 (4 heads of >= 8)")
    preset = ModelPreset(hidden=hidden_size, layers=num_layers, heads=4, kv_heads=2,
                         intermediate=hidden_size * 3, vocab_size=vocab_size,
                         max_positions=max_position_embeddings)
    out = build_model(out_dir, build_tokenizer(vocab_size), preset, seed=seed)
    meta = json.loads((out / MARKER).read_text())
    (out / "kernelzero_tiny.json").write_text(json.dumps(
        {"vocab_size": vocab_size, "seed": seed, "hidden_size": hidden_size,
         "num_layers": num_layers, "parameters": meta["parameters"]}, indent=1) + "\n")
    return out
