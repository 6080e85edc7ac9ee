#!/usr/bin/env bash
# Every GPU check and benchmark behind docs/perf.md, on a machine with NVIDIA GPUs, in four parts
# (each fits a 10-minute slot on one or two H200s; steps that need two GPUs are skipped on one):
#
#   bash bench/run_all_gpu.sh eval  RESULTS_DIR   # GPU tests, adversarial suite on cuda, throughput
#   bash bench/run_all_gpu.sh speed RESULTS_DIR   # speedup repeatability, worker start, fork throughput
#   bash bench/run_all_gpu.sh scale RESULTS_DIR   # Proposer on cuda; pools (local/Ray/service), 1 vs 2 GPUs
#   bash bench/run_all_gpu.sh train RESULTS_DIR   # CA-GRPO over 1 vs 2 GPUs, the single-h200 preset
#
# Each step has its own time limit and log (RESULTS_DIR/files/NN_step.log); a failing step does
# not stop the others. RESULTS_DIR/results.tgz is rewritten after every step, so what finished is
# kept even if the whole run is cut short (and copied to $KZ_SAVE_TO when set). KZ_ONLY (a regex)
# runs only the steps it matches. Needs: torch with CUDA, triton, pytest (+ ray, fastapi, uvicorn
# for the pools; trl, datasets for training). On the device tool: carry .whl and .whl-train.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: run_all_gpu.sh eval|speed|scale|train RESULTS_DIR}
R=${2:?usage: run_all_gpu.sh eval|speed|scale|train RESULTS_DIR}
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

if [ "$part" = eval ]; then  # ~9 min
  # The GPU tests and the adversarial suite on separate GPUs at once (one GPU: one after the
  # other), then the timed benchmark alone on its GPU.
  step_bg 01_gpu_tests 300 env CUDA_VISIBLE_DEVICES=0 bash scripts/test.sh -m gpu \
    tests/test_eval_gpu.py -p no:cacheprovider
  [ "$ngpu" -lt 2 ] && wait
  step_bg 02_adversarial_cuda 300 env KZ_ADV_DEVICE=cuda CUDA_VISIBLE_DEVICES=$other \
    bash scripts/test.sh tests/test_adversarial.py -p no:cacheprovider
  wait
  step 03_throughput 150 env CUDA_VISIBLE_DEVICES=0 python3 bench/eval_throughput.py --skip-repeat \
    --out "$R/files/eval_throughput.json"
fi

if [ "$part" = speed ]; then  # ~8 min: evaluator speed and repeatability, alone on the machine
  step 11_repeatability 240 env CUDA_VISIBLE_DEVICES=0 python3 bench/eval_throughput.py \
    --repeat-only --out "$R/files/eval_repeatability.json"
  step 12_worker_start 100 env CUDA_VISIBLE_DEVICES=0 python3 bench/worker_start.py --device cuda \
    --out "$R/files/worker_start.json"
  step 13_throughput_fork 150 env CUDA_VISIBLE_DEVICES=0 python3 bench/eval_throughput.py \
    --skip-repeat --start-method fork --out "$R/files/eval_throughput_fork.json"
fi

if [ "$part" = scale ]; then  # ~8 min: Proposer on cuda, judging pools on 1 and 2 GPUs
  step 21_propose_h200 200 env CUDA_VISIBLE_DEVICES=0 python3 -m kernelzero propose --n 50 \
    --target h200 --device cuda --seed 0 --out "$R/files/proposed_h200"
  step 22_pools_1gpu 180 env CUDA_VISIBLE_DEVICES=0 python3 bench/eval_pools.py --device cuda \
    --backends triton --repeat 4 --workers 4 --out "$R/files/eval_pools_1gpu.json"
  if [ "$ngpu" -ge 2 ]; then
    step 23_pools_2gpu_ray 100 env CUDA_VISIBLE_DEVICES=0,1 python3 bench/eval_pools.py --device cuda \
      --backends triton --repeat 4 --workers 4 --modes ray --out "$R/files/eval_pools_2gpu.json"
  fi
fi

if [ "$part" = train ]; then  # ~8 min: CA-GRPO over 1 and 2 GPUs, the single-h200 preset
  gpus="1"; [ "$ngpu" -ge 2 ] && gpus="1 2"
  step 31_train_scaling 200 python3 bench/train_scaling.py --gpus $gpus --configs ddp fsdp2 \
    --steps 4 --tokens 64 --out "$R/files/train_scaling.json"
  if [ "$ngpu" -ge 2 ]; then
    step 32_train_gpu_test 120 bash scripts/test.sh -m gpu tests/test_train_ca_grpo.py -p no:cacheprovider
  fi
  step 33_train_single_h200 170 env CUDA_VISIBLE_DEVICES=0 python3 -m kernelzero train \
    --config single-h200 --out "$R/files/train_single_h200"
fi
echo "part $part done in $(( $(date +%s) - t_all ))s" | tee -a "$R/summary.txt"
save
