#!/usr/bin/env bash
# The test command (README): the whole CPU suite. GPU tests are skipped without CUDA; run them
# on a GPU machine with `bash scripts/test.sh -m gpu`.
set -euo pipefail
cd "$(dirname "$0")/.."
# Without a GPU, Triton kernels run through the interpreter; on a GPU they compile for real (the
# interpreter cannot run on CUDA tensors). TRITON_INTERPRET set by the caller wins.
if [ -z "${TRITON_INTERPRET+x}" ] && ! python3 -c 'import torch, sys; sys.exit(not torch.cuda.is_available())' 2>/dev/null; then
  export TRITON_INTERPRET=1
fi
python3 -m pytest -q --timeout=900 "$@"
