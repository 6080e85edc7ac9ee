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

from kernelzero.eval.tensorio import OtherOut, TensorOut


@dataclass
class Comparison:
    ok: bool
    reason: str = ""
    flags: list[str] = field(default_factory=list)
    max_abs_err: float = 0.0
    max_rel_err: float = 0.0


def compare_outputs(ref, cand, tolerance_for, expected_device: str) -> Comparison:
    """`tolerance_for(dtype_name) -> (atol, rtol)`. Both sides come from `tensorio.decode`."""
    res = Comparison(ok=True)
    _walk(ref, cand, "output", tolerance_for, expected_device, res)
    return res


def _fail(res: Comparison, reason: str, flag: str) -> None:
    if res.ok:
        res.ok, res.reason = False, reason
    if flag not in res.flags:
        res.flags.append(flag)


def _walk(ref, cand, where, tol, device, res: Comparison) -> None:
    if not res.ok:
        return
    if isinstance(cand, OtherOut):
        return _fail(res, f"{where} is a {cand.type_name}, not a tensor", "bad_output_type")
    if isinstance(ref, (tuple, list)):
        if not isinstance(cand, (tuple, list)):
            return _fail(res, f"{where} should be a sequence of {len(ref)} items", "bad_structure")
        if len(ref) != len(cand):
            return _fail(res, f"{where} has {len(cand)} items, the reference has {len(ref)}",
                         "bad_structure")
        for i, (r, c) in enumerate(zip(ref, cand)):
            _walk(r, c, f"{where}[{i}]", tol, device, res)
        return
    if isinstance(ref, TensorOut):
        if not isinstance(cand, TensorOut):
            return _fail(res, f"{where} should be a tensor, got {type(cand).__name__}",
                         "bad_output_type")
        return _compare_tensor_anywhere(ref, cand, where, tol, device, res)
    if ref is None:
        if cand is not None:
            _fail(res, f"{where} should be None", "bad_structure")
        return
    # Python scalar
    if isinstance(cand, TensorOut) or isinstance(cand, (tuple, list)) or cand is None:
        return _fail(res, f"{where} should be a Python scalar", "bad_output_type")
    atol, rtol = tol("float32")
    if not _close_scalar(float(ref), float(cand), atol, rtol):
        _fail(res, f"{where} is {cand!r}, the reference gives {ref!r}", "value_mismatch")


def _close_scalar(r: float, c: float, atol: float, rtol: float) -> bool:
    if r != r:
        return c != c
    return abs(c - r) <= atol + rtol * abs(r)


def _compare_tensor_anywhere(ref: TensorOut, cand: TensorOut, where, tol, device, res) -> None:
    """Compare on the tensors' device; if the GPU is out of memory (other workers hold it), on
    host copies instead: a full GPU must never turn into a verdict, nor break the judge."""
    try:
        return _compare_tensor(ref, cand, where, tol, device, res)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
    host = [TensorOut(x.tensor.cpu(), x.device, x.exact_type, x.instance_attrs) for x in (ref, cand)]
    return _compare_tensor(host[0], host[1], where, tol, device, res)


