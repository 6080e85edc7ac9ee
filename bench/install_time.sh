#!/usr/bin/env bash
# Fresh-clone time of the README's first command, as a new user meets it: a fresh clone of a
# checkout's committed HEAD, a fresh venv, pip's cache off, then the README's first command line
# (`pip install ... && kernelzero train ...`) run in two timed halves: the install, then the main
# job, whose first line of output is timestamped.
#
#   bash bench/install_time.sh [CHECKOUT] [RESULT_JSON]
#
# Prints and writes (default: /tmp/install_time.json) install_s (and install_cpu_s, its CPU
# seconds, user + sys: steadier than wall time on a shared host), first_line_s (from the command's
# start to the main job's first line: the 2-minute target), job_s and job_rc, total_s, the number of
# packages installed, the first line itself and the host's 1-minute load average before and after
# (the time is shared-host noise when that is high). The main job runs under TRITON_INTERPRET=1
# as on any CPU machine. KZ_CMD replaces the README's command (to compare variants), e.g.
# KZ_CMD='pip install torch==2.13.0 -e ".[all]" && kernelzero train --config tiny-cpu'.
set -euo pipefail
SRC=$(cd "${1:-$(dirname "$0")/..}" && pwd)
RESULT=${2:-/tmp/install_time.json}
WORK=$(mktemp -d /tmp/kz_install.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
git clone -q "$SRC" "$WORK/c"
cd "$WORK/c"
# The README's first command: the first line of its first bash block that runs pip install.
CMD=${KZ_CMD:-$(awk '/^```bash/{f=1; next} /^```/{if (f) exit} f && /pip install/ {print; exit}' README.md)}
CMD=${CMD%%#*}
INSTALL=${CMD%% && *}
JOB=${CMD#* && }
[ "$INSTALL" != "$CMD" ] || { echo "README's first command has no '&&'-joined main job: $CMD" >&2; exit 1; }
load() { cut -d' ' -f1 /proc/loadavg; }
LOAD0=$(load)
python3 -m venv "$WORK/v"
export PATH="$WORK/v/bin:$PATH" PIP_NO_CACHE_DIR=1 TRITON_INTERPRET=1
T0=$(date +%s.%N)
# CPU seconds (user + sys) beside the wall time: the wall time of a shared host is noise.
TIMEFORMAT='%U %S'
{ time bash -c "$INSTALL" > "$WORK/install.log" 2>&1 || { tail -20 "$WORK/install.log" >&2; exit 1; }; } 2> "$WORK/cpu"
T1=$(date +%s.%N)
read -r CPU_U CPU_S < "$WORK/cpu"
# stdout and stderr together: the first line of either counts as the job's first line.
FIRST=""; T2=""; JOB_RC=""
while IFS= read -r line; do
  case $line in __kz_job_rc=*) JOB_RC=${line#__kz_job_rc=}; continue ;; esac
  if [ -z "$T2" ]; then T2=$(date +%s.%N); FIRST=$line; fi
  echo "$line" >> "$WORK/job.log"
done < <(bash -c "$JOB" 2>&1; echo "__kz_job_rc=$?")
[ "$JOB_RC" = 0 ] || tail -20 "$WORK/job.log" >&2
T3=$(date +%s.%N)
NPKG=$(pip list --format=freeze 2>/dev/null | wc -l)
KZ_CMD=$CMD KZ_FIRST=$FIRST python3 - "$RESULT" <<EOF
import json, os, sys
t0, t1, t2, t3 = $T0, $T1, ${T2:-$T1}, $T3
r = {"command": os.environ["KZ_CMD"].strip(), "commit": "$(git rev-parse --short HEAD)",
     "install_s": round(t1 - t0, 1), "install_cpu_s": round($CPU_U + $CPU_S, 1),
     "first_line_s": round(t2 - t0, 1),
     "job_s": round(t3 - t1, 1), "job_rc": ${JOB_RC:-None}, "total_s": round(t3 - t0, 1), "packages": $NPKG,
     "first_line": os.environ["KZ_FIRST"], "load_before": $LOAD0, "load_after": $(load)}
open(sys.argv[1], "w").write(json.dumps(r, indent=1) + "\n")
print(json.dumps(r))
EOF
