#!/usr/bin/env bash
# The learning figures on one GPU (docs/perf.md "Learning"), in parts of under 10 minutes each:
#   bash bench/learning_gpu.sh coders OUT   # fast-sampler bench; coder-cpu and coder-gpu from zero
#   bash bench/learning_gpu.sh gpu-coder OUT  # the GPU Coder on KernelBench's family problems
#   bash bench/learning_gpu.sh kb-bench OUT # a trained Coder (default: shipped) on the same problems
#   bash bench/learning_gpu.sh coder-stage OUT  # one more SFT stage of a trained Coder, then kb-bench
#                                               # (KZ_SKIP_KB=1: without it)
#   bash bench/learning_gpu.sh data OUT     # more verified rows, judged on the host's CPU cores
#   bash bench/learning_gpu.sh rl OUT       # the main job's CA-GRPO (tiny-cpu) at GPU scale: the
#                                           # Coder on the card, kernels judged on the host's CPU
#                                           # cores; one run per seed in KZ_SEEDS (default "0 1 2")
#   bash bench/learning_gpu.sh gate OUT     # the gate comparison (bench/ablation.py, base
#                                           # ablation-gate-gpu: kernels judged and timed on the
#                                           # card): the arms in KZ_GATE_ARMS missing from
#                                           # docs/ablation-gate.json, seeds KZ_SEEDS (default 0),
#                                           # until KZ_GATE_LIMIT_S; OUT gets the updated tables.
#                                           # KZ_GATE_SETS: --set's for every arm (another budget,
#                                           # another fingerprint); KZ_GATE_OUT: the tables' name
#                                           # (default docs/ablation-gate)
# Needs: the verified distillation rows gzipped (KZ_DATA; default data/family-train.jsonl.gz, the
# rows committed with the repository, else .data/family-train.jsonl.gz; made on any
# machine by `kernelzero distill --teacher compiler ...` or a coder-cpu run's cold start, whose
# cold_start/data.jsonl it is), trl/datasets wheels in .whl/ where the image lacks them (see the
# device notes), and KernelBench's problems (KZ_KB: default ../shared/kernelbench, else
# .kb/kernelbench) for the gpu-coder part, which judges the Level 1 problems the teacher
# compiles. Every step has its own limit; results land in OUT (JSON, the models as tarballs,
# the logs).
set -uo pipefail
part=${1:?part: coders, gpu-coder or data}
OUT=${2:?results directory}
mkdir -p "$OUT"
cd "$(dirname "$0")/.."
source bench/gpu_env.sh
export TOKENIZERS_PARALLELISM=false
python3 -c 'import torch, triton, transformers, trl, datasets, pyarrow; import trl.trainer.sft_trainer; print("torch", torch.__version__, "triton", triton.__version__, "transformers", transformers.__version__, "trl", trl.__version__, "datasets", datasets.__version__, "pyarrow", pyarrow.__version__, torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU")' | tee "$OUT/versions.txt"
[ "${PIPESTATUS[0]}" = 0 ] || { echo "the training stack does not import here; stopping"; exit 1; }
kz() { python3 -m kernelzero "$@"; }
# KernelBench's Level 1 problems the family covers (those the teacher compiles) into /tmp/kb-family.
kb_family() {
  KB=${KZ_KB:-}
  for d in ../shared/kernelbench .kb/kernelbench; do [ -z "$KB" ] && [ -d "$d" ] && KB=$d; done
  rm -rf /tmp/kb-family && mkdir -p /tmp/kb-family/level1
  python3 - "$KB/level1" /tmp/kb-family/level1 <<'EOF' | tee "$OUT/kb_family.txt"
import shutil, sys
from pathlib import Path
from kernelzero.teacher import compile_module
took = [p.name for p in sorted(Path(sys.argv[1]).glob("*.py")) if compile_module(p.read_text()).ok]
for name in took:
    shutil.copy(Path(sys.argv[1]) / name, Path(sys.argv[2]) / name)
print(f"{len(took)} Level 1 problems in the family:", " ".join(took))
EOF
}
# A trained Coder ($1: a --model spec) on those problems, without training: greedy pass@1 and
# fast_1 at their real sizes under run name $2, then KZ_K samples a problem at KZ_T.
kb_bench() {
  kb_family
  timeout "${KZ_KB_LIMIT_S:-240}" python3 -m kernelzero bench --tasks /tmp/kb-family --model "$1" -k 1 \
    --temperature 0 --device cuda --run "$2" --db "$OUT/kb_bench.db" --runs-dir /tmp/runs --json \
    > "$OUT/$2.json" 2> "$OUT/$2.log"; echo "kb bench $2 rc=$?"; tail -3 "$OUT/$2.log"
  cp "/tmp/runs/$2/report.md" "$OUT/$2.md" 2>/dev/null
  [ -z "${KZ_K:-}" ] || { timeout "${KZ_KB_K_LIMIT_S:-240}" python3 -m kernelzero bench --tasks /tmp/kb-family \
    --model "$1" -k "$KZ_K" --temperature "${KZ_T:-0.7}" --device cuda --run "$2-k$KZ_K" --db "$OUT/kb_bench.db" \
    --runs-dir /tmp/runs --json > "$OUT/$2-k$KZ_K.json" 2> "$OUT/$2-k$KZ_K.log"; echo "kb bench k=$KZ_K rc=$?"; }
}
DATA=${KZ_DATA:-}
for d in data/family-train.jsonl.gz .data/family-train.jsonl.gz; do
  [ -z "$DATA" ] && [ -f "$d" ] && DATA=$d
