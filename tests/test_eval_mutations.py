"""Rules of the comparison that a broken evaluator would silently drop, one test per rule.

Each test was written against a mutation of the evaluator that left the rest of the CPU suite
green (issue 25): atol without its RMS scaling, Python scalar outputs never compared, the
wrong-device check removed, hardening trials drawn from the task's own inputs, and a strict fp32
tolerance of 1e-3 instead of 1e-4. Each is deterministic: no random draw decides whether the
mutation is caught.
"""
import pytest
import torch

from kernelzero.eval import EvalConfig, Evaluator
from kernelzero.eval.compare import compare_outputs
from kernelzero.eval.config import TOLERANCES
from kernelzero.eval.transport.tensorio import TensorOut
from kernelzero.tasks import Candidate, Task

STRICT = EvalConfig().tolerance_for


def _out(t: torch.Tensor, device: str = "cpu") -> TensorOut:
    return TensorOut(t, device, True, [])


def _cmp(ref, cand, expected_device: str = "cpu"):
    wrap = (lambda x: _out(x) if isinstance(x, torch.Tensor) else x)
    return compare_outputs(wrap(ref), wrap(cand), STRICT, expected_device)


# ---- the comparison itself -----------------------------------------------------------------
def test_atol_scales_with_the_outputs_rms():
    """Outputs of RMS 1000: an error of 0.05 where the reference is 0 is rounding (atol 1e-4 x
    RMS 1000 = 0.1); 0.5 is not. Without the scaling, 0.05 > 1e-4 would fail a legit kernel."""
    r = torch.full((4096,), 1000.0)
    r[7] = 0.0
    within, beyond = r.clone(), r.clone()
    within[7], beyond[7] = 0.05, 0.5
    assert _cmp(r, within).ok, _cmp(r, within).reason
    res = _cmp(r, beyond)
    assert not res.ok and res.flags == ["value_mismatch"] and "flat index 7" in res.reason


def test_strict_fp32_tolerance_is_1e4():
    """Unit-scale outputs: 5e-4 off everywhere fails strict (atol + rtol = 2e-4), 5e-5 passes.
    A strict tolerance of 1e-3 would pass the first."""
    assert TOLERANCES["strict"]["float32"] == (1e-4, 1e-4)
    r = torch.linspace(-1, 1, 1000)
    assert _cmp(r, r + 5e-5).ok
    res = _cmp(r, r + 5e-4)
    assert not res.ok and res.flags == ["value_mismatch"], res.reason


def test_python_scalar_outputs_are_compared():
    assert _cmp(1.5, 1.5).ok
    res = _cmp(1.5, 2.5)
    assert not res.ok and res.flags == ["value_mismatch"] and "2.5" in res.reason
    nested = _cmp((_out(torch.ones(3)), 4.0), (_out(torch.ones(3)), 4.01))
    assert not nested.ok and "output[1]" in nested.reason


def test_an_output_on_another_device_is_refused():
    """Right values, wrong device: a cuda task whose candidate hands back a host tensor."""
    x = torch.ones(8)
    res = compare_outputs(_out(x, "cuda"), _out(x.clone(), "cpu"), STRICT, "cuda")
    assert not res.ok and res.flags == ["wrong_device"] and "expected cuda" in res.reason
    assert compare_outputs(_out(x, "cpu"), _out(x.clone(), "cpu"), STRICT, "cpu").ok


# ---- through the evaluator -----------------------------------------------------------------
RELU_OF_RAND = Task(name="relu_of_rand", source="""
import torch, torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.rand(64, 257)]  # never negative: the identity is right on these inputs

def get_init_inputs():
    return []
""")

IDENTITY = Candidate(name="identity", source="""
import torch, torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return x.clone()
""")

SUM_AS_FLOAT = Task(name="sum_as_float", source="""
import torch, torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x), float(x.sum())

def get_inputs():
    return [torch.randn(16, 33)]

def get_init_inputs():
    return []
""")


def _sum_candidate(offset: str) -> Candidate:
    return Candidate(name=f"sum{offset}", source=f"""
import torch, torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x), float(x.sum()) {offset}
""")


@pytest.fixture(scope="module")
def verdicts():
    # policy none: these candidates use torch ops on purpose; what is tested is the comparison
    cfg = EvalConfig(device="cpu", policy="none", max_workers=2, run_timeout_s=30)
    cases = {"identity": (RELU_OF_RAND, IDENTITY),
             "sum_right": (SUM_AS_FLOAT, _sum_candidate("+ 0.0")),
             "sum_wrong": (SUM_AS_FLOAT, _sum_candidate("+ 1.0"))}
    with Evaluator(cfg) as ev:
        return dict(zip(cases, ev.judge_many(list(cases.values()))))


def test_hardening_trials_draw_their_own_inputs(verdicts):
    """Right on every input of the task's own distribution, wrong on a signed normal draw."""
    v = verdicts["identity"]
    assert v.status == "incorrect", (v.status, v.reason)
    assert v.trials_passed >= 5 and v.trials_passed < v.trials_run, v.to_dict()["trials"]


def test_a_python_scalar_output_is_judged(verdicts):
    assert verdicts["sum_right"].status == "correct", verdicts["sum_right"].reason
    v = verdicts["sum_wrong"]
    assert v.status == "incorrect" and "output[1]" in v.reason, (v.status, v.reason)
