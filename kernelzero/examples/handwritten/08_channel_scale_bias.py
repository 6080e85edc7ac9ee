import torch
import torch.nn as nn


class Model(nn.Module):
    """Per-channel affine transform of an NCHW tensor, then ReLU6."""

    def __init__(self, channels):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(channels, 1, 1))
        self.bias = nn.Parameter(torch.randn(channels, 1, 1))

    def forward(self, x):
        x = x * self.scale + self.bias
        return torch.clamp(x, 0.0, 6.0)


def get_inputs():
    return [torch.randn(4, 12, 9, 10)]


def get_init_inputs():
    return [12]