done

case "$part" in
coders)
  gunzip -c "$DATA" > /tmp/family-train.jsonl || exit 1
  [ -n "${KZ_SKIP_FASTGEN:-}" ] || timeout "${KZ_FASTGEN_LIMIT_S:-90}" python3 bench/fastgen_bench.py \
    ${KZ_FASTGEN_ARGS:---presets cpu,gpu,large --rows 512 --new 256 --hf-rows 512} --out "$OUT/fastgen.json" 2>&1 | grep -v "Loading weights" | tee "$OUT/fastgen.log"
  # KZ_PARALLEL=1 trains the presets side by side on the one GPU (small models leave it idle).
  train_preset() {
    timeout "${KZ_STEP_LIMIT_S:-330}" python3 -m kernelzero train --config "coder-$1" --out "/tmp/runs/coder-$1" \
      --set cold_start.data=/tmp/family-train.jsonl --set cold_start.time_budget_s="${KZ_SFT_BUDGET_S:-130}" \
      ${KZ_SETS:-} > "$OUT/coder-$1.log" 2>&1
    cp "/tmp/runs/coder-$1/summary.json" "$OUT/coder-$1-summary.json" 2>/dev/null
    cp "/tmp/runs/coder-$1/cold_start/cold_start.json" "$OUT/coder-$1-cold_start.json" 2>/dev/null
    grep -v "it/s\]" "$OUT/coder-$1.log" | tail -25
  }
  for preset in ${KZ_PRESETS:-cpu gpu}; do
    if [ -n "${KZ_PARALLEL:-}" ]; then train_preset "$preset" & else train_preset "$preset"; fi
  done
  wait
  # The Proposer that ships beside the Coder: from zero on the family generator's modules.
  [ -n "${KZ_SKIP_PROPOSER:-}" ] || timeout "${KZ_STEP_LIMIT_S:-200}" python3 -m kernelzero train --config proposer-cpu \
    --out /tmp/runs/proposer-cpu --set cold_start.time_budget_s="${KZ_PROPOSER_BUDGET_S:-100}" ${KZ_SETS_P:-} \
    2>&1 | tee "$OUT/proposer-cpu.log" | grep -v "it/s\]"
  # The CPU-size models come back to be shipped (fp32 safetensors + tokenizer, ~12 MB each).
  for m in coder-cpu/cold_start proposer-cpu/proposer_cold_start; do
    [ -d "/tmp/runs/$m/model" ] && tar --exclude="*.pt" --exclude=training_args.bin --exclude="checkpoint-*" \
      -C "/tmp/runs/$m" -czf "$OUT/${m%%/*}-model.tgz" model
  done
  cp /tmp/runs/proposer-cpu/proposer_cold_start/proposer_cold_start.json "$OUT/" 2>/dev/null
  ;;
