"""tanh(A @ B^T) with K = 4096: a long dot product before a saturating epilogue. Its output's RMS
stays under 1, so the evaluator's atol is not scaled up, while the float32 reference's own rounding
error grows with the terms: the strict fp32 tolerance rejects even the exact answer on heavy-tailed
inputs (docs/threats.md section 7; bench/tolerance_probe.py --module this file)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, A, B):
        return (A @ B.T).tanh()


def get_inputs():
    return [torch.randn(128, 4096), torch.randn(128, 4096)]


def get_init_inputs():
    return []
