"""The worker builds a module in two steps: `load` constructs it on the CPU under the init seed
(outside the judge's GPU lock: a large layer's weight initialisation is CPU work), `build` only
moves it to the device."""
import sys

import torch

from kernelzero.eval.worker.worker import Worker

TASK = """import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x)
def get_inputs():
    return [torch.randn(2, 8)]
def get_init_inputs():
    return []
"""

CANDIDATE = """import torch
CONSTRUCTED = []
class ModelNew(torch.nn.Module):
    def __init__(self):
        super().__init__()
        CONSTRUCTED.append(1)
        {raise_}
        self.fc = torch.nn.Linear(8, 4)
    def forward(self, x):
        return self.fc(x)
"""


def _load(tmp_path, raise_=""):
    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "cand.py").write_text(CANDIDATE.format(raise_=raise_))
    w = Worker()
    reply = w.load({"device": "cpu", "role": "candidate", "task_path": str(tmp_path / "task.py"),
                    "candidate_path": str(tmp_path / "cand.py"), "init_seed": 0})
    return w, reply


def test_load_constructs_and_build_only_moves(tmp_path):
    w, reply = _load(tmp_path)
    assert reply == {"ok": True}
    assert isinstance(w.model, torch.nn.Module)  # constructed while loading
    assert sys.modules["kz_candidate"].CONSTRUCTED == [1]
    info = w.build({"init_seed": 0})
    assert info["ok"] and info["weights_loaded"] == ["fc.bias", "fc.weight"]
    assert sys.modules["kz_candidate"].CONSTRUCTED == [1]  # not constructed again
    torch.manual_seed(0)
    ref = sys.modules["kz_reference"].Model()
    assert torch.equal(w.model.fc.weight, ref.fc.weight)  # the reference's weights, same seed
    # another init seed than the one `load` used: constructed again under that seed
    assert w.build({"init_seed": 1})["ok"] and sys.modules["kz_candidate"].CONSTRUCTED == [1, 1]


def test_a_constructor_that_raises_fails_the_load_as_an_init_error(tmp_path):
    w, reply = _load(tmp_path, raise_="raise RuntimeError('bad init')")
    assert not reply["ok"] and reply["phase"] == "init" and reply["status"] == "runtime_error"
    assert "bad init" in reply["reason"] and w.model is None
