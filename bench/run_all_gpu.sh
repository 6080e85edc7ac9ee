#!/usr/bin/env bash
# Every GPU check and benchmark behind docs/perf.md, on a machine with NVIDIA GPUs, in two parts
# (each fits a 10-minute slot on one H200 / two H200s):
#
#   bash bench/run_all_gpu.sh eval   RESULTS_DIR   # GPU tests, adversarial suite on cuda, evaluator throughput
#   bash bench/run_all_gpu.sh scale  RESULTS_DIR   # speedup repeatability, Proposer on cuda, pools
#                                                  # (local/Ray/service; 1 vs 2 GPUs), CA-GRPO over
#                                                  # 1 vs 2 GPUs, the single-h200 preset
#
# Each step has its own time limit and log (RESULTS_DIR/NN_step.log); a failing step does not
# stop the others. RESULTS_DIR/results.tgz is rewritten after every step, so what finished is kept
# even if the whole run is cut short (and copied to $KZ_SAVE_TO when set). Needs: torch with CUDA, triton, pytest (+ ray, fastapi,
# uvicorn for the pools; trl, datasets for training).
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: run_all_gpu.sh eval|scale RESULTS_DIR}
R=${2:?usage: run_all_gpu.sh eval|scale RESULTS_DIR}
mkdir -p "$R/files"
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}" RAY_AUTH_MODE=disabled
ngpu=$(python3 -c 'import torch; print(torch.cuda.device_count())')
other=$(( ngpu > 1 ? 1 : 0 ))  # a second GPU for work that can run beside a timed step
t_all=$(date +%s)

step() {  # step NAME LIMIT_S COMMAND...  (KZ_ONLY: a regex; steps whose name misses it are skipped)
  local name=$1 limit=$2; shift 2
  [[ -n "${KZ_ONLY:-}" && ! "$name" =~ $KZ_ONLY ]] && return 0
  local t0=$(date +%s)
  echo "=== $name (limit ${limit}s) ===" | tee -a "$R/summary.txt"
  timeout --signal=INT --kill-after=20 "$limit" "$@" > "$R/files/$name.log" 2>&1
  local rc=$?
  echo "--- $name: rc=$rc in $(( $(date +%s) - t0 ))s" | tee -a "$R/summary.txt"
  tail -n 4 "$R/files/$name.log" | sed 's/^/    /' | tee -a "$R/summary.txt"
  save
}

save() {  # KZ_SAVE_TO: a second folder that gets the tarball and summary (e.g. a fetched $OUT)
  tar -czf "$R/results.tgz" -C "$R" files summary.txt 2>/dev/null
  [ -n "${KZ_SAVE_TO:-}" ] && cp "$R/results.tgz" "$R/summary.txt" "$KZ_SAVE_TO/"
}

echo "part $part on $ngpu GPU(s): $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" \
  | tee "$R/summary.txt"

step_bg() {  # the same, in the background (steps on different GPUs); `wait` joins them
  step "$@" &
}

if [ "$part" = eval ]; then
  # The GPU tests and the adversarial suite on separate GPUs at once; then the timed benchmark
  # alone on its GPU.
  step_bg 01_gpu_tests 290 env CUDA_VISIBLE_DEVICES=0 bash scripts/test.sh -m gpu \
    tests/test_eval_gpu.py -p no:cacheprovider
  step_bg 02_adversarial_cuda 290 env KZ_ADV_DEVICE=cuda CUDA_VISIBLE_DEVICES=$other \
    bash scripts/test.sh tests/test_adversarial.py -p no:cacheprovider
  wait
  step 03_throughput 120 env CUDA_VISIBLE_DEVICES=0 python3 bench/eval_throughput.py --skip-repeat \
    --out "$R/files/eval_throughput.json"
  step 04_worker_start 120 env CUDA_VISIBLE_DEVICES=0 python3 bench/worker_start.py --device cuda \
    --out "$R/files/worker_start.json"
  step 05_throughput_fork 120 env CUDA_VISIBLE_DEVICES=0 python3 bench/eval_throughput.py \
    --skip-repeat --start-method fork --out "$R/files/eval_throughput_fork.json"
fi

if [ "$part" = scale ]; then
  step_bg 11_repeatability 120 env CUDA_VISIBLE_DEVICES=0 python3 bench/eval_throughput.py \
    --repeat-only --out "$R/files/eval_repeatability.json"
  step_bg 12_propose_h200 120 env CUDA_VISIBLE_DEVICES=$other python3 -m kernelzero \
    propose --n 50 --target h200 --device cuda --seed 0 --out "$R/files/proposed_h200"
  wait
  step 13_pools_1gpu 110 env CUDA_VISIBLE_DEVICES=0 python3 bench/eval_pools.py --device cuda \
    --backends triton --repeat 4 --workers 4 --out "$R/files/eval_pools_1gpu.json"
  if [ "$ngpu" -ge 2 ]; then
    step 14_pools_2gpu_ray 80 env CUDA_VISIBLE_DEVICES=0,1 python3 bench/eval_pools.py --device cuda \
      --backends triton --repeat 4 --workers 4 --modes ray --out "$R/files/eval_pools_2gpu.json"
  fi
  gpus="1"; [ "$ngpu" -ge 2 ] && gpus="1 2"
  step 15_train_scaling 120 python3 bench/train_scaling.py --gpus $gpus --configs ddp fsdp2 \
    --steps 4 --tokens 64 --out "$R/files/train_scaling.json"
  step 16_train_single_h200 170 env CUDA_VISIBLE_DEVICES=0 python3 -m kernelzero train \
    --config single-h200 --out "$R/files/train_single_h200"
fi
echo "part $part done in $(( $(date +%s) - t_all ))s" | tee -a "$R/summary.txt"
save
