"""How much of a candidate's GPU time ran in vendor-library compute kernels (cuBLAS, cuDNN).

Under the `strict` policy a candidate must do its work in its own kernels. The op-dispatch log
catches PyTorch compute ops (from Python or C++), but a C++ extension can call cuBLAS or cuDNN
directly, past the dispatcher. The worker therefore profiles the first correctness call's GPU
kernels (`torch.profiler`, CUDA activity) and the judge computes the share of kernel time whose
names are those of the vendor libraries; above `EvalConfig.max_library_share` the candidate is
`rejected` (`library_compute`). The share is reported in the verdict either way.

`KernelProfile` is the worker's side (it runs in the sandbox), `library_share` the judge's.

Names are matched, not provenance: a kernel of the candidate's own that it names like a library
kernel counts as library time (a candidate gains nothing by that), and CUTLASS templates a
candidate instantiates itself (`cutlass::Kernel...`) do not count.
"""
from __future__ import annotations

import re

from kernelzero.eval.worker.failures import one_line

# cuBLAS / cuBLASLt (incl. Hopper `nvjet` and `xmma` GEMMs, sgemm/gemv families, split-K reduce),
# cuDNN (namespaced kernels, implicit-GEMM and FFT/Winograd convolutions) and the library-built
# CUTLASS kernels they ship (`cutlass_80_...`, `cutlass__5x_cudnn_...`).
LIBRARY_KERNEL = re.compile(
    r"cublas|cudnn|nvjet|xmma|[a-z]+_[sdhc]gemm|gemv2|gemvn|gemmsn|gemmk1|splitkreduce|"
    r"implicit_convolve|fft2d_|fft3d_|winograd|cutlass_[0-9]+_|cutlass__[0-9]+x_cudnn",
    re.IGNORECASE)


def library_share(kernels) -> tuple[float | None, list[str]]:
    """(share of GPU kernel time in library kernels, their names by time) from the worker's
    [[name, microseconds], ...]; (None, []) when there is nothing usable to judge."""
    total, lib, names = 0.0, 0.0, {}
    try:
        for name, us in kernels:
            us = float(us)
            if not (us >= 0) or not isinstance(name, str):
                continue
            total += us
            if LIBRARY_KERNEL.search(name):
                lib += us
                names[name[:80]] = names.get(name[:80], 0.0) + us
    except (TypeError, ValueError):
        return None, []
    if total <= 0:
        return None, []
    return lib / total, [n for n, _ in sorted(names.items(), key=lambda kv: -kv[1])]


class KernelProfile:
    """Worker side: torch.profiler around one call, CUDA kernels only, times summed by name, into
    `reply["kernels"]` ([[name, us], ...], the 200 longest) or `reply["profile_error"]`."""

    def __init__(self, torch, reply: dict):
        self.torch, self.reply, self.prof = torch, reply, None

    def __enter__(self):
        try:
            from torch.profiler import ProfilerActivity, profile
            self.prof = profile(activities=[ProfilerActivity.CUDA])
            self.prof.__enter__()
        except Exception as e:  # noqa: BLE001
            self.prof, self.reply["profile_error"] = None, one_line(e)
        return self

    def __exit__(self, *exc):
        if self.prof is None:
            return False
        try:
            self.torch.cuda.synchronize()
            self.prof.__exit__(None, None, None)
            totals: dict[str, float] = {}
            for ev in self.prof.events():
                if str(getattr(ev, "device_type", "")).endswith("CUDA"):
                    us = float(getattr(ev, "device_time_total", 0.0) or 0.0)
                    totals[ev.name] = totals.get(ev.name, 0.0) + us
            top = sorted(totals.items(), key=lambda kv: -kv[1])[:200]
            self.reply["kernels"] = [[n[:200], t] for n, t in top]
        except Exception as e:  # noqa: BLE001
            self.reply["profile_error"] = one_line(e)
        return False
