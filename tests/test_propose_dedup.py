"""Duplicate detection by canonical AST form."""
from __future__ import annotations

from kernelzero.propose.dedup import Deduper, canonical_hash

A = '''"""A module."""
import torch
import torch.nn as nn

batch_size = 16
features = 64


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.lin = nn.Linear(features, features)

    def forward(self, x):
        y = self.lin(x)
        return torch.relu(y)


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''
# same module: other names everywhere, other sizes, comments, docstrings and formatting
B = '''import torch
import torch.nn as nn
n = 128   # a comment
width = 256
class Model(nn.Module):
    """Docstrings do not matter."""
    def __init__(self, width):
        super().__init__()
        self.fc1 = nn.Linear(width,   width)
    def forward(self, inp):
        hidden = self.fc1(inp)
        return torch.relu(hidden)
def get_inputs():
    return [torch.randn(n, width)]
def get_init_inputs():
    return [width]
'''


def test_renamed_variables_and_sizes_are_duplicates():
    assert canonical_hash(A) == canonical_hash(B)


def test_other_api_is_not_a_duplicate():
    assert canonical_hash(A) != canonical_hash(A.replace("torch.relu", "torch.sigmoid"))


def test_other_structure_is_not_a_duplicate():
    assert canonical_hash(A) != canonical_hash(A.replace("return torch.relu(y)", "return torch.relu(y) + x"))


def test_deduper_remembers():
    d = Deduper()
    assert not d.seen(A)
    d.add(A)
    assert d.seen(B)
