#!/usr/bin/env bash
# Every GPU check and benchmark behind docs/perf.md, on a machine with NVIDIA GPUs, in three parts
# (each fits a 10-minute slot on two H200s, running two lanes of steps side by side, one per GPU;
# on one GPU the lanes run one after the other and steps that need two GPUs are skipped):
#
#   bash bench/run_all_gpu.sh eval  RESULTS_DIR  # GPU tests + throughput x1 | adversarial + spares 30
#   bash bench/run_all_gpu.sh speed RESULTS_DIR  # single-h200 + repeatability | Proposer + throughput x2
#   bash bench/run_all_gpu.sh scale RESULTS_DIR  # the Ray pool on 1 GPU, then on 2 (nothing beside)
#   bash bench/run_all_gpu.sh judge RESULTS_DIR  # throughput x1, x2 (+ spares 30), adversarial | repeatability + GPU tests
#   bash bench/run_all_gpu.sh timing RESULTS_DIR # throughput x1, x2, x4 (spares 30), x1 default, GPU tests | repeatability + adversarial
#   bash bench/run_all_gpu.sh ratio RESULTS_DIR  # throughput x1 (8 and 16 at once), x2, GPU tests | repeatability + adversarial
#   bash bench/run_all_gpu.sh final RESULTS_DIR  # throughput x1, x2, GPU tests | repeatability + adversarial
#   bash bench/run_all_gpu.sh spread RESULTS_DIR # throughput x1, x1, x2 | x2, x1 (run-to-run spread)
#   bash bench/run_all_gpu.sh seventh RESULTS_DIR # throughput x1 twice, x1 + spare_reserve_mb, x2, GPU tests | repeatability, adversarial
#   bash bench/run_all_gpu.sh eighth RESULTS_DIR  # x1 three times, x1 without the load reserve, x1 + spare_reserve_mb, x2, GPU tests | repeatability, adversarial
#   bash bench/run_all_gpu.sh ninth RESULTS_DIR   # x1 seven times, alternating without the shared-output pool, GPU tests | adversarial, repeatability
#   bash bench/run_all_gpu.sh tenth RESULTS_DIR   # x1 six times, alternating without the workers' arenas, GPU tests | adversarial, repeatability
#   bash bench/run_all_gpu.sh tenth1 RESULTS_DIR  # one GPU, nothing beside: x1 four times, alternating without arenas, then the GPU tests
#   bash bench/run_all_gpu.sh ab RESULTS_DIR      # one GPU: x1 runs alternating this tree (A) and B: KZ_AB_DIR's tree and/or KZ_AB_ARGS
#   bash bench/run_all_gpu.sh fit RESULTS_DIR    # the Ray pool on 1 then 2 GPUs, spares sized to each judge's share; CA-GRPO 1 vs 2 GPUs
#   bash bench/run_all_gpu.sh checks RESULTS_DIR # the evaluator's GPU tests, then the 2-GPU training test
#   bash bench/run_all_gpu.sh train RESULTS_DIR  # CA-GRPO over 1 vs 2 GPUs (bench + GPU test)
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
part=${1:?usage: run_all_gpu.sh eval|speed|scale|judge|timing|ratio|final|seventh|eighth|ninth|tenth|tenth1|ab|spread|fit|checks|train RESULTS_DIR}
R=${2:?usage: run_all_gpu.sh eval|speed|scale|judge|timing|ratio|final|seventh|eighth|ninth|tenth|tenth1|ab|spread|fit|checks|train RESULTS_DIR}
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
S03="03_throughput_x1 150 $TP --scales 1 --clocks cold warm --start-method $SM --out $R/files/tp_x1.json"
S04="04_propose_h200 ${KZ_PROPOSE_LIMIT_S:-220} $PY -m kernelzero propose --n 50 --target h200 --device cuda --workers ${KZ_PROPOSE_WORKERS:-8} --seed ${KZ_PROPOSE_SEED:-0} --out $R/files/proposed_h200"
S11="11_repeatability 300 $PY bench/eval_throughput.py --repeat-only --out $R/files/eval_repeatability.json"
S12="12_throughput_x2 200 $TP --scales 2 --clocks warm cold --start-method $SM --out $R/files/tp_x2.json"
S13="13_throughput_spares 100 $TP --scales 1 --clocks warm --spares 30 --out $R/files/tp_x1_spares30.json"
S14="14_throughput_x2_spares 100 $TP --scales 2 --clocks warm --spares 30 --out $R/files/tp_x2_spares30.json"
S17="17_throughput_again 100 $TP --scales 1 --clocks warm --spares 30 --out $R/files/tp_x1_spares30_again.json"
S18="18_throughput_x2_again 100 $TP --scales 2 --clocks warm --spares 30 --out $R/files/tp_x2_spares30_again.json"
S19="19_throughput_third 100 $TP --scales 1 --clocks warm --spares 30 --out $R/files/tp_x1_spares30_third.json"
S20="20_throughput_reserve 100 $TP --scales 1 --clocks warm --spares 30 --spare-reserve-mb 3072 --out $R/files/tp_x1_spares30_reserve.json"
S24="24_throughput_no_load_reserve 100 $TP --scales 1 --clocks warm --spares 30 --load-reserve-factor 0 --out $R/files/tp_x1_spares30_noreserve.json"
S16="16_throughput_w16 100 $TP --scales 1 --clocks warm --spares 30 --workers 16 --out $R/files/tp_x1_spares30_w16.json"
S15="15_throughput_x4_spares 170 $TP --scales 4 --clocks warm --spares 30 --out $R/files/tp_x4_spares30.json"
S21="21_train_single_h200 ${KZ_TRAIN_LIMIT_S:-380} $PY -m kernelzero train --config single-h200 --out $R/files/train_single_h200"

