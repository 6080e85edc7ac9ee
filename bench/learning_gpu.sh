#!/usr/bin/env bash
# The learning figures on one GPU (docs/perf.md "Learning"), in parts of under 10 minutes each:
#   bash bench/learning_gpu.sh coders OUT   # fast-sampler bench; coder-cpu and coder-gpu from zero
#   bash bench/learning_gpu.sh kb OUT       # the GPU Coder on KernelBench's family problems
# Needs: the verified distillation rows gzipped at .data/family-train.jsonl.gz (made on any
# machine by `kernelzero distill --teacher compiler ...` or a coder-cpu run's cold start, whose
# cold_start/data.jsonl it is), trl/datasets wheels in .whl/ where the image lacks them (see the
# device notes), and KernelBench's problems in .kb/ for the `kb` part. Every step has its own
# limit; results land in OUT (JSON, the models as tarballs, the logs).
set -uo pipefail
part=${1:?part: coders or kb}
OUT=${2:?results directory}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
if ls .whl/*.whl >/dev/null 2>&1 && ! python3 -c 'import trl, datasets' 2>/dev/null; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl || exit 1
  export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false PYTHONUNBUFFERED=1
python3 -c 'import torch, triton, transformers, trl, datasets, pyarrow; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__, "trl", trl.__version__, "datasets", datasets.__version__, "pyarrow", pyarrow.__version__, torch.cuda.get_device_name())' | tee "$OUT/versions.txt"
kz() { python3 -m kernelzero "$@"; }

case "$part" in
coders)
  gunzip -c .data/family-train.jsonl.gz > /tmp/family-train.jsonl || exit 1
  timeout 90 python3 bench/fastgen_bench.py --presets cpu,gpu,large --rows 512 --new 256 --hf-rows 512 \
    --out "$OUT/fastgen.json" 2>&1 | grep -v "Loading weights" | tee "$OUT/fastgen.log"
  for preset in cpu gpu; do
    budget=${KZ_SFT_BUDGET_S:-130}
    timeout 330 python3 -m kernelzero train --config "coder-$preset" --out "/tmp/runs/coder-$preset" \
      --set cold_start.data=/tmp/family-train.jsonl --set cold_start.time_budget_s="$budget" \
      2>&1 | tee "$OUT/coder-$preset.log" | grep -v "it/s\]"
    cp "/tmp/runs/coder-$preset/summary.json" "$OUT/coder-$preset-summary.json" 2>/dev/null
    cp "/tmp/runs/coder-$preset/cold_start/cold_start.json" "$OUT/coder-$preset-cold_start.json" 2>/dev/null
  done
  # The CPU-size Coder comes back to be shipped (fp32 safetensors + tokenizer, ~12 MB).
  tar -C /tmp/runs/coder-cpu/cold_start -czf "$OUT/coder-cpu-model.tgz" model --exclude='*.pt' --exclude='training_args.bin' --exclude='checkpoint-*'
  ;;
kb)
  gunzip -c .data/family-train.jsonl.gz > /tmp/family-train.jsonl || exit 1
  ;;
*) echo "unknown part $part"; exit 2 ;;
esac
ls -la "$OUT"
