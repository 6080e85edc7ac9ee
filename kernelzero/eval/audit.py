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
Outputs and inputs above KEEP elements come back as a fixed sample (same positions everywhere),
and the wrapper holds one call's outputs at a time: the probe's memory is the task's inputs, two
copies of them and one call (admitted for it like any reference run, evaluator.py).
`audit_many` runs several wrapped tasks as one bundle module: one sandbox start for all.
Everything runs in the evaluator's sandbox; nothing of the task is imported here.

Not covered: hostile references that detect the wrapper (a reference is the Proposer's or a
benchmark's code, not an adversary's); timing (the Proposer's validation times the original).
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass, field

import torch

from kernelzero.eval.compare import compare_outputs
from kernelzero.eval.transport.tensorio import TensorOut
from kernelzero.tasks.task import Task, parse_python

CODES = ("probe_failed", "non_finite", "nondeterministic", "zeros", "constant", "identity",
         "seed_independent", "ignores_input", "ignores_weights", "small_output", "weights_constant")

_ORIG = "_KZAuditOriginalModel"
# Outputs and inputs larger than this come back as a fixed sample of KEEP elements (the same
# positions in every section), so GPU-sized tasks do not ship gigabytes per probe, and the judge
# never holds a whole input or output; checks use the samples.
KEEP = 1 << 18



_WRAPPER = '''

# ---- appended by kernelzero.eval.audit: the audit wrapper --------------------------------------
import copy as _kz_copy
import torch as _kz_torch


_KZ_K = _KZ_KEEP


def _kz_leaves(out):
    if isinstance(out, _kz_torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _kz_leaves(o)]
    if isinstance(out, (int, float, bool)):
        return [_kz_torch.tensor(float(out))]
    return []


def _kz_pick(t):
    t = t.reshape(-1)
    n = t.numel()
    if n <= _KZ_K:
        return t
    idx = (_kz_torch.arange(_KZ_K, dtype=_kz_torch.int64) * 1000003) % n
    return t[idx.to(t.device)]


def _kz_flat(out):
    return [_kz_pick(t) for t in _kz_leaves(out)]


def _kz_vary(a):
    if not isinstance(a, _kz_torch.Tensor) or a.numel() < 2:
        return None
    n = a.numel()
    perm = (_kz_torch.arange(n, device=a.device, dtype=_kz_torch.int64) * 1000003) % n
    b = a.reshape(-1)[perm].reshape(a.shape)  # a fixed shuffle, cheap on any device
    if a.is_floating_point():
        b = b * 1.25
    return None if _kz_torch.equal(a, b) else b


class Model(_kz_torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.kz_ref = _ORIG(*args, **kwargs)
        self.kz_alt = None
        self.kz_seeded = None
        if any(True for _ in self.kz_ref.parameters()):
            self.kz_alt = _kz_copy.deepcopy(self.kz_ref)
            with _kz_torch.no_grad():
                for p in self.kz_alt.parameters():
                    if p.is_floating_point():
                        p.add_(_kz_torch.randn_like(p) * (p.abs().mean() * 0.5 + 0.05))
            _kz_torch.manual_seed(987654321)
            self.kz_seeded = _ORIG(*args, **kwargs)

    def forward(self, *args):
        T = _kz_torch
        spare = [a.clone() if isinstance(a, T.Tensor) else a for a in args]

        def fresh():
            return [a.clone() if isinstance(a, T.Tensor) else a for a in spare]

        leaves = _kz_leaves(self.kz_ref(*args))
        out1 = [_kz_pick(t) for t in leaves]
        res = [T.tensor([len(out1), len(spare)])]
        res += [T.tensor([t.dim()] + list(t.shape)) for t in leaves] + out1
        del leaves  # from here on one call's outputs at a time
        res += _kz_flat(self.kz_ref(*fresh()))
        for extra in (self.kz_alt, self.kz_seeded):
            if extra is None:
                res += [T.zeros(1)] + [T.zeros_like(o) for o in out1]
            else:
                res += [T.ones(1)] + _kz_flat(extra(*fresh()))
        for i in range(len(spare)):
            varied = _kz_vary(spare[i])
            if varied is None:
                res += [T.zeros(1)] + [T.zeros_like(o) for o in out1]
            else:
                xs = fresh()
                xs[i] = varied
                del varied
                res += [T.ones(1)] + _kz_flat(self.kz_ref(*xs))
                del xs
        for a in spare:  # the inputs, as samples: the judge never holds a whole input
            if isinstance(a, T.Tensor):
                res += [T.tensor([1, a.dim()] + list(a.shape)), _kz_pick(a)]
            else:
                res += [T.tensor([0]), T.zeros(1)]
        return tuple(res)
'''.replace("_ORIG", _ORIG).replace("_KZ_KEEP", str(KEEP))


_BUNDLE = '''
import torch as _kz_bt

_KZ_SOURCES = _KZ_MEMBERS
_KZ_NS = []
for _kz_src in _KZ_SOURCES:
    _kz_ns = {"__name__": "kz_audit_member"}
    exec(compile(_kz_src, "<kz-audit-member>", "exec"), _kz_ns)
    _KZ_NS.append(_kz_ns)
_KZ_COUNTS = []


class Model(_kz_bt.nn.Module):
    def __init__(self):
        super().__init__()
        self.kz_members = _kz_bt.nn.ModuleList(
            [ns["Model"](*ns["get_init_inputs"]()) for ns in _KZ_NS])

    def forward(self, *xs):
        res, pos = [], 0
        for m, k in zip(self.kz_members, _KZ_COUNTS):
            out = list(m(*xs[pos:pos + k]))
            pos += k
            res += [_kz_bt.tensor([len(out)])] + out
        return tuple(res)


def get_inputs():
    out = []
    _KZ_COUNTS.clear()
    for ns in _KZ_NS:
        xs = list(ns["get_inputs"]())
        _KZ_COUNTS.append(len(xs))
        out += xs
    return out


def get_init_inputs():
    return []
'''


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


class _Rename(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == "Model":
            node.id = _ORIG
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name == "Model":
            node.name = _ORIG
        self.generic_visit(node)
        return node


def wrapped_source(source: str) -> str:
    """The task's source with `Model` renamed and the audit wrapper appended."""
    tree = _Rename().visit(parse_python(source))
    return ast.unparse(tree) + "\n" + _WRAPPER


def would_pass(cand: torch.Tensor, ref: torch.Tensor, atol: float, rtol: float) -> bool:
    """Whether the evaluator's comparison (compare.py, the same code: atol scaled by the
    output's RMS, the norm check, NaN/Inf matched) would accept `cand` for `ref`. A reference
    with no finite value tells nothing: False."""
    if tuple(cand.shape) != tuple(ref.shape):
        return False
    if ref.is_floating_point() and not bool(torch.isfinite(ref).any()):
        return False
    dev = ref.device.type
    wrap = (lambda t: TensorOut(t, dev, True, []))
    return compare_outputs(wrap(ref), wrap(cand.to(device=ref.device, dtype=ref.dtype)),
                           lambda _dtype: (atol, rtol), dev).ok


def _tolerance(evaluator, dtype: torch.dtype, override):
    if override is not None:
        return override
    name = str(dtype).removeprefix("torch.")
    return evaluator.config.tolerance_for(name)


def _split(flat: list) -> dict:
    """Undo the wrapper's layout: header [k, n_inputs], k shapes, then sections of k outputs,
    then per input its header [is_tensor, dim, *shape] and sample (`inputs_seen`: (shape,
    sample) or None for a non-tensor input)."""
    k, n_in = (int(v) for v in flat[0].tolist())
    pos = 1

    def take(n):
        nonlocal pos
        part = flat[pos:pos + n]
        pos += n
        return part

    shapes = [tuple(int(v) for v in t.tolist()[1:]) for t in take(k)]
    out = {"shapes": shapes, "out": take(k), "again": take(k)}
    for name in ("alt", "seeded"):
        flag, part = bool(take(1)[0].item()), take(k)
        out[name] = part if flag else None
    out["inputs"] = []
    for _ in range(n_in):
        flag, part = bool(take(1)[0].item()), take(k)
        out["inputs"].append(part if flag else None)
    out["inputs_seen"] = []
    for _ in range(n_in):
        head, sample = take(2)
        head = [int(v) for v in head.tolist()]
        out["inputs_seen"].append((tuple(head[2:2 + head[1]]), sample) if head[0] else None)
    if pos != len(flat):
        raise ValueError(f"{len(flat) - pos} unexpected trailing outputs")
    return out


def _all_pass(cands: list, refs: list, tol) -> bool:
    return all(would_pass(c, r, *tol(r)) for c, r in zip(cands, refs))


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


def _unbundle(flat: list) -> list[list]:
    """Bundle outputs -> per member, its wrapped outputs."""
    members, pos = [], 0
    while pos < len(flat):
        n = int(flat[pos].item())
        members.append(flat[pos + 1:pos + 1 + n])
        pos += 1 + n
    return members


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


class _Reasons(list):
    """The flags raised, one `code: explanation` line each, in the order raised, each once."""

    def flag(self, code: str, text: str) -> None:
        line = f"{code}: {text}"
        if line not in self:
            self.append(line)


def _figures(runs: list, seeds, mutated, peak) -> dict:
    """The figures every audit reports: the outputs' and inputs' shapes, dtypes and bytes, the
    inputs the reference changed and the memory it held at its peak."""
    outs, inputs = runs[0]["out"], runs[0]["inputs_seen"]
    return {"seeds": list(seeds), "n_outputs": len(outs),
            "output_shapes": [list(sh) for sh in runs[0]["shapes"]],
            "output_dtypes": [str(o.dtype).removeprefix("torch.") for o in outs],
            "output_bytes": sum(math.prod(sh) * o.element_size()
                                for sh, o in zip(runs[0]["shapes"], outs)),
            "input_shapes": [list(x[0]) if x is not None else "non-tensor" for x in inputs],
            "input_bytes": sum(math.prod(x[0]) * x[1].element_size() for x in inputs
                               if x is not None),
            "mutated_inputs": mutated, "peak_mem_bytes": peak}


def _check_each_seed(runs: list, seeds, tol, reasons: _Reasons) -> None:
    """non_finite and nondeterministic, on each seed's outputs."""
    for s, run in zip(seeds, runs):
        for j, o in enumerate(run["out"]):
            if o.is_floating_point() and not bool(torch.isfinite(o).all()):
                reasons.flag("non_finite", f"output {j} has NaN/Inf on seed {s}")
        if not _all_pass(run["again"], run["out"], tol):
            reasons.flag("nondeterministic",
                         "two calls on the same inputs gave different outputs (randomness in "
                         "forward, e.g. dropout with training=True, or hidden state)")


def _check_output(runs: list, j: int, tol, min_significant: float, reasons: _Reasons,
                  details: dict) -> None:
    """zeros, constant or small_output (a floating output; its share of values above atol goes
    to `details`), then identity, for output `j` on every seed."""
    o = runs[0]["out"][j]
    atol, _ = tol(o)
    if o.is_floating_point() and o.numel():
        fin = o[torch.isfinite(o)].double().abs()
        share = float((fin > atol).double().mean()) if fin.numel() else 0.0
        details.setdefault("significant_share", []).append(round(share, 4))
        if all(would_pass(torch.zeros_like(r["out"][j]), r["out"][j], *tol(o)) for r in runs):
            reasons.flag("zeros", f"an all-zero tensor would pass for output {j}")
        elif o.numel() > 1 and all(would_pass(_median_filled(r["out"][j]), r["out"][j], *tol(o))
                                   for r in runs):
            reasons.flag("constant", f"a constant-filled tensor would pass for output {j}")
        elif share < min_significant:
            reasons.flag("small_output",
                         f"only {share:.1%} of output {j}'s values exceed atol={atol:g}")
    seen = [r["inputs_seen"] for r in runs]
    for i, x in enumerate(seen[0]):
        if (x is not None and x[1].dtype == o.dtype and x[0] == runs[0]["shapes"][j]
                and all(inp[i] is not None and would_pass(inp[i][1], r["out"][j], *tol(o))
                        for inp, r in zip(seen, runs))):
            reasons.flag("identity", f"returning input {i} unchanged would pass for output {j}")


def _median_filled(t: torch.Tensor) -> torch.Tensor:
    """`t`'s shape filled with its median: the constant most of its values are nearest."""
    return torch.full_like(t, float(t.double().median()))


def _check_inputs_matter(runs: list, seeds, tol, reasons: _Reasons) -> None:
    """seed_independent (the outputs of the two seeds match) and ignores_input (changing an
    input leaves the outputs as they were)."""
    if _all_pass(runs[0]["out"], runs[1]["out"], tol):
        reasons.flag("seed_independent", f"outputs for seeds {seeds[0]} and {seeds[1]} match: "
                     "a stored tensor would pass")
    for i in range(len(runs[0]["inputs"])):
        tried = [r["inputs"][i] for r in runs if r["inputs"][i] is not None]
        if tried and all(_all_pass(v, r["out"], tol) for v, r in zip(
                [r["inputs"][i] for r in runs], runs) if v is not None):
            reasons.flag("ignores_input", f"changing input {i} does not change the output")


def _check_parameters(runs: list, tol, strict_weights: bool, reasons: _Reasons,
                      details: dict) -> list[str]:
    """ignores_weights, and weights_constant (a reason under `strict_weights`, else a warning);
    returns the warnings. `details` says whether the module has parameters."""
    warnings: list[str] = []
    details["has_parameters"] = runs[0]["alt"] is not None
    if not details["has_parameters"]:
        return warnings
    if all(_all_pass(r["alt"], r["out"], tol) for r in runs):
        reasons.flag("ignores_weights", "perturbing the parameters does not change the output")
    if all(_all_pass(r["seeded"], r["out"], tol) for r in runs):
        text = ("weights_constant: the output does not depend on the init seed; parameters are "
                "initialised to constants (e.g. norm ones/zeros) and a kernel could hard-code them")
        (reasons if strict_weights else warnings).append(text)
    return warnings
