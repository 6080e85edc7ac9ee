"""The validation check: one rejection code per failure, structured; healthy modules pass."""
from __future__ import annotations

import pytest

from kernelzero.eval import EvalConfig, Evaluator
from kernelzero.propose.validate import ValidationConfig, Validator, static_rejections

GOOD = '''import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 8
features = 32


class Model(nn.Module):
    def __init__(self, features):
        super().__init__()
        self.lin = nn.Linear(features, features)

    def forward(self, x):
        return F.gelu(self.lin(x))


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features]
'''


def test_static_codes():
    assert static_rejections(GOOD, ["linear", "gelu"]) == []
    assert [r.code for r in static_rejections("def (", ["relu"])] == ["parse"]
    assert [r.code for r in static_rejections("import torch\n", ["relu"])] == ["format"]
    missing = static_rejections(GOOD, ["linear", "gelu", "softmax"])
    assert [r.code for r in missing] == ["api_missing"] and "softmax" in missing[0].message
    extra = static_rejections(GOOD.replace("F.gelu(self.lin(x))", "torch.einsum('ij->ij', F.gelu(self.lin(x))) * 2"),
                              ["linear", "gelu"])
    assert [r.code for r in extra] == ["api_extra"]
    assert "torch.einsum" in extra[0].message and "mul" in extra[0].message


def test_glue_is_allowed():
    src = GOOD.replace("F.gelu(self.lin(x))", "F.gelu(self.lin(x.reshape(8, 32))).contiguous().view(8, -1)")
    assert static_rejections(src, ["linear", "gelu"]) == []


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalConfig(device="cpu", max_workers=1)) as e:
        yield e


def test_good_module_passes_then_its_rename_is_a_duplicate(ev):
    v = Validator(ev, ValidationConfig(target="cpu"))
    res = v.validate(GOOD, ["linear", "gelu"])
    assert res.ok, res.reasons
    assert res.figures["runtime_ms"] is None  # CPU: nothing timed, nothing invented
    renamed = GOOD.replace("self.lin", "self.fc").replace("features", "width")
    dup = v.validate(renamed, ["linear", "gelu"])
    assert dup.codes == ["duplicate"]


def test_sandbox_failures_are_structured(ev):
    v = Validator(ev, ValidationConfig(target="cpu"))
    crash = v.validate(GOOD.replace("torch.randn(batch_size, features)", "torch.randn(batch_size, 7)"),
                       ["linear", "gelu"])
    assert crash.codes == ["sandbox_error"] and "shape" in crash.reasons[0].lower() or "mat" in crash.reasons[0]
    const = v.validate(GOOD.replace("F.gelu(self.lin(x))", "F.gelu(self.lin(x) * 0.0)"),
                       ["linear", "gelu", "mul"])
    assert "zeros" in const.codes or "constant" in const.codes


def test_memory_cap(ev):
    v = Validator(ev, ValidationConfig(target="cpu", memory_cap_bytes=1000))
    res = v.validate(GOOD, ["linear", "gelu"])
    assert res.codes == ["memory"]


class _TimedEvaluator:
    """The real CPU evaluator for the audit, plus a stated runtime for timed probes (as on a GPU)."""

    def __init__(self, ev, runtime_ms):
        from types import SimpleNamespace
        self.ev, self.runtime_ms = ev, runtime_ms
        self.config = SimpleNamespace(timed=True, tolerance_for=ev.config.tolerance_for)
        self.timed_calls = 0

    def probe_reference(self, task, seeds, init_seed=0, return_inputs=False, time=False):
        probe = self.ev.probe_reference(task, seeds, init_seed, return_inputs, False)
        if time:
            from kernelzero.eval import Timing
            self.timed_calls += 1
            probe.runtime_ms = Timing.from_samples([self.runtime_ms] * 3)
        return probe


@pytest.mark.parametrize("runtime_ms,ok", [(2.0, True), (0.001, False), (500.0, False)])
def test_runtime_band_on_a_timing_device(ev, runtime_ms, ok):
    timed = _TimedEvaluator(ev, runtime_ms)
    res = Validator(timed, ValidationConfig(target="h100")).validate(GOOD, ["linear", "gelu"])
    assert res.ok is ok and timed.timed_calls == 1
    assert res.figures["runtime_ms"] == runtime_ms
    if not ok:
        assert res.codes == ["runtime"]
