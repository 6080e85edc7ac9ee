"""The degenerate-task audit: each flag has a fixture that must raise it; healthy tasks pass.

Every case runs the reference in the evaluator's sandbox (CPU), one probe per task.
"""
from __future__ import annotations

import pytest
import torch

from kernelzero.eval import EvalConfig, Evaluator
from kernelzero.eval.audit import audit_task
from kernelzero.eval.audit_checks import would_pass
from kernelzero.eval.audit_wrapper import wrapped_source
from kernelzero.tasks import Task

HEAD = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"


def task(forward: str, init: str = "", inputs: str = "[torch.randn(8, 32)]",
         init_inputs: str = "[]", sig: str = "", super_call: str = "super().__init__()") -> Task:
    src = HEAD + f"""

class Model(nn.Module):
    def __init__(self{sig}):
        {super_call}
{init or '        pass'}

    def forward(self, *xs):
{forward}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return {init_inputs}
"""
    return Task.from_source(src, name="fixture")


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalConfig(device="cpu", max_workers=1)) as e:
        yield e


HEALTHY_LINEAR = task("        return torch.relu(self.lin(xs[0]))",
                      init="        self.lin = nn.Linear(32, 16)",
                      super_call="super(Model, self).__init__()")


def test_healthy_linear_passes(ev):
    res = audit_task(ev, HEALTHY_LINEAR)
    assert res.ok, res.reasons
    assert res.details["has_parameters"] and res.details["output_shapes"] == [[8, 16]]


def test_healthy_two_input_task_passes(ev):  # see also the 0-dim shape test below
    t = task("        return F.mse_loss(torch.tanh(xs[0]), xs[1])",
             inputs="[torch.randn(8, 32), torch.randn(8, 32)]")
    res = audit_task(ev, t)
    assert res.ok, res.reasons


def test_zero_output_flagged(ev):
    res = audit_task(ev, task("        return xs[0] * 0.0"))
    assert "zeros" in res.codes and not res.ok


def test_constant_output_flagged(ev):
    res = audit_task(ev, task("        return torch.softmax(xs[0], dim=1).sum(dim=1)"))
    assert "constant" in res.codes


def test_identity_flagged(ev):
    res = audit_task(ev, task("        return torch.clamp(xs[0], -100.0, 100.0)"))
    assert "identity" in res.codes


def test_ignored_input_flagged(ev):
    t = task("        return torch.relu(xs[0]) * 2.0 + 0.0 * xs[1].sum()",
             inputs="[torch.randn(8, 32), torch.randn(8, 32)]")
    res = audit_task(ev, t)
    assert "ignores_input" in res.codes
    assert "input 1" in " ".join(res.reasons) and "input 0" not in " ".join(res.reasons)


def test_dropout_in_train_mode_flagged(ev):
    res = audit_task(ev, task("        return F.dropout(torch.relu(xs[0]), p=0.5, training=True)"))
    assert "nondeterministic" in res.codes


def test_seed_independent_output_flagged(ev):
    t = task("        return self.w * 1.0 + 0.0 * xs[0].sum()",
             init="        self.w = nn.Parameter(torch.randn(4, 4))")
    res = audit_task(ev, t)
    assert "seed_independent" in res.codes


def test_ignored_weights_and_non_finite_flagged(ev):
    t = task("        return torch.log(xs[0]) + 0.0 * self.lin.weight.sum() * 0.0",
             init="        self.lin = nn.Linear(4, 4)")
    res = audit_task(ev, t)
    assert "non_finite" in res.codes and "ignores_weights" in res.codes


def test_tiny_output_flagged(ev):
    res = audit_task(ev, task("        return xs[0] * 1e-6 + 1e-3 * (xs[0] > 3).float()"))
    assert {"zeros", "small_output"} & set(res.codes)


def test_constant_init_weights_are_a_warning_not_a_failure(ev):
    t = task("        return self.norm(xs[0])", init="        self.norm = nn.LayerNorm(32)")
    res = audit_task(ev, t)
    assert res.ok, res.reasons
    assert any(w.startswith("weights_constant") for w in res.details["warnings"])
    strict = audit_task(ev, t, strict_weights=True)
    assert "weights_constant" in strict.codes


def test_broken_reference_reported(ev):
    res = audit_task(ev, task("        raise RuntimeError('boom')"))
    assert res.codes == ["probe_failed"] and "boom" in res.reasons[0]


def test_would_pass_mirrors_the_norm_rule():
    ref = torch.full((100,), 5e-5)
    assert would_pass(torch.zeros(100), ref, 1e-4, 1e-4) is False  # norm check catches it
    assert would_pass(ref.clone(), ref, 1e-4, 1e-4)
    assert would_pass(torch.zeros(3), torch.zeros(3), 1e-4, 1e-4)


def test_would_pass_scales_atol_by_the_outputs_rms_as_the_comparison_does():
    """A large output (RMS 1000) with a constant offset of 0.05 where it is 0: the evaluator
    accepts it (atol 1e-4 x 1000), so the audit must count it as passing too."""
    ref = torch.full((1000,), 1000.0)
    ref[:10] = 0.0
    cand = ref.clone()
    cand[:10] = 0.05
    assert would_pass(cand, ref, 1e-4, 1e-4)
    cand[:10] = 0.5
    assert not would_pass(cand, ref, 1e-4, 1e-4)


def test_wrapper_keeps_super_model_self_working():
    src = wrapped_source(HEALTHY_LINEAR.source)
    assert "super(_KZAuditOriginalModel, self)" in src and "class Model(_kz_torch.nn.Module)" in src


def test_large_outputs_are_sampled_but_shapes_are_exact(ev):
    res = audit_task(ev, task("        return torch.clamp(xs[0], -100.0, 100.0)",
                              inputs="[torch.randn(3, 300000)]"))
    assert "identity" in res.codes
    assert res.details["output_shapes"] == [[3, 300000]]
    assert res.details["output_bytes"] == 3 * 300000 * 4


def test_scalar_output_shape_is_reported_as_zero_dim(ev):
    t = task("        return F.mse_loss(torch.tanh(xs[0]), xs[1])",
             inputs="[torch.randn(8, 32), torch.randn(8, 32)]")
    assert audit_task(ev, t).details["output_shapes"] == [[]]
