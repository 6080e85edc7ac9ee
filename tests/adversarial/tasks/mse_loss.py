# Adversarial-suite task with a 0-dim output: the mean squared error of two uniform tensors.
# Its expectation is known in closed form (E[(a - b)^2] = 1/6 for a, b ~ U(0, 1)), which is what
# the analytic-answer exploit returns.
import torch
import torch.nn as nn

n = 4096


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mean((a - b) ** 2)


def get_inputs():
    return [torch.rand(n), torch.rand(n)]


def get_init_inputs():
    return []
