"""Co-occurrence mining, persistence, sampling, the shipped default and the `catalog` command."""
from __future__ import annotations

import json
import random

import pytest

from kernelzero.catalog import default_dist
from kernelzero.catalog.apimap import forward_api_sets, scan_source
from kernelzero.catalog.cooccurrence import DEFAULT_PATH, Distribution, load_default, mine
from kernelzero.cli import main

MOD_A = '''
import torch
import torch.nn as nn
import torch.nn.functional as F

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.act(self.conv(x))
        return F.max_pool2d(x, 2) + 1.0
'''
MOD_B = '''
import torch
from torch import nn

class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return torch.relu(self.fc(x)).sum(dim=1)

class Other(nn.Module):
    def forward(self, x):
        return x.view(-1).relu()
'''


def test_forward_sets_resolve_layers_aliases_and_operators():
    assert forward_api_sets(MOD_A) == [{"conv2d", "relu", "max_pool2d", "add"}]
    assert forward_api_sets(MOD_B) == [{"linear", "relu", "sum"}, {"relu"}]


def test_mine_counts_pairs_exactly(tmp_path):
    (tmp_path / "a.py").write_text(MOD_A)
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "b.py").write_text(MOD_B)
    (tmp_path / "broken.py").write_text("def (:")
    d = mine(tmp_path)
    assert d.n_modules == 3
    assert d.unigram["relu"] == 3 and d.unigram["conv2d"] == 1
    assert d.pair("relu", "conv2d") == 1 and d.pair("conv2d", "relu") == 1
    assert d.pair("linear", "sum") == 1 and d.pair("linear", "conv2d") == 0
    path = d.save(tmp_path / "dist.json")
    again = Distribution.load(path)
    assert again.to_dict() == d.to_dict()


def test_sampling_is_deterministic_distinct_and_follows_pairs():
    d = Distribution(smoothing=0.0)
    d.add_set({"conv2d", "relu"})
    d.add_set({"linear", "gelu"})
    for seed in range(20):
        s = d.sample(random.Random(seed), 2)
        assert s in (["conv2d", "relu"], ["gelu", "linear"])
        assert s == d.sample(random.Random(seed), 2)
    with pytest.raises(ValueError):
        d.sample(random.Random(0), 5)


def test_larger_sets_on_request():
    s = load_default().sample(random.Random(3), 5)
    assert len(set(s)) == 5


def test_shipped_default_is_reproducible_and_says_how_it_was_made():
    shipped = json.loads(DEFAULT_PATH.read_text())
    assert shipped == default_dist.build().to_dict()
    assert "hand-weighted" in shipped["source"] and "NOT mined" in shipped["source"]
    d = load_default()
    counts = {}
    rng = random.Random(0)
    for _ in range(400):
        for a in d.sample(rng, 2):
            counts[a] = counts.get(a, 0) + 1
    assert counts.get("conv2d", 0) > counts.get("softsign", 0)


def test_unknown_compute_apis_and_glue():
    src = "import torch\ndef f(x):\n    y = torch.einsum('ij->i', x).view(-1)\n    return y.flatten()\n"
    use = scan_source(src)
    assert "torch.einsum" in use.unknown and not use.apis
    pow_src = "def f(x):\n    n = x.shape[0] // 2\n    return x.view(n, -1) ** 2 * 0.5\n"
    use = scan_source(pow_src)
    assert use.unknown == {"operator Pow"} and use.apis == {"mul"}


def test_catalog_cli(tmp_path, capsys):
    (tmp_path / "a.py").write_text(MOD_A)
    out = tmp_path / "d.json"
    assert main(["catalog", "mine", str(tmp_path), "--out", str(out), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["n_modules"] == 1
    assert main(["catalog", "sample", "--n", "3", "--apis", "2", "--dist", str(out), "--json"]) == 0
    sets = json.loads(capsys.readouterr().out)["sets"]
    assert len(sets) == 3 and all(set(s) <= {"conv2d", "relu", "max_pool2d", "add"} for s in sets)
    assert main(["catalog", "show", "nn.Conv2d", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"] == "conv2d"
    assert main(["catalog", "list"]) == 0
    assert "operator APIs" in capsys.readouterr().out
    assert main(["catalog", "show", "nope"]) == 2
