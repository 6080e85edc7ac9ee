# Adversarial-suite task with weights: relu(x @ W^T + b) through an nn.Linear. Candidates keep
# the parameter names (`linear.weight`, `linear.bias`) or build the same layer first under the
# same seed, so both modules hold the same weights.
import torch
import torch.nn as nn

batch_size = 16
in_features = 64
out_features = 48


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x))


def get_inputs():
    return [torch.randn(batch_size, in_features)]


def get_init_inputs():
    return [in_features, out_features]
