"""The audit's checks: the flags of audit.py, each raised on the wrapped reference's outputs
(audit_wrapper.py) when a cheap, wrong stand-in `would_pass` the evaluator's comparison for them
(or, for non_finite, when the reference's own outputs are not finite), with the figures every
audit reports (`_figures`).

Each check adds to `_Reasons`, once per line; `audit._judge` runs them in turn. Does not cover
running the probe (audit.py) nor the wrapper's code and output layout (audit_wrapper.py).
"""
from __future__ import annotations

import math

import torch

from kernelzero.eval.compare import compare_outputs
from kernelzero.eval.transport.tensorio import TensorOut


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


def _all_pass(cands: list, refs: list, tol) -> bool:
    return all(would_pass(c, r, *tol(r)) for c, r in zip(cands, refs))


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
