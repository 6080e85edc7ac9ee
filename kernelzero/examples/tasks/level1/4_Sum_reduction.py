import torch
import torch.nn as nn

batch_size = 8
dim1 = 500
dim2 = 3


class Model(nn.Module):
    """Sum over dimension `dim`, keeping it."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


def get_inputs():
    return [torch.randn(batch_size, dim1, dim2)]


def get_init_inputs():
    return [1]
