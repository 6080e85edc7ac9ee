"""The degenerate-task audit: flag reference modules that cannot measure a kernel.

A reference is degenerate when a cheap, wrong candidate would be judged correct, or when no
candidate can be. Flags (reason codes):
    probe_failed      the reference does not load or run in the sandbox
    non_finite        an output holds NaN/Inf on the task's own inputs
    nondeterministic  two calls on the same inputs differ (dropout with training=True, RNG use)
    zeros / constant  an all-zero / a constant-filled tensor would pass the comparison
    identity          returning an input unchanged would pass
    seed_independent  the outputs for two different input seeds match (a stored tensor would pass)
    ignores_input     an input can be changed without changing the output
    ignores_weights   the module has parameters but perturbing them does not change the output
    small_output      (almost) every output value is within the absolute tolerance of zero
    weights_constant  (warning unless `strict_weights`) the parameters do not depend on the
                      initialisation seed (e.g. norm layers' ones/zeros), so a kernel can
                      hard-code them
"Would pass" mirrors the evaluator's comparison (eval/compare.py): elementwise
|c - r| <= atol + rtol |r| and ||c - r|| / ||r|| <= rtol, at the evaluator's tolerance.

How: one `Evaluator.probe_reference` call on a *wrapped* copy of the task, on two input seeds.
The wrapper renames the task's `Model` (so `super(Model, self)` keeps working) and defines a new
`Model` whose forward calls the original on the real inputs, again on fresh copies of them (the
determinism check, with the RNG advanced in between), on a deep copy with perturbed parameters,
on a copy built under another init seed, and once per input with that input permuted and scaled.
Outputs and inputs above KEEP elements (audit_wrapper.py) come back as a fixed sample (same
positions everywhere), and the wrapper holds one call's outputs at a time: the probe's memory is
the task's inputs, two copies of them and one call (admitted for it like any reference run,
evaluator.py).
`audit_many` runs several wrapped tasks as one bundle module: one sandbox start for all.
Everything runs in the evaluator's sandbox; nothing of the task is imported here.

Here: the flags, `audit_task`, `audit_many`, and `_judge`, which runs the checks in turn. The
wrapper's and the bundle's code, and their output layouts: audit_wrapper.py; the checks:
audit_checks.py.

Not covered: hostile references that detect the wrapper (a reference is the Proposer's or a
benchmark's code, not an adversary's); timing (the Proposer's validation times the original).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kernelzero.eval.audit_checks import (_check_each_seed, _check_inputs_matter, _check_output,
                                          _check_parameters, _figures, _Reasons)
from kernelzero.eval.audit_wrapper import _BUNDLE, _split, _unbundle, wrapped_source
from kernelzero.tasks.task import Task

CODES = ("probe_failed", "non_finite", "nondeterministic", "zeros", "constant", "identity",
         "seed_independent", "ignores_input", "ignores_weights", "small_output", "weights_constant")


@dataclass
class AuditResult:
    """ok: no flag raised. reasons: one `code: explanation` line per flag. details: figures."""

    ok: bool
    reasons: list[str] = field(default_factory=list)
    details: dict = field(default_factory=dict)

    @property
    def codes(self) -> list[str]:
        return [r.split(":", 1)[0] for r in self.reasons]

    def to_dict(self) -> dict:
        return {"ok": self.ok, "reasons": self.reasons, "details": self.details}


def _tolerance(evaluator, dtype: torch.dtype, override):
    if override is not None:
        return override
    name = str(dtype).removeprefix("torch.")
    return evaluator.config.tolerance_for(name)


def audit_task(evaluator, task: Task, seeds: tuple[int, int] = (1234, 5678),
               tolerance: tuple[float, float] | None = None, init_seed: int = 0,
               min_significant: float = 0.05, strict_weights: bool = False) -> AuditResult:
    """Audit one reference module. `tolerance` overrides the evaluator's (atol, rtol).

    min_significant: `small_output` when fewer than this share of an output's values exceed the
    absolute tolerance. strict_weights: make `weights_constant` a failing flag, not a warning.
    """
    if len(set(seeds)) != 2:
        raise ValueError("audit_task needs two different input seeds")
    try:
        variant = Task.from_source(wrapped_source(task.source), name=f"{task.name}_audit")
    except SyntaxError as e:
        return AuditResult(False, [f"probe_failed: the reference does not parse: {e.msg}"])
    probe = evaluator.probe_reference(variant, seeds=list(seeds), init_seed=init_seed, time=False)
    if not probe.ok:
        return AuditResult(False, [f"probe_failed: {probe.reason}"])
    return _judge(evaluator, probe.outputs, probe.mutated_inputs, probe.peak_mem_bytes, seeds,
                  tolerance, min_significant, strict_weights)


def audit_many(evaluator, tasks: list[Task], seeds: tuple[int, int] = (1234, 5678),
               tolerance: tuple[float, float] | None = None, init_seed: int = 0,
               min_significant: float = 0.05, strict_weights: bool = False) -> list[AuditResult]:
    """`audit_task` for several tasks with one sandbox start: the wrapped tasks run as members
    of one bundle module (each in its own namespace, built and fed in turn). Inputs then come
    from one seeded stream per trial rather than one per task, which the checks do not mind.
    If the bundle fails to load or run, every task is audited on its own instead, so one broken
    task cannot hide the others' results. `peak_mem_bytes` and `mutated_inputs` are not split
    per task (None and [])."""
    if len(tasks) <= 1:
        return [audit_task(evaluator, t, seeds, tolerance, init_seed, min_significant, strict_weights)
                for t in tasks]
    single = (lambda t: audit_task(evaluator, t, seeds, tolerance, init_seed, min_significant,
                                   strict_weights))
    try:
        members = [wrapped_source(t.source) for t in tasks]
    except SyntaxError:
        return [single(t) for t in tasks]
    bundle = Task.from_source(_BUNDLE.replace("_KZ_MEMBERS", repr(members)), name="audit_bundle")
    probe = evaluator.probe_reference(bundle, seeds=list(seeds), init_seed=init_seed, time=False)
    if not probe.ok:
        return [single(t) for t in tasks]
    try:
        parts = [_unbundle(o) for o in probe.outputs]
    except (IndexError, ValueError, TypeError, RuntimeError):
        return [single(t) for t in tasks]
    return [_judge(evaluator, [p[i] for p in parts], [], None, seeds, tolerance,
                   min_significant, strict_weights) for i in range(len(tasks))]


def _judge(evaluator, outputs, mutated, peak, seeds, tolerance, min_significant,
           strict_weights) -> AuditResult:
    """The checks, on the wrapped outputs of each seed (with its inputs' samples)."""
    try:
        runs = [_split(o) for o in outputs]
    except (IndexError, ValueError, TypeError, RuntimeError) as e:
        return AuditResult(False, [f"probe_failed: unexpected wrapped outputs ({e})"])
    details = _figures(runs, seeds, mutated, peak)
    if not runs[0]["out"]:
        return AuditResult(False, ["probe_failed: the reference returned no tensor"], details)
    tol = (lambda r: _tolerance(evaluator, r.dtype, tolerance))
    reasons = _Reasons()
    _check_each_seed(runs, seeds, tol, reasons)
    for j in range(len(runs[0]["out"])):
        _check_output(runs, j, tol, min_significant, reasons, details)
    _check_inputs_matter(runs, seeds, tol, reasons)
    details["warnings"] = _check_parameters(runs, tol, strict_weights, reasons, details)
    return AuditResult(not reasons, list(reasons), details)
