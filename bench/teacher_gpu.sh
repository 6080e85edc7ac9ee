#!/usr/bin/env bash
# The teacher's GPU checks (issue 22), on one H200, in under ~8 minutes:
#
#   bash bench/teacher_gpu.sh RESULTS_DIR      # on the device tool: bash bench/teacher_gpu.sh "$OUT"
#
# 1. gpu100: 100 H200-sized family modules compiled by the teacher, judged on cuda and timed
#    against eager: the correct rate (target 100%) and the geomean speedup on elementwise chains
#    of >= 2 ops (target >= 1.5x), in RESULTS_DIR/gpu100/summary.md.            (limit 280 s)
# 2. cpu120: 120 small modules of every kind through the real Triton compiler (correctness only):
#    what the interpreter accepts but the compiler would not shows up here.    (limit 130 s)
# 3. the teacher's GPU test (hand-written modules of each kind, judged on cuda). (limit 70 s)
# Each step has its own limit and log (RESULTS_DIR/NN_step.log); a failing step does not stop
# the others.
set -uo pipefail
cd "$(dirname "$0")/.."
R=${1:?usage: bench/teacher_gpu.sh RESULTS_DIR}
mkdir -p "$R" && R=$(cd "$R" && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
unset TRITON_INTERPRET
step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$R/$name.log" 2>&1
  local rc=$?
  echo "$name: rc=$rc in $(( $(date +%s) - t0 )) s; $(tail -n 1 "$R/$name.log")" | tee -a "$R/steps.txt"
}
step 01_gpu100 280 python3 bench/teacher_check.py --n 100 --target gpu --device cuda --seed 0 --out "$R/gpu100"
step 02_cpu120 130 python3 bench/teacher_check.py --n 120 --target cpu --device cuda --seed 0 --no-timing --out "$R/cpu120"
step 03_pytest 70 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_teacher.py