data)
  # Verified rows from the host's many CPU cores (the Triton interpreter, as on CI): several
  # module streams side by side (each composes and compiles its modules serially first), each
  # cut at its time limit with what it judged written; they come back gzipped, one per stream.
  for s in ${KZ_DATA_SEEDS:-1 2 3 4}; do
    ( timeout $(( ${KZ_DATA_LIMIT_S:-480} + 60 )) python3 bench/family_data.py --modules "${KZ_DATA_MODULES:-20000}" \
        --seed "$s" --workers "${KZ_DATA_WORKERS:-6}" --time-limit "${KZ_DATA_LIMIT_S:-480}" --out "/tmp/data-$s" \
        > "$OUT/data-$s.log" 2>&1
      gzip -c "/tmp/data-$s/data.jsonl" > "$OUT/family-seed$s.jsonl.gz" ) &
  done
  wait
  ;;
gpu-coder)
  # The GPU-size Coder from zero, then on KernelBench's Level 1 problems the family covers, at
  # their real sizes, judged on the GPU (those the teacher compiles, picked below).
  # Its held-out kernels are judged on the GPU: the image's Triton 3.6 interpreter fails the
  # teacher's rowwise and matmul kernels that pass on the GPU and under triton 3.9 (docs/learning-results.md).
  # KZ_EXTRA: more verified rows (gzipped) added once, e.g. data/family-train-forms.jsonl.gz.
  { gunzip -c "$DATA" && { [ -z "${KZ_EXTRA:-}" ] || gunzip -c "$KZ_EXTRA"; }; } > /tmp/family-train.jsonl || exit 1
  # A second call on a machine still warm resumes the run (the held-out evaluation a step limit cut).
  resume=; [ -f /tmp/runs/coder-gpu/state.json ] && resume=--resume
  # KZ_SAMPLE_HELDOUT=1: the run judges no held-out set on the card (about 0.5 kernels/s there);
  # the trained Coder samples them instead (OUT/heldout-completions.jsonl), for
  # `bench/heldout_split.py judge` on a CPU machine with the same three --set's. KZ_SAMPLE_HELDOUT=cpu:
  # not sampled on the card either (with KZ_RETURN_MODEL=1, `heldout_split.py sample --device cpu`
  # samples the returned model here), so the call's time goes to the SFT.
  sets="--set heldout.ood_long=50 --set heldout.ood_pairs=50"
  [ -z "${KZ_SAMPLE_HELDOUT:-}" ] || sets="--set heldout.family=0 --set heldout.ood_long=0 --set heldout.ood_pairs=0 --set heldout.handwritten=false"
  timeout "${KZ_STEP_LIMIT_S:-330}" python3 -m kernelzero train --config coder-gpu --out /tmp/runs/coder-gpu $resume \
    --set cold_start.data=/tmp/family-train.jsonl --set cold_start.time_budget_s="${KZ_SFT_BUDGET_S:-120}" \
    --set cold_start.curve_every=0 --set eval.device=cuda --set eval.timing=false \
    $sets ${KZ_SETS:-} 2>&1 | tee "$OUT/coder-gpu.log" | grep -v "it/s\]"
  [ -z "${KZ_SAMPLE_HELDOUT:-}" ] || [ "$KZ_SAMPLE_HELDOUT" = cpu ] || timeout "${KZ_SAMPLE_LIMIT_S:-120}" python3 bench/heldout_split.py sample \
    --config coder-gpu --model /tmp/runs/coder-gpu/cold_start/model --out "$OUT/heldout-completions.jsonl" \
    --set heldout.family=200 --set heldout.ood_long=50 --set heldout.ood_pairs=50 2>&1 | tail -3
  cp /tmp/runs/coder-gpu/summary.json "$OUT/coder-gpu-summary.json" 2>/dev/null
  cp /tmp/runs/coder-gpu/cold_start/cold_start.json "$OUT/coder-gpu-cold_start.json" 2>/dev/null
  # KZ_RETURN_MODEL=1: the trained model comes back in bf16 (about 50 MB for 24M parameters), in
  # 15 MB parts (the device returns files of at most 16 MB): cat OUT/coder-gpu-model.tgz.part-* | tar xz
  [ -z "${KZ_RETURN_MODEL:-}" ] || { rm -rf /tmp/model-bf16 && cp -r /tmp/runs/coder-gpu/cold_start/model /tmp/model-bf16 \
    && python3 -c 'import sys, torch; from safetensors.torch import load_file, save_file; p = sys.argv[1]; save_file({k: v.to(torch.bfloat16) for k, v in load_file(p).items()}, p, metadata={"format": "pt"})' /tmp/model-bf16/model.safetensors \
    && tar czf - -C /tmp model-bf16 | split -b 15M - "$OUT/coder-gpu-model.tgz.part-"; }
  [ -n "${KZ_SKIP_KB:-}" ] || kb_bench hf:/tmp/runs/coder-gpu/cold_start/model coder-gpu-kb-l1
  [ -z "${KZ_TEACHER_N:-}" ] || timeout 150 python3 bench/teacher_check.py --n "$KZ_TEACHER_N" --target gpu \
    --device cuda --seed 0 --out "$OUT/teacher_gpu" 2>&1 | tail -15
  ;;
