"""`kernelzero export`: a verified kernel as a PyTorch custom op that your model imports.

    kernelzero export KERNEL.py --reference MODULE.py --name NAME [--out DIR] [--db FILE]
                      [--device cpu|cuda] [--judge] [--force] [--no-check] [--json]

Writes DIR/ (default my_kernels/), a package: `from my_kernels import NAME, CLASS` gives the
function NAME(*inputs), the nn.Module CLASS(*init_inputs) and the op torch.ops.my_kernels.NAME,
which work eagerly, under torch.compile and on meta tensors (see kernelzero/export/).

Only a verified kernel is exported: the results store (--db) must hold verdicts of this kernel
against this reference (matched by content hash), the latest on each device `correct`. A kernel
the store has never seen is judged first (strict policy and tolerance, on --device) and its
verdict stored, so the next export finds it; --judge judges it again anyway. --force exports a
kernel that is not verified (the module records that it was forced).
"""
from __future__ import annotations

import argparse
import json
import sys

DEFAULT_OUT = "my_kernels"


def register(sub) -> None:
    p = sub.add_parser("export", help="turn a verified kernel into a PyTorch custom op for your "
                                      "model", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("kernel", help="kernel file (class ModelNew), e.g. what `generate` wrote")
    p.add_argument("--reference", required=True, metavar="MODULE.py",
                   help="the reference module it was verified against (Model, get_inputs, "
                        "get_init_inputs)")
    add_export_args(p, name_flag="--name", required=True)
    p.add_argument("--db", default="kernelzero.db",
                   help="results store holding its verdicts (default: %(default)s)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where to judge it when the store has no verdict (default: cuda when "
                        "available)")
    p.add_argument("--judge", action="store_true",
                   help="judge it now even when the store has verdicts (the new one decides)")
    p.add_argument("--force", action="store_true",
                   help="export even when it is not verified")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    p.set_defaults(func=run)


def add_export_args(p: argparse.ArgumentParser, name_flag: str, required: bool) -> None:
    """The export options `export` and `generate --export` share."""
    p.add_argument(name_flag, dest="export_name", required=required, metavar="NAME",
                   help="the op's name: a Python identifier (the nn.Module is its CamelCase)")
    p.add_argument("--export-dir" if name_flag == "--export" else "--out", dest="export_dir",
                   default=DEFAULT_OUT, metavar="DIR",
                   help="the package folder to write into; its name is the import name "
                        "(default: %(default)s)")
    p.add_argument("--no-check", action="store_true",
                   help="skip importing the written package in a fresh process")


def run(args) -> int:
    from kernelzero.cli import UsageError
    from kernelzero.commands.checks import require_file
    from kernelzero.export import ExportError, check_target, is_verified, stored_verdicts
    from kernelzero.store import StoreError
    from kernelzero.tasks import Candidate, Task
    from kernelzero.tasks.task import static_check_candidate, static_check_task

    cand = Candidate.from_file(require_file(args.kernel, "kernel"))
    task = Task.from_file(require_file(args.reference, "reference"))
    bad = static_check_candidate(cand.source)
    if bad:
        raise UsageError(f"{args.kernel} is not a kernel file: {bad[1]}")
    bad = static_check_task(task.source)
    if bad:
        raise UsageError(f"--reference {args.reference} is not a reference module: {bad}")
    try:
        check_target(args.export_name, args.export_dir)
        verdicts = [] if args.judge else stored_verdicts(args.db, task.hash, cand.hash)
    except (ExportError, StoreError) as e:
        raise UsageError(str(e)) from None
    if not verdicts:
        verdicts = [_judge_and_store(args, task, cand)]
    if not is_verified(verdicts) and not args.force:
        from kernelzero.export import summary
        raise UsageError(f"{args.kernel} is not verified against {args.reference}: "
                         f"{summary(verdicts)}; fix it (or judge it again: --judge), or pass "
                         "--force to export it anyway")
    result = export_kernel(cand, task, verdicts, args)
    if args.json:
        print(json.dumps(result))
    return 0


def _judge_and_store(args, task, cand):
    """Judge the kernel now (default EvalConfig: strict policy and tolerance) and store it."""
    from kernelzero.commands.checks import resolve_device
    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.store import Store, verdict_key

    cfg = EvalConfig(device=resolve_device(args.device))
    if not args.json:
        print(f"judging {args.kernel} against {args.reference} on {cfg.device} "
              f"(no verdict in {args.db} yet)", file=sys.stderr)
    with Evaluator(cfg) as ev:
        v = ev.judge(task, cand)
        key = verdict_key(task.hash, cand.hash, cfg.device, ev.env_key())
    with Store(args.db) as store:
        store.put(key, v, run="export", task_key=task.key, replace=True)
    return v


def export_kernel(cand, task, verdicts, args) -> dict:
    """Write the package and check it; print what a person needs (unless --json); return the
    JSON-able result. Shared with `generate --export` (args: export_name, export_dir,
    no_check, json)."""
    from kernelzero.cli import UsageError
    from kernelzero.export import (ExportError, check_package, is_verified, provenance,
                                   summary, write_package)
    from kernelzero import __version__

    verified = is_verified(verdicts)
    record = {"kernel": str(cand.path or cand.name), "candidate_hash": cand.hash,
              "reference": str(task.path or task.name), "task_hash": task.hash,
              "verified": verified, "forced": not verified, "verdicts": provenance(verdicts),
              "exported_by": f"kernelzero {__version__}"}
    try:
        exported = write_package(cand.source, task.source, args.export_name, args.export_dir,
                                 cand.resolved_backend(), record)
    except ExportError as e:
        raise UsageError(str(e)) from None
    if not args.no_check:
        if not args.json:
            print(f"checking {exported.dir.name}/ imports (a CUDA kernel compiles now)",
                  file=sys.stderr)
        exported.check = check_package(exported)
    result = {**exported.to_dict(), "verified": verified, "verdict": summary(verdicts)}
    if not args.json:
        _render(exported, verified, summary(verdicts))
    return result


def _render(e, verified: bool, verdict: str) -> None:
    what = "exported" if verified else "exported UNVERIFIED (--force)"
    print(f"{what} {e.name} ({verdict}) -> {e.dir}/_{e.name}.py"
          + (" (replaced the earlier export)" if e.replaced else ""))
    print(f"  from {e.package} import {e.name}, {e.cls}   # with {e.dir.parent} on sys.path")
    print(f"  {e.name}(*inputs) · {e.cls}(*init_inputs) · torch.ops.{e.package}.{e.name}")
    c = e.check
    if not c:
        return
    if c.get("ok"):
        print(f"  checked in a fresh process: imports; meta outputs {c['outputs']} match the "
              "reference (torch.compile and shape propagation work)")
    else:
        print(f"warning: the check of {e.package}/ failed at {c.get('stage', 'start')}: "
              f"{c.get('error')}", file=sys.stderr)
