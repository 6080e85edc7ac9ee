import torch
import torch.nn as nn

hidden = 384


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(20, hidden)]


def get_init_inputs():
    return []