coder-stage)
  # One more SFT stage of a trained Coder (KZ_MODEL: default the shipped one) on the committed
  # rows plus KZ_EXTRA (more verified rows, gzipped, repeated KZ_EXTRA_REPEAT times), as the
  # shipped stages ran (batch 64, lr 1e-3 decaying to 0, bf16); then kb-bench on the result. The
  # model comes back as OUT/coder-stage-model.tgz. KZ_BASE_ROWS=N keeps N of the committed rows
  # (a fixed draw), the rest shuffled in with them: fewer rows to tokenize in a short slot.
  python3 - "$DATA" "${KZ_EXTRA:-}" "${KZ_EXTRA_REPEAT:-1}" "${KZ_BASE_ROWS:-}" > /tmp/stage.jsonl <<'EOF' || exit 1
import gzip, random, sys
data, extra, repeat, base = sys.argv[1:]
rows = gzip.open(data, "rt").read().splitlines()
if base:
    random.Random(7).shuffle(rows)
    rows = rows[:int(base)]
more = gzip.open(extra, "rt").read().splitlines() if extra else []
rows = more * int(repeat) + rows if base else rows + more * int(repeat)
if base:
    random.Random(8).shuffle(rows)
print("\n".join(rows))
EOF
  echo "stage rows: $(wc -l < /tmp/stage.jsonl)"
  M=${KZ_MODEL:-kernelzero/models/weights/coder-cpu}
  timeout "${KZ_STEP_LIMIT_S:-400}" python3 -m kernelzero sft --model "$M" --data /tmp/stage.jsonl --out /tmp/stage-model \
    --max-steps "${KZ_STEPS:-3000}" --lr 1e-3 --batch-size 64 --max-length 2048 --bf16 --seed "${KZ_SEED:-5}" \
    --time-limit-s "${KZ_SFT_BUDGET_S:-300}" --json > "$OUT/coder-stage.json" 2> "$OUT/coder-stage.log"
  echo "stage rc=$?"; tail -c 600 "$OUT/coder-stage.json"
  cp "$M/kernelzero_model.json" /tmp/stage-model/ 2>/dev/null
  tar --exclude="*.pt" --exclude=training_args.bin --exclude="checkpoint-*" -C /tmp -czf "$OUT/coder-stage-model.tgz" stage-model
  [ -n "${KZ_SKIP_KB:-}" ] || kb_bench hf:/tmp/stage-model kb-l1-stage
  ;;
