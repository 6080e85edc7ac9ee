"""Where the time of one cold CUDA candidate build goes: `load_inline` of a small CUDA source
that includes <torch/extension.h> (as KernelBench-style candidates do), in a fresh build folder,
then ninja's own log of each compile. GPU host only (needs nvcc).

    python bench/cuda_build_time.py default pch default

Variants: `default` (torch's flags), `pch` (use_pch=True: a precompiled header for the
bindings' main.cpp; the .cu goes through nvcc, which cannot use it).
"""
import os
import sys
import tempfile
import time

from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
__global__ void scale_kernel(const float* x, float* y, float k, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? x[i] * k : 0.0f;
}
torch::Tensor relu_scale(torch::Tensor x, double k) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)k, n);
    return y;
}
"""


def build(variant: str) -> None:
    folder = tempfile.mkdtemp()
    t0 = time.perf_counter()
    load_inline(f"kz_build_{variant}_{time.time_ns()}",
                "torch::Tensor relu_scale(torch::Tensor x, double k);",
                cuda_sources=CUDA_SOURCE, functions=["relu_scale"], build_directory=folder,
                use_pch=(variant == "pch"))
    print(f"{variant}: {time.perf_counter() - t0:.1f} s (MAX_JOBS={os.environ.get('MAX_JOBS', 'all')})")
    log = os.path.join(folder, ".ninja_log")  # start and end of each step, in ms
    for line in open(log).read().splitlines()[1:] if os.path.exists(log) else []:
        start, end, _, target, _ = line.split("\t")
        print(f"    {target}: {(int(end) - int(start)) / 1000:.1f} s")


if __name__ == "__main__":
    for v in sys.argv[1:] or ["default"]:
        build(v)
