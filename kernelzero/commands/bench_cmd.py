"""`kernelzero bench`: sample and judge every task of a directory, then report the metrics.

Covers: arguments, the environment key that makes stored verdicts reusable, progress bars, and
rendering. The run folder and resuming are `kernelzero.coder.benchmark_run`; numbers come from
`kernelzero.metrics`, files from `kernelzero.report`, storage from `kernelzero.store`; judging
goes through the pool `--pool local|ray` names (`kernelzero.eval.pools`).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kernelzero.commands.eval_cmd import add_pool_options
from kernelzero.commands.generate_cmd import add_model_args


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "bench", help="sample and judge every task in a directory; pass@k, fast_p, speedups",
        description="Sample k kernels per task from a model, judge them all, and write pass@k, "
                    "fast_p (vs eager, and torch.compile with --compile-baseline) and the "
                    "geometric-mean speedup with bootstrap CIs as markdown, JSON and PNG into "
                    "runs/NAME/. Resumable: run the same command again after an interruption; "
                    "sampled completions and stored verdicts are reused.")
    p.add_argument("--tasks", required=True,
                   help="task directory (KernelBench layout level{L}/{id}_{Name}.py, or flat)")
    p.add_argument("--levels", default=None, help="comma-separated levels to keep, e.g. 1,2")
    add_model_args(p)
    p.add_argument("-k", type=int, default=10, help="samples per task (default: %(default)s)")
    p.add_argument("--run", default=None,
                   help="run name; its files go to RUNS_DIR/NAME (default: from the model and "
                        "kernel language)")
    p.add_argument("--runs-dir", default="runs", help="default: %(default)s")
    p.add_argument("--compile-baseline", action="store_true",
                   help="also time torch.compile(Model) and report fast_p against it (GPU)")
    p.add_argument("--db", default="kernelzero.db",
                   help="results database (default: %(default)s, as `kernelzero report` reads)")
    p.add_argument("--batch-size", type=int, default=8,
                   help="prompts per generate call (default: %(default)s)")
    p.add_argument("--boot", type=int, default=1000, metavar="N",
                   help="bootstrap resamples for the CIs; 0 = none (default: %(default)s)")
    add_pool_options(p)
    p.set_defaults(func=run)


def _levels(text: str | None) -> list[int] | None:
    from kernelzero.cli import UsageError

    if not text:
        return None
    try:
        levels = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise UsageError(f"--levels {text!r}: expected integers separated by commas, "
                         "e.g. 1,2") from None
    if not levels:
        raise UsageError("--levels names no level")
    return levels


def judging_env_key(evaluator) -> str:
    """What must match for a stored verdict to count here: the evaluator's environment key (with
    the GPU's name resolved up front) and whether torch.compile was a baseline. `evaluator` is a
    local Evaluator, whichever pool judges: verdicts stay reusable across pools."""
    from kernelzero.eval.environment import env_key

    env = evaluator.env()
    if evaluator.config.device == "cuda" and not env.get("gpu"):
        import torch
        env["gpu"] = torch.cuda.get_device_name()
    key = env_key(env)
    return key + ("+compile" if evaluator.config.compile_baseline else "")


def run(args: argparse.Namespace) -> int:
    """`kernelzero bench`: arguments checked, samples made and judged, the report written, in the
    order the user sees them. One function on purpose: each step is a few lines, used once."""
    from kernelzero.cli import UsageError
    from kernelzero.coder.benchmark_run import BenchRun, records, safe_name
    from kernelzero.commands.eval_cmd import check_pool_args
    from kernelzero.commands.generate_cmd import build_common
    from kernelzero.metrics import summarize
    from kernelzero.models import BackendError
    from kernelzero.report import render_table, write_report
    from kernelzero.store import Store, StoreError
    from kernelzero.tasks import load_tasks

    if args.k < 1 or args.batch_size < 1 or args.boot < 0:
        raise UsageError("-k and --batch-size must be at least 1, --boot at least 0")
    check_pool_args(args)
    try:
        tasks = load_tasks(args.tasks, _levels(args.levels))
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    if not tasks:
        raise UsageError(f"no tasks under {args.tasks}"
                         + (f" at levels {args.levels}" if args.levels else ""))
    keys = [t.key for t in tasks]
    if len(set(keys)) != len(keys):
        raise UsageError(f"{args.tasks} holds several tasks with the same key; give each file a "
                         "distinct name")
    backend, eval_cfg, prompt_cfg, sampling = build_common(args)
    name = args.run or safe_name(f"{Path(args.model.partition(':')[2]).name}_{args.backend}")
    bench = BenchRun(Path(args.runs_dir) / safe_name(name), name, tasks, args.k)
    try:
        bench.claim(backend.spec, args.backend, args.style)
    except ValueError as e:
        raise UsageError(str(e)) from None
    try:
        store = Store(args.db)
    except StoreError as e:
        raise UsageError(str(e)) from None
    with store:
        try:
            short, judged = _sample_and_judge(args, bench, backend, store, eval_cfg, prompt_cfg,
                                              sampling)
        except BackendError as e:
            print(f"kernelzero bench: the model backend failed: {e} (what was sampled and judged "
                  "so far is saved; run the same command again to resume)", file=sys.stderr)
            return 1
    recs, invalid = records(judged)
    if invalid:
        _log(args, f"warning: {len(invalid)} task(s) left out: their reference module "
                   f"failed (invalid_task): {', '.join(invalid)}")
    absent = [t.key for t in tasks if short.get(t.key) == 0]
    if not recs:
        raise UsageError("nothing to summarize: no task has a judged sample"
                         + (f" ({len(absent)} tasks got no completions)" if absent else ""))
    summary = summarize(recs, n_boot=args.boot, seed=0)
    summary = {"run": name, "model": backend.spec, "language": args.backend,
               "device": eval_cfg.device, "policy": eval_cfg.policy, "k": args.k,
               "tasks_dir": str(args.tasks), "db": str(args.db),
               "tasks_without_samples": absent, "tasks_short": short,
               "tasks_invalid": invalid, **summary}
    files = write_report(summary, bench.dir, title=f"KernelZero bench: {name} ({backend.spec})")
    if args.json:
        print(json.dumps({**summary, "files": {k: str(v) for k, v in files.items()}},
                         allow_nan=False))
    else:
        print(f"run {name!r}: {summary['n_tasks']} tasks, {summary['n_records']} samples, "
              f"{backend.spec} ({args.backend} on {eval_cfg.device})")
        print(render_table(summary), end="")
        print(f"report written to {files['report.md']} ({len(files)} files in {bench.dir})")
    return 0


def _log(args, msg: str) -> None:
    if not args.json:
        print(msg, file=sys.stderr)


def _sample_and_judge(args, bench, backend, store, eval_cfg, prompt_cfg, sampling):
    """Sample what is missing, judge what is not in the store; (short tasks, judged samples)."""
    from tqdm import tqdm

    from kernelzero.commands.eval_cmd import pool_from_args
    from kernelzero.eval import Evaluator

    _log(args, f"bench {bench.name!r}: {len(bench.tasks)} tasks x {args.k} samples from "
               f"{backend.spec} ({args.backend}, {eval_cfg.device}) -> {bench.dir}")
    with tqdm(total=len(bench.requests()), desc="sampling", unit="task", file=sys.stderr,
              disable=args.json or None) as bar:
        written = bench.sample(backend, prompt_cfg, sampling, args.batch_size, bar.update)
    short = bench.short_tasks()
    _log(args, f"sampled {written} new completions")
    if short:
        _log(args, f"warning: {len(short)} task(s) have fewer than {args.k} samples (the "
                   f"backend returned fewer): "
                   + ", ".join(f"{k} ({n})" for k, n in list(short.items())[:10]))
    with pool_from_args(args, eval_cfg, ref_cache=store) as pool:
        # An Evaluator that is never entered starts nothing: it only names the environment.
        env = judging_env_key(pool if args.pool == "local" else Evaluator(eval_cfg))
        total = bench.pending_count(store, eval_cfg.device, env)
        with tqdm(total=total, desc="judging", unit="cand", file=sys.stderr,
                  disable=args.json or None) as bar:
            judged, fresh = bench.judge(pool, store, env, on_verdict=lambda j: bar.update(1))
    _log(args, f"judged {fresh} samples ({len(judged) - fresh} verdicts reused from {args.db})")
    return short, judged
