#!/usr/bin/env bash
# `kernelzero export` on a GPU: tests/test_export_gpu.py, one step per test, each under its own
# time limit (a CUDA kernel compiles twice: when judged and when the package is first imported).
#
#   bash bench/export_gpu.sh [RESULTS_DIR]      # default: $OUT, else /tmp/export_gpu
#
# Writes RESULTS_DIR/export_gpu_N.log per step and RESULTS_DIR/export_gpu.txt (one line per step:
# its name, exit code and pytest's last line). Expect "1 passed" twice, in about 4 minutes on one
# H200. Needs torch with CUDA, triton, pytest.
set -uo pipefail
cd "$(dirname "$0")/.."
RESULTS=${1:-${OUT:-/tmp/export_gpu}}
mkdir -p "$RESULTS"
unset TRITON_INTERPRET  # real Triton on the GPU
n=0
for t in test_a_cuda_kernel_exported_runs_eagerly_compiled_and_under_autograd \
         test_a_triton_kernel_with_weights_exported_matches_the_reference_and_its_gradients; do
  n=$((n + 1))
  timeout 300 python3 -m pytest -q -p no:cacheprovider -m gpu "tests/test_export_gpu.py::$t" \
    > "$RESULTS/export_gpu_$n.log" 2>&1
  rc=$?
  echo "$t rc=$rc $(tail -1 "$RESULTS/export_gpu_$n.log")" | tee -a "$RESULTS/export_gpu.txt"
done
