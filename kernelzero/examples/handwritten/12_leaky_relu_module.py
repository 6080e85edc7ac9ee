import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, negative_slope: float = 0.02):
        super().__init__()
        self.act = nn.LeakyReLU(negative_slope)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(x)


def get_inputs():
    return [torch.randn(16, 1023)]


def get_init_inputs():
    return [0.02]
