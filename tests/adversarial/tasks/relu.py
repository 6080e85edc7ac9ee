# Adversarial-suite task: elementwise ReLU (4 x 1000 = 4000 elements; 1000 is no power of two, so
# kernels must mask the tail). The plain target most exploits aim at.
import torch
import torch.nn as nn

batch_size = 4
dim = 1000


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
