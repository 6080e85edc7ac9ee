"""`kernelzero distill`: cold-start data from a teacher, verified by the evaluator.

    kernelzero distill --teacher SPEC --tasks DIR|POOL.db -k 8 --out DATA.jsonl [--fastest]

Samples k kernels per task from the teacher, judges them all, keeps the correct ones (or the
fastest correct one per task with --fastest) and writes SFT rows with provenance. Samples with no
code (a model that wrote none, or modules the compiler teacher refuses) are not judged; they are
counted by reason. `--teacher compiler` asks once per task whatever -k says.
"""
from __future__ import annotations

import argparse
import json


def register(sub) -> None:
    from kernelzero.commands.eval_cmd import add_eval_options

    p = sub.add_parser("distill", help="sample a teacher, keep verified-correct kernels as SFT data",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--teacher", required=True, help="teacher model spec: hf:PATH, vllm:PATH, "
                   "openai:URL#MODEL, replay:PATH, or compiler (the teacher compiler for family "
                   "modules; deterministic, so one sample per task)")
    p.add_argument("--tasks", required=True, help="task directory, or a task pool (e.g. a training run's pool.db)")
    p.add_argument("-k", type=int, default=8, help="samples per task (default 8)")
    p.add_argument("--out", required=True, help="output JSONL (verdicts cached beside it)")
    p.add_argument("--fastest", action="store_true", help="keep only the fastest correct sample per task")
    p.add_argument("--kernel-lang", choices=["triton", "cuda"], default="triton",
                   help="kernel language asked of the teacher")
    p.add_argument("--temperature", type=float, default=0.7)
    p.add_argument("--max-new-tokens", type=int, default=4096)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--time-limit", type=float, default=None, metavar="S",
                   help="stop judging after about S seconds; what was judged is written (a re-run resumes)")
    p.add_argument("--json", action="store_true", help="print the counts as one JSON document")
    add_eval_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from kernelzero.cli import UsageError
    from kernelzero.commands.eval_cmd import eval_config_from_args, pool_from_args
    from kernelzero.train.distill import DistillConfig, distill, load_task_source

    try:
        cfg = DistillConfig(teacher=args.teacher, k=args.k, fastest_only=args.fastest,
                            backend=args.kernel_lang, temperature=args.temperature,
                            max_new_tokens=args.max_new_tokens, seed=args.seed,
                            time_limit_s=args.time_limit)
        tasks = load_task_source(args.tasks)
    except (ValueError, FileNotFoundError) as e:
        raise UsageError(str(e)) from None
    if not tasks:
        raise UsageError(f"no tasks found in {args.tasks}")
    with pool_from_args(args, eval_config_from_args(args)) as pool:  # --pool local|ray
        counts = distill(cfg, tasks, pool, args.out)
    if args.json:
        print(json.dumps(counts))
    else:
        print(f"{counts['kept']} rows from {counts['tasks_kept']}/{counts['tasks']} tasks "
              f"({counts['correct']} of {counts['samples']} samples correct) -> {counts['out']}")
        if counts["judged"]:
            print("verdicts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts["verdicts"].items())))
        if counts["skipped"]:
            print(f"skipped {counts['skipped']} samples with no code (not judged):")
            for reason, n in list(counts["skipped_reasons"].items())[:10]:
                print(f"  {n:5d}  {reason}")
    return 0
