import torch
import torch.nn as nn

batch_size = 16
dim = 300


class Model(nn.Module):
    """Softmax over the last dimension."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(batch_size, dim) * 3.0]


def get_init_inputs():
    return []
