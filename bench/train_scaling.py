"""CA-GRPO data parallel over 1, 2, ... GPUs: step time per GPU count, and identical rewards.

Launches `accelerate launch --num_processes N --config_file kernelzero/train/accelerate/C.yaml
tests/_train_ddp_worker.py` for every N in --gpus and every C in --configs, on one small random
model built offline. The worker's rewards come from a fixed table indexed by (task, position in
the group), so the raw verdicts are the same whatever N is; the final rewards (after the group
gate, which must see whole groups) must then be identical too. Step times come from TRL's own
`step_time` log (generation + reward + optimizer step), median over the steps after the first.

    python bench/train_scaling.py --gpus 1 2 --configs ddp fsdp2 --out train_scaling.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def launch(n: int, config: str, model: Path, out: Path, steps: int, tokens: int, log: Path) -> dict:
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(n),
           "--config_file", str(ROOT / "kernelzero" / "train" / "accelerate" / f"{config}.yaml"),
           "--main_process_port", str(29500 + n + 10 * len(config)),
           str(ROOT / "tests" / "_train_ddp_worker.py"), str(model), str(out), str(steps),
           str(tokens), "bf16" if torch.cuda.is_available() else "fp32"]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "OMP_NUM_THREADS": "4", "TOKENIZERS_PARALLELISM": "false"}
    if torch.cuda.is_available():
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(n))
    t0 = time.perf_counter()
    with log.open("w") as fh:
        proc = subprocess.run(cmd, env=env, stdout=fh, stderr=subprocess.STDOUT, timeout=900)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        tail = log.read_text(errors="replace")[-1500:]
        return {"gpus": n, "config": config, "ok": False, "wall_s": wall, "error": tail}
    res = json.loads(out.read_text())
    steps_s = [s for s in res.get("step_times_s") or [] if s is not None]
    return {"gpus": n, "config": config, "ok": True, "wall_s": wall,
            "train_runtime_s": res.get("train_runtime_s"), "step_times_s": steps_s,
            "median_step_s": statistics.median(steps_s[1:] or steps_s) if steps_s else None,
            "distributed_type": res.get("distributed_type"), "history": res["history"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--gpus", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--configs", nargs="+", default=["ddp", "fsdp2"], help="kernelzero/train/accelerate/*.yaml")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--tokens", type=int, default=128, help="completion tokens per sample")
    ap.add_argument("--hidden", type=int, default=512)
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "train_scaling.json")
    args = ap.parse_args()

    from kernelzero.models.tiny import build_tiny_model
    work = Path(tempfile.mkdtemp(prefix="kz-train-scaling-"))
    model = build_tiny_model(work / "model", hidden_size=args.hidden, num_layers=args.layers)
    n_params = sum(p.numel() for p in __import__("transformers").AutoModelForCausalLM
                   .from_pretrained(model).parameters())
    runs = []
    for config in args.configs:
        for n in args.gpus:
            r = launch(n, config, model, work / f"{config}_{n}.json", args.steps, args.tokens,
                       work / f"{config}_{n}.log")
            runs.append(r)
            msg = (f"median step {r['median_step_s']:.3f} s, wall {r['wall_s']:.1f} s" if r["ok"]
                   else "FAILED: " + r["error"].strip().splitlines()[-1][:200])
            print(f"{config:6s} x{n}: {msg}", flush=True)
    # Rewards must not depend on the number of processes (within one config and across configs).
    ok_runs = [r for r in runs if r["ok"]]
    def rewards(r):
        return [(h["correct"], h["speed"], h["rewards"]) for h in r["history"]]
    identical = all(rewards(r) == rewards(ok_runs[0]) for r in ok_runs) if ok_runs else None
    result = {"model_params": n_params, "steps": args.steps, "completion_tokens": args.tokens,
              "group_size": 4, "prompts_per_step": 3, "runs": runs, "rewards_identical": identical}
    args.out.write_text(json.dumps(result, indent=2))
    print(f"{n_params / 1e6:.1f}M-parameter model; rewards identical across runs: {identical}")
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
