# Adversarial-suite task: an fp32 matmul (48 x 128 @ 128 x 40). Outputs are ~11 in magnitude, so
# fp16 arithmetic misses the strict fp32 tolerance (1e-4) but not KernelBench's 1e-2.
import torch
import torch.nn as nn

M = 48
K = 128
N = 40


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


def get_inputs():
    return [torch.randn(M, K), torch.randn(K, N)]


def get_init_inputs():
    return []
