"""Training's attention without cuDNN: flash attention takes any sequence length without a plan.

On Hopper, PyTorch's `scaled_dot_product_attention` prefers cuDNN's fused attention. cuDNN builds
an execution plan on the host for each new input shape, and a training batch is padded to its
longest row, so nearly every step brings a new length and a new plan. Profiled on an H100
(`bench/sft_throughput.py --profile log50`, 7 Dec), the 24M `gpu` preset spent about 100 ms of host
time a step in cuDNN's attention forward and backward (5-7 ms a call, 16 calls), while the device's
whole step took about 114 ms; the 2.5M `cpu` preset, whose device work is 37 ms a step, spent 144 ms
a step there. Flash attention (bf16 and fp16) and memory-efficient attention (also fp32) launch
their kernels at any length with no such cost, and compute the same attention. Without cuDNN, in
one run on an H100: the `gpu` preset 6.8 steps/s against 3.2, the `cpu` preset 10.2 against 5.4
(`bench/results/sft_cudnn_h100_2026-12-07.json`).

`NoCudnnAttentionMixin` runs a trainer's model passes that train or score (SFT's and GRPO's
`compute_loss`, GRPO's `_get_per_token_logps_and_entropies`) with SDPA limited to those kernels (and
the math fallback), on CUDA only; the CPU has no cuDNN attention and is left as it is. The
backward pass runs the backward of the kernel its forward chose.

Not covered: generation (the fast sampler's decode attends with a mask over grouped heads, which
flash attention does not take, at shapes fixed for its CUDA graph, so cuDNN plans once there; its
rate is measured as it is), and models whose attention does not go through SDPA.
"""
from __future__ import annotations

import contextlib


def without_cudnn_attention():
    """A context in which SDPA picks among flash, memory-efficient and math attention (not cuDNN's),
    on a machine with CUDA; elsewhere a context that changes nothing."""
    import torch

    if not torch.cuda.is_available():
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel

    return sdpa_kernel([SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH])


class NoCudnnAttentionMixin:
    """Put before a TRL trainer class: its training and scoring passes run without cuDNN's
    attention (module docstring). `cudnn_attention = True` on an instance gives PyTorch's own
    choice back (a benchmark's baseline)."""

    cudnn_attention = False

    def _attention_context(self):
        return contextlib.nullcontext() if self.cudnn_attention else without_cudnn_attention()

    def compute_loss(self, *args, **kwargs):
        with self._attention_context():
            return super().compute_loss(*args, **kwargs)

    def _get_per_token_logps_and_entropies(self, *args, **kwargs):  # GRPO's scoring passes
        with self._attention_context():
            return super()._get_per_token_logps_and_entropies(*args, **kwargs)
