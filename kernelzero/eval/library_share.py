"""How much of a candidate's GPU time ran in vendor-library compute kernels (cuBLAS, cuDNN).

Under the `strict` policy a candidate must do its work in its own kernels. The op-dispatch log
catches PyTorch compute ops (from Python or C++), but a C++ extension can call cuBLAS or cuDNN
directly, past the dispatcher. The worker therefore profiles the first correctness call's GPU
kernels (`torch.profiler`, CUDA activity) and the judge computes the share of kernel time whose
names are those of the vendor libraries; above `EvalConfig.max_library_share` the candidate is
`rejected` (`library_compute`). The share is reported in the verdict either way.

Names are matched, not provenance: a kernel of the candidate's own that it names like a library
kernel counts as library time (a candidate gains nothing by that), and CUTLASS templates a
candidate instantiates itself (`cutlass::Kernel...`) do not count.
"""
from __future__ import annotations

import re

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
