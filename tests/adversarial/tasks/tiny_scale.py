# Adversarial-suite task with a tiny output: x * y * 1e-6, values of at most ~2e-5, below an fp32
# absolute tolerance of 1e-4. All zeros would pass an atol-only check.
import torch
import torch.nn as nn

batch_size = 4
dim = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y * 1e-6


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
