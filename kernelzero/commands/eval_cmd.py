"""`kernelzero eval`: judge one candidate, or a KernelBench run folder of samples, and store verdicts.

    kernelzero eval REFERENCE.py CANDIDATE.py [--device cpu|cuda] [--json]
    kernelzero eval --tasks TASK_DIR --samples SAMPLE_DIR [--db kernelzero.db] [--run NAME]

Exit code 0 whenever verdicts were produced, whatever they say.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter


def add_eval_options(p: argparse.ArgumentParser) -> None:
    """Options shared by every command that judges (eval, generate, bench)."""
    g = p.add_argument_group("judging")
    g.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where candidates run (default: cuda if a GPU is visible, else cpu)")
    g.add_argument("--backend", choices=["auto", "triton", "cuda"], default="auto",
                   help="kernel language of the candidates (default: detected from the source)")
    g.add_argument("--policy", choices=["strict", "kernelbench", "none"], default="strict",
                   help="strict: compute only in own kernels; kernelbench: torch ops allowed but a "
                        "custom kernel must exist; none: no policy checks")
    g.add_argument("--tolerance", choices=["strict", "paper"], default="strict",
                   help="strict: fp32 atol=rtol=1e-4 (fp16/bf16 1e-2); paper: 1e-2 everywhere")
    g.add_argument("--trials", type=int, default=5, help="correctness trials (fresh inputs each)")
    g.add_argument("--compile-baseline", action="store_true",
                   help="also time torch.compile(Model) and report speedup_compile")
    g.add_argument("--workers", type=int, default=None, help="candidates judged at once")
    g.add_argument("--timeout", type=float, default=None,
                   help="seconds allowed for correctness trials (and again for timing)")
    add_pool_options(g)


def add_pool_options(g) -> None:
    """--pool / --ray-address, for every command that judges a batch (eval, bench, distill)."""
    g.add_argument("--pool", choices=["local", "ray"], default="local",
                   help="judge in this process's workers, or across a Ray cluster (one judge per GPU)")
    g.add_argument("--ray-address", default=None,
                   help="Ray cluster to join (default: start a local one); with --pool ray")


def check_pool_args(args) -> None:
    """Usage errors of --pool / --ray-address found without starting anything (commands that
    sample before they judge call this first, so a typo does not wait for the sampling)."""
    from kernelzero.cli import UsageError

    if args.ray_address and args.pool != "ray":
        raise UsageError("--ray-address needs --pool ray")


def pool_from_args(args, cfg, ref_cache=None):
    """The judging pool --pool / --ray-address name (kernelzero.eval.pools), not yet entered.

    `ref_cache` goes to the local Evaluator (the Ray pool's evaluators live in its actors).
    --ray-address without --pool ray, Ray not installed, or a cluster that cannot be reached
    are usage errors: one line, no traceback.
    """
    from kernelzero.cli import UsageError
    from kernelzero.eval.pools import make_pool

    check_pool_args(args)
    if args.pool == "local":
        from kernelzero.eval import Evaluator
        return Evaluator(cfg, ref_cache=ref_cache)
    try:
        return make_pool(args.pool, cfg, ray_address=args.ray_address)
    except ImportError as e:
        raise UsageError(str(e)) from None
    except (ConnectionError, RuntimeError) as e:  # ray.init found no cluster, or no GPU to claim
        first = (str(e).strip().splitlines() or [type(e).__name__])[0]
        raise UsageError(f"the Ray pool ({args.ray_address or 'a private local cluster'}) could "
                         f"not start: {first}") from None


def eval_config_from_args(args):
    from kernelzero.cli import UsageError
    from kernelzero.commands.checks import resolve_device
    from kernelzero.eval import EvalConfig
    if args.trials < 1:
        raise UsageError(f"--trials must be at least 1 (5 or more recommended), got {args.trials}")
    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    if args.timeout is not None and not args.timeout > 0:
        raise UsageError(f"--timeout must be a positive number of seconds, got {args.timeout}")
    kw = dict(device=resolve_device(args.device), backend=args.backend, policy=args.policy,
              tolerance=args.tolerance, correctness_trials=args.trials,
              compile_baseline=args.compile_baseline)
    if args.workers:
        kw["max_workers"] = args.workers
    if args.timeout:
        kw["run_timeout_s"] = args.timeout
    try:
        return EvalConfig(**kw)
    except ValueError as e:
        raise UsageError(str(e)) from None


def register(sub) -> None:
    p = sub.add_parser("eval", help="judge candidate kernels against reference modules",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("reference", nargs="?", help="reference module file (Model, get_inputs, ...)")
    p.add_argument("candidate", nargs="?", help="candidate file (ModelNew)")
    p.add_argument("--tasks", help="task directory (level{L}/{id}_{Name}.py or flat)")
    p.add_argument("--samples", help="samples directory (level_{L}_problem_{id}_sample_{s}_kernel.py)")
    p.add_argument("--db", default="kernelzero.db", help="results store (SQLite file)")
    p.add_argument("--run", default="default", help="run name in the store")
    p.add_argument("--json", action="store_true", help="print JSON instead of text")
    add_eval_options(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from kernelzero.cli import UsageError
    if args.tasks or args.samples:
        if not (args.tasks and args.samples):
            raise UsageError("batch mode needs both --tasks and --samples")
        return _batch(args)
    if not (args.reference and args.candidate):
        raise UsageError("give REFERENCE.py CANDIDATE.py, or --tasks DIR --samples DIR")
    return _single(args)


def _single(args) -> int:
    from kernelzero.cli import UsageError
    from kernelzero.commands.checks import require_file
    from kernelzero.eval import Evaluator
    from kernelzero.tasks import Candidate, Task
    from kernelzero.tasks.task import static_check_candidate, static_check_task
    task = Task.from_file(require_file(args.reference, "reference"))
    cand = Candidate.from_file(require_file(args.candidate, "candidate"), backend=args.backend)
    if (static_check_task(task.source) and not static_check_candidate(task.source)
            and static_check_candidate(cand.source) and not static_check_task(cand.source)):
        raise UsageError(f"the arguments look swapped: {args.reference} defines ModelNew and "
                         f"{args.candidate} defines Model; the order is REFERENCE CANDIDATE")
    cfg = eval_config_from_args(args)
    with Evaluator(cfg) as ev:
        v = ev.judge(task, cand)
    if args.json:
        print(v.to_json())
    else:
        print(format_verdict(v))
    return 0


def format_verdict(v) -> str:
    lines = [f"{v.status.upper()}: {v.reason}"]
    trials = _trials_text(v)
    lines.append(f"  backend {v.backend} · device {v.device} · policy {v.policy}"
                 + (f" · {trials}" if trials else ""))
    if v.max_abs_err is not None:
        lines.append(f"  max abs err {v.max_abs_err:.3g} · max rel err {v.max_rel_err:.3g}")
    if v.runtime_ms:
        ref = v.ref_runtime_ms
        lines.append(f"  runtime {v.runtime_ms.median_ms:.4g} ms (IQR {v.runtime_ms.iqr_ms:.2g}, "
                     f"n={v.runtime_ms.n})" + (f" · eager {ref.median_ms:.4g} ms" if ref else "") +
                     (f" · speedup {v.speedup:.2f}x" if v.speedup else "") +
                     (f" · vs compile {v.speedup_compile:.2f}x" if v.speedup_compile else ""))
    elif v.status == "correct":
        lines.append("  not timed (timing needs a GPU)")
    if v.flags:
        lines.append("  flags: " + ", ".join(v.flags))
    return "\n".join(lines)


def _trials_text(v) -> str | None:
    """What the correctness trials showed. The judge stops reading at the first failing trial,
    so `trials_passed` of a failed verdict counts the trials before it, not all that passed."""
    if not v.trials_run:
        return None  # failed before any trial was checked (or, timed, after all passed)
    if v.trials_passed < v.trials_run and v.status != "correct":
        return f"trial {v.trials_passed + 1} of {v.trials_run} failed"
    return f"{v.trials_passed}/{v.trials_run} trials passed"


def _pairs(tasks_dir: str, samples_dir: str, backend: str):
    from kernelzero.cli import UsageError
    from kernelzero.commands.checks import require_dir
    from kernelzero.tasks import Candidate, find_samples, load_tasks
    try:
        tasks = load_tasks(tasks_dir)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    if not tasks:
        raise UsageError(f"no task files (*.py) under {tasks_dir}")
    by_id = {(t.level, t.problem_id): t for t in tasks}
    by_pid = {}
    for t in tasks:
        by_pid.setdefault(t.problem_id, []).append(t)
    require_dir(samples_dir, "samples directory")
    pairs, orphans = [], []
    for level, pid, sample, path in find_samples(samples_dir):
        task = by_id.get((level, pid))
        if task is None and len(by_pid.get(pid, [])) == 1 and by_pid[pid][0].level is None:
            task = by_pid[pid][0]
        if task is None:
            orphans.append(path.name)
            continue
        pairs.append((task, Candidate.from_file(path, backend=backend)))
    if not pairs:
        raise UsageError(
            f"none of the {len(orphans)} samples under {samples_dir} matches a task in {tasks_dir}"
            f" (e.g. {orphans[0]})" if orphans else
            f"no sample files under {samples_dir}; KernelBench names them "
            "level_L_problem_ID_sample_S_kernel.py")
    return pairs, orphans


def _batch(args) -> int:
    from tqdm import tqdm

    from kernelzero.eval import Evaluator
    from kernelzero.store import Store, verdict_key
    pairs, orphans = _pairs(args.tasks, args.samples, args.backend)
    if orphans:
        print(f"{len(orphans)} sample(s) match no task, skipped (e.g. {orphans[0]})", file=sys.stderr)
    cfg = eval_config_from_args(args)
    store = Store(args.db)
    counts: Counter = Counter()
    pool = pool_from_args(args, cfg, ref_cache=store)
    # The same key whichever pool judges (an Evaluator that is never entered starts nothing).
    env_key = (pool if args.pool == "local" else Evaluator(cfg)).env_key()
    with pool as ev:
        # One row per sample (identical code in two samples still counts twice for pass@k).
        keyed = [(verdict_key(t.hash, c.hash, cfg.device, env_key) + f"/s{c.sample_id}", t, c)
                 for t, c in pairs]
        todo = [(k, t, c) for k, t, c in keyed if store.get(k, run=args.run) is None]
        done_before = len(keyed) - len(todo)
        bar = tqdm(total=len(keyed), initial=done_before, desc="judging", unit="cand",
                   disable=args.json, file=sys.stderr)

        def on_verdict(i, v):
            key, task, cand = todo[i]
            store.put(key, v, run=args.run, task_key=task.key, sample_id=cand.sample_id,
                      level=task.level, problem_id=task.problem_id)
            counts[v.status] += 1
            bar.update(1)
            n = sum(counts.values())
            bar.set_postfix(pass_rate=f"{counts['correct'] / n:.0%}", task=task.key)

        try:
            ev.judge_many([(t, c) for _, t, c in todo], on_verdict=on_verdict)
        finally:
            bar.close()
    summary = {"run": args.run, "db": args.db, "total": len(keyed), "judged_now": len(todo),
               "already_judged": done_before, "statuses": dict(counts)}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"judged {len(todo)} candidate(s) ({done_before} already in {args.db}); "
              + ", ".join(f"{k} {n}" for k, n in counts.most_common()))
        print(f"metrics: kernelzero report --db {args.db} --run {args.run}")
    return 0
