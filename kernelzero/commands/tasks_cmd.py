"""`kernelzero tasks check|audit PATH`: load and validate reference modules, one line per task.

check: the file parses, has Model / get_inputs / get_init_inputs, and runs in a sandbox (twice,
       with two seeds) to finite outputs.
audit: flags tasks that cannot measure a kernel (degenerate outputs); see kernelzero/eval/audit.py.
"""
from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    p = sub.add_parser("tasks", help="check or audit reference modules",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    tsub = p.add_subparsers(dest="tasks_command", metavar="ACTION")
    for name, helptext in (("check", "load and run each reference module"),
                           ("audit", "flag degenerate tasks (constant, input-independent, ...)")):
        q = tsub.add_parser(name, help=helptext)
        q.add_argument("path", help="a task file or a directory of tasks")
        q.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
        q.add_argument("--tolerance", choices=["strict", "paper"], default="strict")
        q.add_argument("--workers", type=int, default=2)
        q.add_argument("--json", action="store_true", help="one JSON object per task")
        q.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def run(args) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from kernelzero.cli import UsageError
    from kernelzero.commands.checks import resolve_device
    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.tasks import load_tasks
    if args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    try:
        tasks = load_tasks(args.path)
    except FileNotFoundError as e:
        raise UsageError(str(e)) from None
    if not tasks:
        raise UsageError(f"no task files (*.py) under {args.path}")
    cfg = EvalConfig(device=resolve_device(args.device), tolerance=args.tolerance,
                     max_workers=args.workers)
    check = _audit_one if args.tasks_command == "audit" else _check_one
    bad = 0
    with Evaluator(cfg) as ev, ThreadPoolExecutor(args.workers) as pool:
        for task, (ok, detail) in zip(tasks, pool.map(lambda t: check(ev, t), tasks)):
            bad += not ok
            if args.json:
                print(json.dumps({"task": task.key, "path": str(task.path), "hash": task.hash,
                                  "ok": ok, **detail}), flush=True)
            else:
                mark = "OK  " if ok else "FAIL"
                print(f"{mark} {task.key:40s} {detail.get('summary', '')}", flush=True)
    if not args.json:
        print(f"{len(tasks) - bad}/{len(tasks)} tasks passed {args.tasks_command}", file=sys.stderr)
    return 0


def _describe(outputs) -> str:
    parts = []
    for o in outputs:
        if hasattr(o, "shape"):
            parts.append(f"{tuple(o.shape)} {str(o.dtype).removeprefix('torch.')}")
        else:
            parts.append(type(o).__name__)
    return ", ".join(parts)


def _check_one(ev, task) -> tuple[bool, dict]:
    import torch
    probe = ev.probe_reference(task, seeds=[1, 2])
    if not probe.ok:
        return False, {"reasons": [probe.reason], "summary": probe.reason}
    for outs in probe.outputs:
        for o in outs:
            if isinstance(o, torch.Tensor) and o.is_floating_point() and not torch.isfinite(o).all():
                return False, {"reasons": ["non-finite outputs"], "summary": "non-finite outputs"}
    return True, {"reasons": [], "outputs": _describe(probe.outputs[0]),
                  "summary": "outputs " + _describe(probe.outputs[0])}


def _audit_one(ev, task) -> tuple[bool, dict]:
    from kernelzero.eval.audit import audit_task
    res = audit_task(ev, task)
    return res.ok, {"reasons": list(res.reasons),
                    "summary": "; ".join(res.reasons) if res.reasons else "no degeneracy found"}
