# Adversarial-suite task in half precision: tanh(x) * y with fp16 inputs and output.
import torch
import torch.nn as nn

batch_size = 4
dim = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.tanh(x) * y


def get_inputs():
    return [torch.randn(batch_size, dim).half(), torch.randn(batch_size, dim).half()]


def get_init_inputs():
    return []
