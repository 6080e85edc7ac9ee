import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.amax(x, dim=-1)


def get_inputs():
    return [torch.randn(77, 130)]


def get_init_inputs():
    return []
