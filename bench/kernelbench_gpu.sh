#!/usr/bin/env bash
# Issue 24 on one GPU: KernelBench at its real sizes. Each step has its own time limit and log
# under RESULTS_DIR; the results file (bench/results/kernelbench_identity_h200.json) is rewritten
# after every slice, and a copy goes to RESULTS_DIR with runs/kb_identity (store, samples, audit
# log). Everything is resumable: run the same part again (on a fresh machine, with that folder
# carried back as runs/kb_identity, or its store committed as bench/results/kb_identity.db, and the
# results file in place) and it goes on where it stopped.
#
#   bash bench/kernelbench_gpu.sh tests   RESULTS_DIR  # GPU tests: half the card beside others,
#                                                      # a streamed task, CUDA build reuse (~2 min)
#   bash bench/kernelbench_gpu.sh judge   RESULTS_DIR  # identity judging, Levels 1-3, slices of
#                                                      # 40 until KZ_BUDGET_S (default 480 s)
#   bash bench/kernelbench_gpu.sh harness RESULTS_DIR  # KernelBench's harness vs ours, 20 problems
#                                                      # (KZ_HARNESS: its repository copy)
#   bash bench/kernelbench_gpu.sh audit   RESULTS_DIR  # tasks audit, Levels 1-2 (KZ_AUDIT_LIMIT)
#
# KZ_KB: KernelBench's problems (default: ../shared/kernelbench, shared/kernelbench or
# third_party/kernelbench, the first that exists). Level 3 problems 48-49 need einops: put its
# wheel in .whl/ (it is installed from there when missing).
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: kernelbench_gpu.sh tests|judge|harness|audit RESULTS_DIR}
R=${2:?usage: kernelbench_gpu.sh tests|judge|harness|audit RESULTS_DIR}
mkdir -p "$R" && R=$(cd "$R" && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
source bench/gpu_env.sh  # bubblewrap and the wheels the image lacks, as the other GPU parts
# The verdict key travels with the store, so a run resumed on a fresh machine can check its records.
export KZ_VERDICT_KEY_FILE=${KZ_VERDICT_KEY_FILE:-$PWD/runs/kb_identity/verdict.key}
KB=${KZ_KB:-}
for d in ../shared/kernelbench shared/kernelbench third_party/kernelbench; do
  [ -z "$KB" ] && [ -d "$d" ] && KB=$(cd "$d" && pwd)
done
if [ -z "$KB" ] || [ ! -d "$KB/level1" ]; then  # an empty --kb would load whatever lies under "."
  echo "kernelbench_gpu.sh: KernelBench's problems not found (KZ_KB, ../shared/kernelbench," \
       "shared/kernelbench, third_party/kernelbench): copy them there or set KZ_KB" >&2
  exit 2
fi
RESULTS_FILE=bench/results/kernelbench_identity_h200.json
# The store as the last run committed it (bench/results/kb_identity.db, without its key: those
# records read `other_key` and are kept, flagged): a fresh machine goes on where that run stopped.
if [ ! -f runs/kb_identity/identity.db ] && [ -f bench/results/kb_identity.db ]; then
  mkdir -p runs/kb_identity && cp bench/results/kb_identity.db runs/kb_identity/identity.db
fi
python3 -c 'import einops' 2>/dev/null || \
  { ls .whl/einops-*.whl >/dev/null 2>&1 && python3 -m pip install -q --no-index --no-deps .whl/einops-*.whl; }

step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $name (limit ${limit}s) ===" | tee -a "$R/summary.txt"
  timeout --signal=INT --kill-after=20 "$limit" "$@" > "$R/$name.log" 2>&1
  echo "--- $name: rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$R/summary.txt"
  tail -n 6 "$R/$name.log" | sed 's/^/    /' | tee -a "$R/summary.txt"
  cp -f "$RESULTS_FILE" "$R/" 2>/dev/null
  # the store, samples and audit log: carry them back as runs/kb_identity to resume elsewhere
  [ -d runs/kb_identity ] && rm -rf "$R/kb_identity" && cp -r runs/kb_identity "$R/kb_identity"
}

case "$part" in
  tests)
    step gpu_memory_tests 300 bash scripts/test.sh -m gpu -s tests/test_eval_gpu_memory.py \
      tests/test_reserve.py -p no:cacheprovider ;;
  judge)
    step identity "${KZ_LIMIT_S:-560}" python3 bench/kernelbench_identity.py judge --kb "$KB" \
      --levels ${KZ_LEVELS:-1 2 3} --limit "${KZ_SLICE:-40}" --budget-s "${KZ_BUDGET_S:-480}" ;;
  harness)  # KZ_RESUME=1: keep ours and what of theirs is done (a second call)
    step harness "${KZ_LIMIT_S:-560}" python3 bench/kernelbench_identity.py harness --kb "$KB" \
      --harness "${KZ_HARNESS:?KZ_HARNESS: a copy of the KernelBench repository}" \
      ${KZ_RESUME:+--resume} ;;
  audit)
    step audit "${KZ_LIMIT_S:-560}" python3 bench/kernelbench_identity.py audit --kb "$KB" \
      --levels 1 2 --limit "${KZ_AUDIT_LIMIT:-0}" ;;
  *) echo "unknown part $part" >&2; exit 2 ;;
esac
