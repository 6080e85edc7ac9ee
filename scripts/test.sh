#!/usr/bin/env bash
# The test command (README): the whole CPU suite. GPU tests are skipped without CUDA; run them
# on a GPU machine with `bash scripts/test.sh -m gpu`.
set -euo pipefail
cd "$(dirname "$0")/.."
export TRITON_INTERPRET=1   # Triton kernels run through the interpreter on the CPU
python3 -m pytest -q --timeout=900 "$@"
