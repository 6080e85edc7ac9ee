"""The Coder's held-out evaluation in two halves: sample where the model runs fast, judge where
the evaluator runs best. The GPU Coder samples on the device in seconds, but the device's Triton
3.6 interpreter fails the teacher's rowwise and matmul kernels and judging on cuda builds each
kernel in its own process (about 0.5 kernels/s); the CPU machine's evaluator (Triton 3.9
interpreter) judges the same kernels at CPU sizes, as every CPU held-out figure is judged.

    # on the GPU: greedy completions for the config's held-out sets (JSON lines, replay format)
    python bench/heldout_split.py sample --config coder-gpu --model DIR --out completions.jsonl \\
        --set heldout.family=200 --set heldout.ood_long=50 --set heldout.ood_pairs=50
    # on the CPU: judge them exactly as `kernelzero train` judges a held-out round
    python bench/heldout_split.py judge --config coder-gpu --completions completions.jsonl \\
        --out runs/gpu-coder-heldout --set heldout.family=200 ...

The two halves build the same task sets from the same config and overrides (the held-out
generator is deterministic); `judge` refuses a record whose tasks are not exactly those. It
writes what a training run's held-out round writes (report.md, summary.json and outcomes.jsonl
per set) and OUT/heldout.json (the summary.json entry, with every set's figures).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernelzero.train.config_file import load_config, parse_overrides  # noqa: E402


def _config(args):
    cfg = load_config(args.config, parse_overrides(args.set))
    from kernelzero.train.heldout import heldout_sets
    from kernelzero.train.loop import EXAMPLE_TASKS
    return cfg, heldout_sets(cfg, EXAMPLE_TASKS)


def sample(args) -> int:
    from kernelzero.models import load_backend
    from kernelzero.train.heldout import sample_tasks

    cfg, sets = _config(args)
    backend = load_backend(f"hf:{args.model}", device=args.device)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    took, tokens = {}, 0
    with open(out, "w") as f:
        for name, tasks in tqdm(sets.items(), desc="held-out sets", unit="set"):
            t0 = time.perf_counter()
            outs = sample_tasks(cfg, backend, tasks, 1, 0.0, cfg.seed)  # greedy, as round 0 samples
            took[name] = round(time.perf_counter() - t0, 1)
            for t, cs in zip(tasks, outs):
                for c in cs:
                    tokens += len(backend.tokenizer(c, add_special_tokens=False)["input_ids"])
                    f.write(json.dumps({"task": t.key, "set": name, "completion": c}) + "\n")
    # new tokens over the sampling time (prefill, padding and the first batch's warm-up included)
    print(json.dumps({"completions": str(out), "tasks": {k: len(v) for k, v in sets.items()},
                      "sampling_s": took, "new_tokens": tokens,
                      "new_tokens_per_s": round(tokens / max(sum(took.values()), 1e-9))}))
    return 0


def judge(args) -> int:
    from kernelzero.eval import Evaluator
    from kernelzero.train.judging import Judge, VerdictCache
    from kernelzero.train.round_report import heldout_eval

    cfg, sets = _config(args)
    known = {t.key for tasks in sets.values() for t in tasks}
    recorded = {json.loads(line)["task"] for line in Path(args.completions).read_text().splitlines() if line.strip()}
    if recorded != known:
        # a missing task means a cut-off sample half or other sets: it would be scored as a
        # failure (evaluate_coder), which would misstate the Coder, so refuse instead
        print(f"judge: the record holds {len(recorded - known)} tasks not in these held-out sets and "
              f"lacks {len(known - recorded)} of their {len(known)}: pass the same --config and --set "
              "as the sample half, and let it finish", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    with Evaluator(cfg.eval_config()) as evaluator:
        j = Judge(evaluator, VerdictCache(out / "verdicts.jsonl"), log=print)
        entry = heldout_eval(cfg, f"replay:{Path(args.completions).resolve()}", sets, j, out,
                             {"round": 0}, log=print)
    (out / "heldout.json").write_text(json.dumps(entry, indent=1) + "\n")
    print(json.dumps({k: entry[k] for k in ("pass@1", "pass@1_ci", "n_tasks")}))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name in ("sample", "judge"):
        p = sub.add_parser(name)
        p.add_argument("--config", default="coder-gpu", help="preset name or YAML file (as `kernelzero train`)")
        p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
        p.add_argument("--out", required=True, help="sample: the completions file; judge: a results folder")
        if name == "sample":
            p.add_argument("--model", required=True, help="a Coder checkpoint directory")
            p.add_argument("--device", default="cuda")
        else:
            p.add_argument("--completions", required=True, help="the sample half's file")
    args = ap.parse_args()
    return sample(args) if args.cmd == "sample" else judge(args)


if __name__ == "__main__":
    sys.exit(main())
