#!/usr/bin/env bash
# Every GPU check and benchmark behind docs/perf.md, on a machine with NVIDIA GPUs, in five named
# parts (each fits a 10-minute slot on two H200s, running two lanes of steps side by side, one per
# GPU; on one GPU the lanes run one after the other and steps that need two GPUs are skipped):
#
#   bash bench/run_all_gpu.sh checks RESULTS_DIR # the evaluator's GPU tests, then the 2-GPU training test
#   bash bench/run_all_gpu.sh eval   RESULTS_DIR # throughput x1, x2 (30 spares), GPU tests | repeatability, adversarial
#   bash bench/run_all_gpu.sh train  RESULTS_DIR # a full single-h200 round | the Proposer at GPU sizes
#   bash bench/run_all_gpu.sh scale  RESULTS_DIR # the Ray pool, then CA-GRPO, on 1 then 2 GPUs
#   bash bench/run_all_gpu.sh ab     RESULTS_DIR # one GPU: x1 runs alternating this tree (A) and B: KZ_AB_DIR's tree and/or KZ_AB_ARGS
#
# KZ_START_METHOD (spawn|fork|auto) picks how the evaluator starts workers in the throughput runs;
# KZ_ADV_ARGS adds pytest arguments to the adversarial step (e.g. -k resource_abuse), KZ_ADV_LIMIT_S
# sets its time limit;
# ab: KZ_AB_ROUNDS pairs (default 2); KZ_AB_DIR another checkout (e.g. `git archive` of an older
# commit) whose bench and package B runs; KZ_AB_ARGS B's extra throughput arguments; KZ_CPU_LOAD
# busy-looping processes beside the runs, a host whose cores other jobs use (default 0);
# KZ_AB_TAG prefixes the step names (default ab); KZ_X1_LIMIT_S each x1 step's limit (default 100);
# KZ_PROPOSE_SEED / _WORKERS / _LIMIT_S set the Proposer step's seed, sandbox runs and time limit;
# KZ_TRAIN_LIMIT_S the single-h200 round's limit; KZ_POOL_REPEAT the Ray batch (x 10 problems);
# KZ_POOL_SPARES the Ray judges' spares (default: EvalConfig's; `share`: each judge's share of
# the batch's worker takes, candidates + tasks, plus 5).
# Each step has its own time limit and log (RESULTS_DIR/files/NN_step.log); a failing step does
# not stop the others. RESULTS_DIR/results.tgz is rewritten after every step, so what finished is
# kept even if the whole run is cut short (and copied to $KZ_SAVE_TO when set). KZ_ONLY (a regex)
# runs only the steps it matches. Needs: torch with CUDA, triton, pytest (+ ray, fastapi, uvicorn
# for the pools; trl, datasets for training). On the device tool: carry .whl and .whl-train.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: run_all_gpu.sh checks|eval|train|scale|ab RESULTS_DIR}
R=${2:?usage: run_all_gpu.sh checks|eval|train|scale|ab RESULTS_DIR}
mkdir -p "$R/files" && R=$(cd "$R" && pwd)  # absolute: some steps run in another directory
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

# Each lane is a subshell in the background; `wait` joins both. With one GPU, one after the other.
two_lanes() {  # two_lanes "STEPS OF LANE 0" "STEPS OF LANE 1" (steps separated by ';')
  IFS=';' read -d '' -ra l0 <<< "$1"; IFS=';' read -d '' -ra l1 <<< "$2"
  ( for s in "${l0[@]}"; do eval "CUDA_VISIBLE_DEVICES=0 step ${s//$'\n'/ }"; done ) &
  [ "$ngpu" -lt 2 ] && wait
  ( for s in "${l1[@]}"; do eval "CUDA_VISIBLE_DEVICES=$other step ${s//$'\n'/ }"; done ) &
  wait
}
PY="python3"
TP="$PY bench/eval_throughput.py --skip-repeat"
SM=${KZ_START_METHOD:-auto}

# Every step once: NAME LIMIT_S COMMAND (the parts below put them in lanes).
S01="01_gpu_tests 340 bash scripts/test.sh -m gpu tests/test_eval_gpu.py tests/test_reserve.py tests/test_arena.py -p no:cacheprovider"
S02="02_adversarial_cuda ${KZ_ADV_LIMIT_S:-340} env KZ_ADV_DEVICE=cuda bash scripts/test.sh tests/test_adversarial.py -p no:cacheprovider ${KZ_ADV_ARGS:-}"
S11="11_repeatability 300 $PY bench/eval_throughput.py --repeat-only --out $R/files/eval_repeatability.json"
S13="13_throughput_x1 100 $TP --scales 1 --clocks warm --spares 30 --out $R/files/tp_x1_spares30.json"
S14="14_throughput_x2 100 $TP --scales 2 --clocks warm --spares 30 --out $R/files/tp_x2_spares30.json"
S04="04_propose_h200 ${KZ_PROPOSE_LIMIT_S:-220} $PY -m kernelzero propose --n 50 --target h200 --device cuda --workers ${KZ_PROPOSE_WORKERS:-8} --seed ${KZ_PROPOSE_SEED:-0} --out $R/files/proposed_h200"
S21="21_train_single_h200 ${KZ_TRAIN_LIMIT_S:-380} $PY -m kernelzero train --config single-h200 --out $R/files/train_single_h200"

