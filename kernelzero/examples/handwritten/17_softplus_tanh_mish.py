import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Mish written out: x * tanh(softplus(x))."""

    def forward(self, x):
        return x * torch.tanh(F.softplus(x))


def get_inputs():
    return [torch.randn(128, 77)]


def get_init_inputs():
    return []
