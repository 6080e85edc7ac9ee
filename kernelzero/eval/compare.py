"""Comparing a candidate's outputs with the reference's, in the judge's own process.

The contract, checked in this order (the first failure is the reason):
1. structure: same nesting, tuple/list lengths, and kinds (tensor vs scalar vs None);
2. tensors: exact `torch.Tensor` type (no subclass), no per-instance attributes, on the expected
   device, same shape and dtype (no broadcasting);
3. finiteness: finite wherever the reference is finite (NaN/Inf where it is not must match);
4. values: elementwise |c - r| <= atol * max(1, rms(r)) + rtol * |r| with the dtype's tolerance,
   AND a norm check
   ||c - r|| / ||r|| <= rtol, so an all-zero answer never passes for a small but non-zero output.

Integer and bool outputs must match exactly. Errors are computed in float32 (float64 outputs
in float64).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import torch

from kernelzero.eval.transport.tensorio import OtherOut, TensorOut


@dataclass
class Comparison:
    ok: bool
    reason: str = ""
    flags: list[str] = field(default_factory=list)
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0


def compare_outputs(ref, cand, tolerance_for, expected_device: str) -> Comparison:
    """`tolerance_for(dtype_name) -> (atol, rtol)`. Both sides come from `tensorio.decode`."""
    return compare_many([(ref, cand)], tolerance_for, expected_device)[0]


def compare_many(pairs, tolerance_for, expected_device: str) -> list[Comparison]:
    """`compare_outputs` of each (ref, cand) pair, with every tensor's figures read from the
    device in one transfer: each read waits for a GPU that other processes share (up to tens of
    milliseconds under load), so a reply's trials, or a timing's re-checked calls, are judged
    with one wait instead of one per tensor. Each pair's first failure, in the order the
    contract lists, is its reason, exactly as when compared alone."""
    plans = []
    for ref, cand in pairs:
        steps: list = []
        _walk(ref, cand, "output", tolerance_for, expected_device, steps)
        plans.append(steps)
    _read_figures([s for steps in plans for s in steps])
    results = []
    for steps in plans:
        res = Comparison(ok=True)
        for step in steps:
            if not res.ok:
                break
            step.finish(res)
        results.append(res)
    return results


def _fail(res: Comparison, reason: str, flag: str) -> None:
    if res.ok:
        res.ok, res.reason = False, reason
    if flag not in res.flags:
        res.flags.append(flag)


class _Failed:
    """A step whose outcome the host already knows (structure, type, shape, dtype)."""
    figures = None

    def __init__(self, reason: str, flag: str):
        self.reason, self.flag = reason, flag

    def finish(self, res: Comparison) -> None:
        _fail(res, self.reason, self.flag)


def _walk(ref, cand, where, tol, device, steps: list) -> None:
    """Queue the comparison of `cand` with `ref` as steps (host failures end the walk, as the
    first failure is the reason)."""
    if isinstance(cand, OtherOut):
        return steps.append(_Failed(f"{where} is a {cand.type_name}, not a tensor",
                                    "bad_output_type"))
    if isinstance(ref, (tuple, list)):
        if not isinstance(cand, (tuple, list)):
            return steps.append(_Failed(f"{where} should be a sequence of {len(ref)} items",
                                        "bad_structure"))
        if len(ref) != len(cand):
            return steps.append(_Failed(f"{where} has {len(cand)} items, the reference has "
                                        f"{len(ref)}", "bad_structure"))
        for i, (r, c) in enumerate(zip(ref, cand)):
            n = len(steps)
            _walk(r, c, f"{where}[{i}]", tol, device, steps)
            if any(isinstance(s, _Failed) for s in steps[n:]):
                return
        return
    if isinstance(ref, TensorOut):
        if not isinstance(cand, TensorOut):
            return steps.append(_Failed(f"{where} should be a tensor, got "
                                        f"{type(cand).__name__}", "bad_output_type"))
        return _compare_tensor_anywhere(ref, cand, where, tol, device, steps)
    if ref is None:
        if cand is not None:
            steps.append(_Failed(f"{where} should be None", "bad_structure"))
        return
    # Python scalar
    if isinstance(cand, TensorOut) or isinstance(cand, (tuple, list)) or cand is None:
        return steps.append(_Failed(f"{where} should be a Python scalar", "bad_output_type"))
    atol, rtol = tol("float32")
    if not _close_scalar(float(ref), float(cand), atol, rtol):
        steps.append(_Failed(f"{where} is {cand!r}, the reference gives {ref!r}",
                             "value_mismatch"))


def _close_scalar(r: float, c: float, atol: float, rtol: float) -> bool:
    if r != r:
        return c != c
    return abs(c - r) <= atol + rtol * abs(r)


def _compare_tensor_anywhere(ref: TensorOut, cand: TensorOut, where, tol, device, steps) -> None:
    """Compare on the tensors' device; if the GPU is out of memory (other workers hold it), on
    host copies instead: a full GPU must never turn into a verdict, nor break the judge."""
    n = len(steps)
    try:
        return _compare_tensor(ref, cand, where, tol, device, steps)
    except torch.OutOfMemoryError:
        del steps[n:]
        torch.cuda.empty_cache()
    host = [TensorOut(x.tensor.cpu(), x.device, x.exact_type, x.instance_attrs) for x in (ref, cand)]
    return _compare_tensor(host[0], host[1], where, tol, device, steps)


def _compare_tensor(ref: TensorOut, cand: TensorOut, where, tol, device, steps: list) -> None:
    r, c = ref.tensor, cand.tensor
    if not cand.exact_type:
        return steps.append(_Failed(f"{where} is a tensor subclass; an exact torch.Tensor is "
                                    "required", "tensor_subclass"))
    if cand.instance_attrs:
        return steps.append(_Failed(f"{where} carries per-instance attributes "
                                    f"({', '.join(cand.instance_attrs[:3])})", "instance_override"))
    if cand.device != device:
        return steps.append(_Failed(f"{where} is on {cand.device}, expected {device}",
                                    "wrong_device"))
    if tuple(c.shape) != tuple(r.shape):
        return steps.append(_Failed(f"{where} has shape {tuple(c.shape)}, the reference "
                                    f"{tuple(r.shape)}", "shape_mismatch"))
    if c.dtype != r.dtype:
        return steps.append(_Failed(f"{where} has dtype {str(c.dtype)[6:]}, the reference "
                                    f"{str(r.dtype)[6:]}", "dtype_mismatch"))
    if not (r.is_floating_point() or r.is_complex()):
        return steps.append(_ExactStep(r, c, where))
    if r.numel() == 0:
        return
    steps.append(_CloseStep(r, c, where, tol))


class _ExactStep:
    """Integer and bool outputs: the count of differing values, read with the others."""

    def __init__(self, r, c, where):
        self.r, self.where = r, where
        self.figures = (r != c).sum().to(torch.float64).reshape(1)

    def finish(self, res: Comparison) -> None:
        n = int(self.values[0])
        if n:
            _fail(res, f"{self.where}: {n} of {self.r.numel()} integer values differ",
                  "value_mismatch")


class _CloseStep:
    """Float and complex outputs: whether both sides are finite and the error figures, queued
    on the tensors' device and read with the others; the error figures are only used when
    both are finite (else recomputed on the finite positions). Computed in chunks of
    CHUNK elements, so the scratch stays small beside outputs of gigabytes."""

    def __init__(self, r, c, where, tol):
        self.r, self.c, self.where = r, c, where
        self.atol, self.rtol = tol(str(r.dtype).removeprefix("torch."))
        self.figures = _error_figures(r, c, self.atol, self.rtol)

    def finish(self, res: Comparison) -> None:
        try:
            return self._finish(res)
        except torch.OutOfMemoryError:  # the slow paths below allocate: judged on host copies
            torch.cuda.empty_cache()
        self.r, self.c = self.r.cpu(), self.c.cpu()
        self._finish(res)

    def _finish(self, res: Comparison) -> None:
        r, c, where, rtol = self.r, self.c, self.where, self.rtol
        all_fin, c_all_fin, *figures = self.values
        finite_only = not all_fin or not c_all_fin
        if finite_only:
            bad_fin, differs = _non_finite_report(r, c)
            if bad_fin:
                return _fail(res, f"{where} has {bad_fin} NaN/Inf values where the "
                                  "reference is finite", "non_finite")
            # Non-finite reference positions must be matched exactly (same NaN / same signed Inf).
            if differs:
                return _fail(res, f"{where} differs where the reference is NaN/Inf",
                             "value_mismatch")
            figures = _error_figures(r, c, self.atol, rtol, finite_only=True).tolist()[2:]
        atol, max_abs, excess, ref_norm, err_norm, max_rel = figures
        res.max_abs_err = max(res.max_abs_err, max_abs)
        res.max_rel_err = max(res.max_rel_err, max_rel)
        if excess > 0:  # slow path: only on failure
            n_bad, idx = _excess_report(r, c, atol, rtol, finite_only)
            return _fail(res, f"{where}: {n_bad} of {self.r.numel()} values exceed the "
                              f"tolerance (max abs err {max_abs:.3g}, atol {atol:g}, rtol "
                              f"{rtol:g}; first at flat index {idx})", "value_mismatch")
        if ref_norm > 0:
            rel_norm = err_norm / ref_norm
            if rel_norm > rtol:
                _fail(res, f"{where}: relative error norm {rel_norm:.3g} exceeds {rtol:g} "
                           "(the output is wrong relative to the reference's magnitude)",
                      "relative_norm_mismatch")


CHUNK = 1 << 25  # elements compared at a time (the scratch: a few float32 tensors of this size)


def _chunks(r, c, finite_only: bool = False):
    """(r, c) chunk pairs of the flattened outputs in the arithmetic the errors are computed
    in: float32 arithmetic is exact enough to judge tolerances >= 1e-7 and several times faster
    than float64 on large outputs; float64 and complex outputs keep their precision (complex
    as real pairs). `finite_only`: only the positions where the reference is finite."""
    wide = torch.float64 if r.dtype in (torch.float64, torch.complex128) else torch.float32
    rf, cf = r.reshape(-1), c.reshape(-1)
    for i in range(0, rf.numel(), CHUNK):
        rc, cc = rf[i:i + CHUNK], cf[i:i + CHUNK]
        if rc.is_complex():
            rc, cc = torch.view_as_real(rc).reshape(-1), torch.view_as_real(cc).reshape(-1)
        rc, cc = rc.to(wide), cc.to(wide)
        if finite_only:
            keep = torch.isfinite(rc)
            rc, cc = rc[keep], cc[keep]
        yield rc, cc


def _error_figures(r, c, atol: float, rtol: float, finite_only: bool = False):
    """(r finite, c finite, scaled atol, max abs err, worst excess over the tolerance, ||r||,
    ||c - r||, max rel err) as one tensor on the device. atol is relative to the output's
    scale once that exceeds 1 (its RMS): rounding errors of legitimate kernels grow with the
    magnitudes involved (long dot products, heavy-tailed inputs). Two passes over the chunks:
    the scale first, then the errors against it."""
    dev = r.device
    norms, n, fin = [], 0, []
    for rc, cc in _chunks(r, c, finite_only):
        norms.append(torch.linalg.vector_norm(rc))
        n += rc.numel()
        if rc.numel():  # max propagates NaN and Inf
            fin.append(torch.stack([rc.abs().amax(), cc.abs().amax()]))
    wide = torch.float64 if r.dtype in (torch.float64, torch.complex128) else torch.float32
    finite = (torch.stack(fin).amax(0).isfinite() if fin
              else torch.ones(2, dtype=torch.bool, device=dev)).to(wide)
    if not n:
        return torch.cat([finite, torch.tensor([atol, 0.0, -1.0, 0.0, 0.0, 0.0], dtype=wide,
                                               device=dev)])
    atol_t = (torch.linalg.vector_norm(torch.stack(norms)) / n ** 0.5).clamp_min(1.0) * atol
    parts = []
    for rc, cc in _chunks(r, c, finite_only):
        if not rc.numel():
            continue
        diff = (cc - rc).abs_()
        mag = rc.abs()
        parts.append(torch.stack([diff.amax(), torch.sub(diff, mag, alpha=rtol).amax(),
                                  torch.linalg.vector_norm(mag), torch.linalg.vector_norm(diff),
                                  diff.div_(mag.clamp_min_(atol_t)).amax()]))
    p = torch.stack(parts)
    return torch.cat([finite, torch.stack([
        atol_t, p[:, 0].amax(), p[:, 1].amax() - atol_t, torch.linalg.vector_norm(p[:, 2]),
        torch.linalg.vector_norm(p[:, 3]), p[:, 4].amax()])])


def _non_finite_report(r, c) -> tuple[int, bool]:
    """(values NaN/Inf where the reference is finite, whether any non-finite reference value
    is not matched exactly), chunk by chunk."""
    bad, differs = 0, False
    for rc, cc in _chunks(r, c):
        r_fin = torch.isfinite(rc)
        bad += int((r_fin & ~torch.isfinite(cc)).sum())
        nf = ~r_fin
        if bool(nf.any()):
            same = (torch.isnan(rc) & torch.isnan(cc)) | (rc == cc)
            differs = differs or not bool(same[nf].all())
    return bad, differs


def _excess_report(r, c, atol: float, rtol: float, finite_only: bool) -> tuple[int, int]:
    """(values over the tolerance, the first one's flat index among the compared positions)."""
    n_bad, first, seen = 0, -1, 0
    for rc, cc in _chunks(r, c, finite_only):
        bad = (cc - rc).abs_() > rc.abs().mul_(rtol).add_(atol)
        k = int(bad.sum())
        if k and first < 0:
            first = seen + int(torch.nonzero(bad)[0])
        n_bad += k
        seen += rc.numel()
    return n_bad, first


def _read_figures(steps: list) -> None:
    """Every queued step's figures, one transfer per device (`step.values`, a list)."""
    by_device: dict = {}
    for s in steps:
        if s.figures is not None:
            by_device.setdefault(s.figures.device, []).append(s)
    for group in by_device.values():
        flat = torch.cat([s.figures.to(torch.float64) for s in group]).tolist()
        at = 0
        for s in group:
            n = s.figures.numel()
            s.values, at = flat[at:at + n], at + n
            s.figures = None


def warm_up_comparison(tolerance_for) -> None:
    """The judge's CUDA context, and the kernels a comparison of float outputs launches, made
    ready before the first batch (instead of under the GPU lock by its first outputs)."""
    x = torch.randn(4096, device="cuda")
    ref, cand = TensorOut(x, "cuda", True, []), TensorOut(x.clone(), "cuda", True, [])
    compare_outputs(ref, cand, tolerance_for, "cuda")
    torch.cuda.synchronize()
