#!/usr/bin/env bash
# The sandbox jail (issue 27) on a GPU machine, every check under its own time limit, in parts:
#
#   bash bench/sandbox_gpu.sh check RESULTS_DIR  # ~3 min: jail tools, CUDA IPC from jailed workers
#                                                #   (own uid; PID namespace; none), the threat-11
#                                                #   fixtures judged on cuda through `kernelzero eval`
#   bash bench/sandbox_gpu.sh speed RESULTS_DIR  # ~3.5 min a pair: throughput x1 (warm, 30 spares)
#                                                #   jailed (A) then unjailed (B), KZ_AB_ROUNDS pairs (1)
#   bash bench/sandbox_gpu.sh adv RESULTS_DIR    # ~5.5 min: the whole adversarial suite on cuda, jailed
#   bash bench/sandbox_gpu.sh all RESULTS_DIR    # check + speed (~7 min)
#
# bubblewrap: where `bwrap` is missing, the .deb files in .debs/ (carried with the tree) are
# unpacked with `dpkg -x` into .debs/root and put on PATH / LD_LIBRARY_PATH. Make them on a Debian
# or Ubuntu machine: mkdir -p .debs && (cd .debs && apt-get download bubblewrap libcap2 libselinux1
# libpcre2-8-0), and carry .debs (git ignores it).
# Each step's log is RESULTS_DIR/files/NN_step.log; RESULTS_DIR/summary.txt has every step's exit
# code and last lines; a failing step does not stop the others.
set -uo pipefail
cd "$(dirname "$0")/.."
part=${1:?usage: sandbox_gpu.sh check|speed|adv|all RESULTS_DIR}
R=${2:?usage: sandbox_gpu.sh check|speed|adv|all RESULTS_DIR}
mkdir -p "$R/files" && R=$(cd "$R" && pwd)
export PYTHONUNBUFFERED=1 PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"

source bench/gpu_env.sh  # bubblewrap from the carried .debs/, where the image has none
{ echo "part $part: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  echo "bwrap: $(command -v bwrap || echo MISSING) $(bwrap --version 2>&1 | head -1)"
  echo "setpriv: $(command -v setpriv || echo MISSING); kill: $(command -v kill || echo MISSING)"
  echo "uid $(id -u); $(ls -l /dev/nvidia* 2>&1 | awk '{print $1, $3, $4, $NF}' | paste -sd';')"
} | tee "$R/summary.txt"

step() {  # step NAME LIMIT_S COMMAND...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  echo "=== $name (limit ${limit}s) ===" | tee -a "$R/summary.txt"
  timeout --signal=INT --kill-after=20 "$limit" "$@" > "$R/files/$name.log" 2>&1
  echo "--- $name: rc=$? in $(( $(date +%s) - t0 ))s" | tee -a "$R/summary.txt"
  tail -n 6 "$R/files/$name.log" | sed 's/^/    /' | tee -a "$R/summary.txt"
}

check() {
  step 01_jail_tools 60 python3 -m pytest -q -s -p no:cacheprovider -m gpu \
    tests/test_sandbox_gpu.py -k device_nodes
  step 02_cuda_ipc_jailed 180 python3 -m pytest -q -s -rxX -p no:cacheprovider -m gpu \
    tests/test_sandbox_gpu.py -k "cuda_ipc or initialises"
  step 03_containment_cuda 240 env KZ_ADV_DEVICE=cuda KZ_REQUIRE_SANDBOX=1 python3 -m pytest -q \
    -p no:cacheprovider tests/test_sandbox_containment.py -k contained
}

speed() {  # A: jailed (the default), B: unjailed, alternating; quote the wall/GPU ratios
  local tp="python3 bench/eval_throughput.py --skip-repeat --scales 1 --clocks warm --spares 30"
  for k in $(seq 1 "${KZ_AB_ROUNDS:-1}"); do
    step "1${k}_x1_jailed" 150 $tp --sandbox auto --out "$R/files/tp_x1_jailed_$k.json"
    step "1${k}_x1_unjailed" 150 $tp --sandbox none --out "$R/files/tp_x1_unjailed_$k.json"
  done
  python3 - "$R/files" <<'EOF' | tee -a "$R/summary.txt"
import json, pathlib, sys
for p in sorted(pathlib.Path(sys.argv[1]).glob("tp_x1_*.json")):
    for r in json.loads(p.read_text()).get("throughput_runs", []):
        print(f"{p.stem:22s} isolation {r.get('sandbox')}: {r['correct']}/{r['candidates']} "
              f"correct, wall {r['wall_s']:.1f} s, GPU {r['gpu_s']:.1f} s, "
              f"wall/GPU {r['wall_over_gpu']:.2f}x")
EOF
}

adv() {
  step 21_adversarial_cuda_jailed 400 env KZ_ADV_DEVICE=cuda KZ_REQUIRE_SANDBOX=1 \
    bash scripts/test.sh tests/test_adversarial.py -p no:cacheprovider
}

case "$part" in
  check) check ;;
  speed) speed ;;
  adv) adv ;;
  all) check; speed ;;
  *) echo "unknown part $part"; exit 2 ;;
esac