rl)
  # tiny-cpu's recipe with 4 rounds and 4x the rollouts a step: the Coder samples and trains on the
  # card; its kernels are judged by the CPU evaluator on the host's cores (this image's Triton 3.6
  # interpreter fails rowwise and matmul kernels that pass under 3.9, so elementwise chains only:
  # KZ_RL_SETS adds or replaces settings). Each seed has its own limit (KZ_RL_LIMIT_S). Sampled at
  # temperature 1.0, as measured on 6 Dec (tiny-cpu samples at 1.3 since 7 Dec).
  for seed in ${KZ_SEEDS:-0 1 2}; do
    timeout --signal=INT --kill-after=20 "${KZ_RL_LIMIT_S:-170}" python3 -m kernelzero train --config tiny-cpu \
      --out "$OUT/rl-seed$seed" --set seed=$seed --set device=cuda --set torch_threads=null --set rounds=4 \
      --set coder_steps=${KZ_RL_STEPS:-16} --set coder.prompts_per_step=8 --set seed_tasks=family:2000 \
      --set 'cold_start.family.kinds=[elementwise]' --set heldout.family=100 --set heldout.ood_long=100 \
      --set eval.max_workers=${KZ_RL_WORKERS:-14} --set coder.temperature=1.0 ${KZ_RL_SETS:-} > "$OUT/rl-seed$seed.log" 2>&1
    echo "rl seed $seed rc=$?"; tail -n 12 "$OUT/rl-seed$seed.log"
    rm -rf "$OUT/rl-seed$seed/ckpt" "$OUT/rl-seed$seed/tb"  # weights and optimizer: not returned
  done
  ;;
gate)
  # Resumable across calls: an arm is recorded in docs/ablation-gate.json when its run finishes;
  # carry that file back to run the rest. A run cut by the limit starts again on a fresh machine;
  # on one still warm (the next call within its idle release) it restarts its phase in
  # /tmp/gate-runs with the rollouts it had judged answered from its verdict cache (7 Dec: the cut
  # uniform arm finished in 197 s of the next call) and the round 0 of its seed shared.
  seeds=$(echo ${KZ_SEEDS:-0} | tr ' ' ,)
  gate_out=${KZ_GATE_OUT:-docs/ablation-gate}
  timeout --signal=INT --kill-after=20 "${KZ_GATE_LIMIT_S:-520}" python3 bench/ablation.py --base ablation-gate-gpu \
    --arms "${KZ_GATE_ARMS:-sft,uniform,correct_only,speed_first}" --seeds "$seeds" --out "$gate_out" \
    --work /tmp/gate-runs ${KZ_GATE_SETS:-} > "$OUT/gate.log" 2>&1
  echo "gate rc=$?"; grep -E "^== |coder: |held-out .*pass@1" "$OUT/gate.log"
  cp "$gate_out".* "$gate_out-fast_1.png" "$OUT/" 2>/dev/null
  for r in /tmp/gate-runs/*/*/; do  # each run's summary and step log: the step-time split
    n=$(basename "$r"); mkdir -p "$OUT/runs/$n"; cp "$r/summary.json" "$r/steps.jsonl" "$OUT/runs/$n/" 2>/dev/null
    cp -r "$r/reports" "$OUT/runs/$n/" 2>/dev/null
  done
  ;;
kb-bench)
  # A trained Coder (KZ_MODEL: default the shipped one) on the same problems, without training.
  kb_bench "${KZ_MODEL:-shipped}" kb-l1-greedy
  ;;
*) echo "unknown part $part"; exit 2 ;;
esac
# The device returns at most 8 files: everything but the model tarballs goes into one.
(cd "$OUT" && tar czf results.tgz --exclude='*.tgz' --exclude='*.tgz.part-*' --exclude='*.jsonl.gz' . \
  && find . -mindepth 1 ! -name '*.tgz' ! -name '*.tgz.part-*' ! -name '*.jsonl.gz' -delete)
ls -la "$OUT"