case "$part" in checks|eval|train|scale|ab) ;; *)
  echo "unknown part $part: choose checks, eval, train, scale or ab" >&2; exit 2 ;; esac

if [ "$part" = eval ]; then  # ~7.5 min on 2 GPUs: the evaluator's figures, then its checks
  two_lanes "$S13; $S14; $S01" "$S11; $S02"
fi

x1() {  # x1 NAME [ARGS...]: one warm x1 throughput step (30 spares) with extra arguments
  local name=$1; shift
  echo "$name ${KZ_X1_LIMIT_S:-100} $TP --scales 1 --clocks warm --spares 30 $* --out $R/files/tp_$name.json"
}

if [ "$part" = ab ]; then  # ~1.3 min a pair on 1 GPU: A (this tree) and B alternating, KZ_CPU_LOAD busy processes beside
  load=()
  for _ in $(seq 1 "${KZ_CPU_LOAD:-0}"); do $PY -c 'while True: pass' & load+=($!); done
  [ ${#load[@]} -gt 0 ] && trap 'kill "${load[@]}" 2>/dev/null' EXIT  # also when cut short
  echo "busy processes beside the runs: ${#load[@]} (on $(nproc) cores)" | tee -a "$R/summary.txt"
  tag=${KZ_AB_TAG:-ab}
  for k in $(seq 1 "${KZ_AB_ROUNDS:-2}"); do
    eval "CUDA_VISIBLE_DEVICES=0 step $(x1 ${tag}${k}_A)"
    if [ -n "${KZ_AB_DIR:-}" ]; then  # B's own bench and package, in its own directory
      ( b=$(cd "$KZ_AB_DIR" && pwd); cd "$b" && export PYTHONPATH="$b:${PYTHONPATH#"$OLDPWD:"}" \
        && eval "CUDA_VISIBLE_DEVICES=0 step $(x1 ${tag}${k}_B ${KZ_AB_ARGS:-})" )
    else
      eval "CUDA_VISIBLE_DEVICES=0 step $(x1 ${tag}${k}_B ${KZ_AB_ARGS:-})"
    fi
  done
fi

pool_spares() {  # pool_spares NGPU: --spares for the Ray judges (KZ_POOL_SPARES)
  case "${KZ_POOL_SPARES:-}" in
    "") ;;
    share) echo "--spares $(( (${KZ_POOL_REPEAT:-4} * 10 + 10 + $1 - 1) / $1 + 5 ))" ;;
    *) echo "--spares $KZ_POOL_SPARES" ;;
  esac
}

ray_steps() {  # the Ray pool on 1 GPU, then on 2, machine otherwise idle
  local lim=${KZ_POOL_LIMIT_S:-150}
  step 22_pools_ray_1gpu $lim env CUDA_VISIBLE_DEVICES=0 $PY bench/eval_pools.py --device cuda \
    --problems throughput --repeat ${KZ_POOL_REPEAT:-4} --workers 8 --modes ray $(pool_spares 1) \
    --out "$R/files/eval_pools_1gpu.json"
  if [ "$ngpu" -ge 2 ]; then
    step 23_pools_ray_2gpu $lim env CUDA_VISIBLE_DEVICES=0,1 $PY bench/eval_pools.py --device cuda \
      --problems throughput --repeat ${KZ_POOL_REPEAT:-4} --workers 8 --modes ray $(pool_spares 2) \
      --out "$R/files/eval_pools_2gpu.json"
  fi
}

train_steps() {  # CA-GRPO over 1 vs 2 GPUs
  local gpus="1"; [ "$ngpu" -ge 2 ] && gpus="1 2"
  step 31_train_scaling ${KZ_SCALING_LIMIT_S:-240} $PY bench/train_scaling.py --gpus $gpus \
    --configs fsdp2 ddp --steps 4 --tokens 64 --out "$R/files/train_scaling.json"
}

if [ "$part" = scale ]; then  # ~9.5 min on 2 GPUs: Ray with spares sized to each judge's share, then CA-GRPO
  KZ_POOL_SPARES=${KZ_POOL_SPARES:-share} KZ_POOL_LIMIT_S=${KZ_POOL_LIMIT_S:-200} ray_steps
  KZ_SCALING_LIMIT_S=${KZ_SCALING_LIMIT_S:-300} train_steps
fi

if [ "$part" = checks ]; then  # ~8 min on 2 GPUs: the GPU tests of the evaluator and of training
  step $S01
  [ "$ngpu" -ge 2 ] && step 32_train_gpu_test 130 bash scripts/test.sh -m gpu tests/test_train_ca_grpo.py -p no:cacheprovider
fi

if [ "$part" = train ]; then  # ~6.5 min on 2 GPUs
  two_lanes "$S21" "$S04"
fi
echo "part $part done in $(( $(date +%s) - t_all ))s" | tee -a "$R/summary.txt"
save