if [ "$part" = eval ]; then  # ~8.5 min on 2 GPUs
  two_lanes "$S01; $S03" "$S02; $S13"
fi

if [ "$part" = speed ]; then  # ~9.5 min on 2 GPUs
  two_lanes "$S21; $S11" "$S04; $S12"
fi

if [ "$part" = judge ]; then  # ~9 min on 2 GPUs: every judging and timing check, no training
  two_lanes "$S03; $S13; $S12; $S14; $S02" "$S11; $S01"
fi

if [ "$part" = timing ]; then  # ~9.5 min on 2 GPUs: the timed loop's cost, then its checks
  two_lanes "$S13; $S14; $S15; $S03; $S01" "$S11; $S02"
fi

if [ "$part" = ratio ]; then  # ~8 min on 2 GPUs: wall / GPU at 8 and 16 at once, x2, GPU tests | repeatability, adversarial
  two_lanes "$S13; $S16; $S14; $S17; $S01" "$S11; $S02"
fi

if [ "$part" = final ]; then  # ~7.5 min on 2 GPUs: throughput x1, x2, GPU tests | repeatability, adversarial
  two_lanes "$S13; $S14; $S01" "$S11; $S02"
fi

if [ "$part" = seventh ]; then  # ~8 min on 2 GPUs: x1 twice, x1 with reserved spare memory, x2, GPU tests | repeatability, adversarial
  two_lanes "$S13; $S17; $S20; $S14; $S01" "$S11; $S02"
fi

if [ "$part" = eighth ]; then  # ~7 min on 2 GPUs: x1 three times (reserve while loading), once without it, x1 + spare reserve, x2, GPU tests | repeatability, adversarial
  two_lanes "$S13; $S24; $S17; $S19; $S20; $S14; $S01" "$S11; $S02"
fi

x1() {  # x1 NAME [ARGS...]: one warm x1 throughput step (30 spares) with extra arguments
  local name=$1; shift
  echo "$name ${KZ_X1_LIMIT_S:-100} $TP --scales 1 --clocks warm --spares 30 $* --out $R/files/tp_$name.json"
}

if [ "$part" = ninth ]; then  # ~7.5 min on 2 GPUs: wall / GPU with and without the shared-output pool, GPU tests | adversarial, repeatability
  two_lanes "$(x1 61_x1_pool); $(x1 62_x1_no_pool --no-ipc-pool); $(x1 63_x1_pool); $(x1 64_x1_no_pool --no-ipc-pool)
    ; $(x1 65_x1_pool); $(x1 66_x1_no_pool --no-ipc-pool); $(x1 67_x1_pool); $S01" "$S02; $S11"
fi

if [ "$part" = tenth ]; then  # ~8 min on 2 GPUs: wall / GPU with and without the workers' arenas, GPU tests | adversarial, repeatability
  two_lanes "$(x1 71_x1_arena); $(x1 72_x1_no_arena --no-ipc-arena); $(x1 73_x1_arena); $(x1 74_x1_no_arena --no-ipc-arena)
    ; $(x1 75_x1_arena); $(x1 76_x1_no_arena --no-ipc-arena); $S01" "$S02; $S11"
fi

if [ "$part" = tenth1 ]; then  # ~7.5 min on 1 GPU, nothing beside it: x1 four times, alternating without arenas, then the GPU tests
  for s in "$(x1 81_x1_arena)" "$(x1 82_x1_no_arena --no-ipc-arena)" "$(x1 83_x1_arena)" \
           "$(x1 84_x1_no_arena --no-ipc-arena)" "$S01"; do
    eval "CUDA_VISIBLE_DEVICES=0 step $s"
  done
fi

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

if [ "$part" = spread ]; then  # ~2.5 min on 2 GPUs: wall / GPU three times at x1 and twice at x2
  two_lanes "$S13; $S17; $S14" "$S18; $S19"
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

if [ "$part" = scale ]; then  # ~5 min on 2 GPUs
  ray_steps
fi

if [ "$part" = fit ]; then  # ~9.5 min on 2 GPUs: Ray scaling with sized spares, then CA-GRPO scaling
  KZ_POOL_SPARES=${KZ_POOL_SPARES:-share} KZ_POOL_LIMIT_S=${KZ_POOL_LIMIT_S:-200} ray_steps
  KZ_SCALING_LIMIT_S=${KZ_SCALING_LIMIT_S:-300} train_steps
fi

if [ "$part" = checks ]; then  # ~8 min on 2 GPUs: the GPU tests of the evaluator and of training
  step $S01
  [ "$ngpu" -ge 2 ] && step 32_train_gpu_test 130 bash scripts/test.sh -m gpu tests/test_train_ca_grpo.py -p no:cacheprovider
fi

if [ "$part" = train ]; then  # ~6 min on 2 GPUs
  train_steps
  if [ "$ngpu" -ge 2 ]; then
    step 32_train_gpu_test 130 bash scripts/test.sh -m gpu tests/test_train_ca_grpo.py -p no:cacheprovider
  fi
fi
echo "part $part done in $(( $(date +%s) - t_all ))s" | tee -a "$R/summary.txt"
save