def _compare_tensor(ref: TensorOut, cand: TensorOut, where, tol, device, res: Comparison) -> None:
    r, c = ref.tensor, cand.tensor
    if not cand.exact_type:
        return _fail(res, f"{where} is a tensor subclass; an exact torch.Tensor is required",
                     "tensor_subclass")
    if cand.instance_attrs:
        return _fail(res, f"{where} carries per-instance attributes "
                          f"({', '.join(cand.instance_attrs[:3])})", "instance_override")
    if cand.device != device:
        return _fail(res, f"{where} is on {cand.device}, expected {device}", "wrong_device")
    if tuple(c.shape) != tuple(r.shape):
        return _fail(res, f"{where} has shape {tuple(c.shape)}, the reference {tuple(r.shape)}",
                     "shape_mismatch")
    if c.dtype != r.dtype:
        return _fail(res, f"{where} has dtype {str(c.dtype)[6:]}, the reference "
                          f"{str(r.dtype)[6:]}", "dtype_mismatch")
    if not (r.is_floating_point() or r.is_complex()):
        if not torch.equal(r, c):
            n = int((r != c).sum())
            _fail(res, f"{where}: {n} of {r.numel()} integer values differ", "value_mismatch")
        return
    if r.numel() == 0:
        return
    # float32 arithmetic is exact enough to judge tolerances >= 1e-7 and several times faster
    # than float64 on large outputs; float64/complex outputs keep their precision.
    wide = torch.float64 if r.dtype == torch.float64 else torch.float32
    if r.is_complex():
        r_, c_ = torch.view_as_real(r).to(wide), torch.view_as_real(c).to(wide)
    else:
        r_, c_ = r.to(wide), c.to(wide)
    atol, rtol = tol(str(r.dtype).removeprefix("torch."))
    # Everything is computed on the device and read in one transfer (each transfer waits for a
    # GPU that other processes share): whether both sides are finite (max propagates NaN and
    # Inf) and the error figures, which are only used when both are.
    finite = torch.stack([r_.abs().amax(), c_.abs().amax()]).isfinite().to(wide)
    all_fin, c_all_fin, *figures = torch.cat([finite, _error_figures(r_, c_, atol, rtol)]).tolist()
    if not all_fin or not c_all_fin:
        r_fin, c_fin = torch.isfinite(r_), torch.isfinite(c_)
        bad_fin = r_fin & ~c_fin
        if bool(bad_fin.any()):
            return _fail(res, f"{where} has {int(bad_fin.sum())} NaN/Inf values where the reference "
                              "is finite", "non_finite")
        # Non-finite reference positions must be matched exactly (same NaN / same signed Inf).
        nf = ~r_fin
        same = (torch.isnan(r_) & torch.isnan(c_)) | (r_ == c_)
        if not bool(same[nf].all()):
            return _fail(res, f"{where} differs where the reference is NaN/Inf", "value_mismatch")
        r_, c_ = r_[r_fin], c_[r_fin]
        figures = _error_figures(r_, c_, atol, rtol).tolist()
    atol, max_abs, excess, ref_norm, err_norm, max_rel = figures
    res.max_abs_err = max(res.max_abs_err, max_abs)
    res.max_rel_err = max(res.max_rel_err, max_rel)
    if excess > 0:
        bad = (c_ - r_).abs_() > r_.abs().mul_(rtol).add_(atol)  # slow path: only on failure
        idx = int(torch.nonzero(bad.reshape(-1))[0])
        return _fail(res, f"{where}: {int(bad.sum())} of {r.numel()} values exceed the tolerance "
                          f"(max abs err {max_abs:.3g}, atol {atol:g}, rtol {rtol:g}; first at "
                          f"flat index {idx})", "value_mismatch")
    if ref_norm > 0:
        rel_norm = err_norm / ref_norm
        if rel_norm > rtol:
            _fail(res, f"{where}: relative error norm {rel_norm:.3g} exceeds {rtol:g} "
                       "(the output is wrong relative to the reference's magnitude)",
                  "relative_norm_mismatch")


def _error_figures(r_, c_, atol: float, rtol: float):
    """(scaled atol, max abs err, worst excess over the tolerance, ||r||, ||c - r||, max rel err)
    as one tensor on the device. atol is relative to the output's scale once that exceeds 1 (its
    RMS): rounding errors of legitimate kernels grow with the magnitudes involved (long dot
    products, heavy-tailed inputs). The in-place steps come last in the stream's order, after the
    reductions that need the values they overwrite."""
    if not r_.numel():
        return torch.tensor([atol, 0.0, -1.0, 0.0, 0.0, 0.0], dtype=r_.dtype, device=r_.device)
    atol_t = (torch.linalg.vector_norm(r_) / r_.numel() ** 0.5).clamp_min(1.0) * atol
    diff = (c_ - r_).abs_()
    mag = r_.abs()
    parts = [atol_t, diff.amax(), (diff - mag * rtol).amax() - atol_t,
             torch.linalg.vector_norm(mag), torch.linalg.vector_norm(diff)]
    parts.append(diff.div_(mag.clamp_min_(atol_t)).amax())
    return torch.stack(parts)


def warm_up_comparison(tolerance_for) -> None:
    """The judge's CUDA context, and the kernels a comparison of float outputs launches, made
    ready before the first batch (instead of under the GPU lock by its first outputs)."""
    x = torch.randn(4096, device="cuda")
    ref, cand = TensorOut(x, "cuda", True, []), TensorOut(x.clone(), "cuda", True, [])
    compare_outputs(ref, cand, tolerance_for, "cuda")
    torch.cuda.synchronize()
