#!/usr/bin/env bash
# Build the models that ship inside the package (kernelzero/models/shipped.py) from zero, and copy
# them into kernelzero/models/weights/. The recipe is the two presets:
#   coder-cpu     the op family's training modules -> the teacher compiler -> every kernel judged by
#                 the evaluator -> a tokenizer on the verified rows -> SFT (TRL) -> held-out pass@1
#   proposer-cpu  (op set + Coder feedback -> module) rows from the family generator -> SFT (TRL)
# On one H200 each trains in a few minutes; on 2 CPU cores the Coder takes hours (docs/training.md).
#
#   bash scripts/build_shipped_models.sh [RUNS_DIR] [-- extra `--set KEY=VALUE` for both runs]
#
# Verified rows made elsewhere (e.g. on a CPU machine, where judging is cheap and the GPU is not
# needed) are reused with KZ_CODER_DATA=path/to/data.jsonl; otherwise the Coder's run makes them.
# KZ_CODER_MORE_STEPS="N1 N2 ..." continues the Coder's SFT in stages of N1, N2, ... steps before
# it ships (`kernelzero sft`, learning rate 1e-3 decaying linearly to 0 in each stage, batch 64,
# stage k under seed k). The shipped Coder is the cold start's 879 steps, then stages of 1,200,
# 2,800, 3,800 and 3,800 steps: KZ_CODER_MORE_STEPS="1200 2800 3800 3800" (docs/learning-results.md, "Data
# and the shipped Coder"; the shipped fourth stage was stopped by its time limit at 3,748 steps).
set -euo pipefail
cd "$(dirname "$0")/.."
runs=${1:-runs/shipped}
shift || true
[ "${1:-}" = "--" ] && shift
extra=("$@")
data=()
[ -n "${KZ_CODER_DATA:-}" ] && data=(--set "cold_start.data=$KZ_CODER_DATA")

python3 -m kernelzero train --config coder-cpu --out "$runs/coder-cpu" "${data[@]}" "${extra[@]}"
python3 -m kernelzero train --config proposer-cpu --out "$runs/proposer-cpu" "${extra[@]}"

# Only what loading needs: weights, config, tokenizer, and the model card KernelZero writes.
ship() {  # ship SRC NAME
  local dst=kernelzero/models/weights/$2
  rm -rf "$dst" && mkdir -p "$dst"
  (cd "$1" && cp ./*.json ./*.safetensors ./*.jinja "$OLDPWD/$dst/" 2>/dev/null)
  rm -f "$dst/training_args.bin" "$dst/trainer_state.json"
  du -sh "$dst"
}
coder=$runs/coder-cpu/cold_start/model
bf16=$(python3 -c 'import torch; print("--bf16" if torch.cuda.is_available() else "")')
stage=0
for steps in ${KZ_CODER_MORE_STEPS:-}; do
  stage=$((stage + 1))
  python3 -m kernelzero sft --model "$coder" --data "${KZ_CODER_DATA:-$runs/coder-cpu/cold_start/data.jsonl}" \
    --out "$runs/coder-cpu/continued-$stage" --max-steps "$steps" --lr 1e-3 --batch-size 64 \
    --max-length 2048 $bf16 --seed "$stage"
  cp "$coder/kernelzero_model.json" "$runs/coder-cpu/continued-$stage/"
  coder=$runs/coder-cpu/continued-$stage
done
ship "$coder" coder-cpu
ship "$runs/proposer-cpu/proposer_cold_start/model" proposer-cpu
python3 -c 'from kernelzero.models.shipped import shipped_model; print("shipped:", shipped_model("coder"), shipped_model("proposer"))'
