# Adversarial-suite task: an in-place update. The reference changes `x` in place (x = 2 * x + y)
# and returns it, so a candidate may (and should) change `x` too, but never `y`.
import torch
import torch.nn as nn

batch_size = 4
dim = 1000


class Model(nn.Module):
    def __init__(self, alpha: float):
        super().__init__()
        self.alpha = alpha

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x.mul_(self.alpha).add_(y)


def get_inputs():
    return [torch.randn(batch_size, dim), torch.randn(batch_size, dim)]


def get_init_inputs():
    return [2.0]
