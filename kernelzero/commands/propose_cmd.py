"""`kernelzero propose --n N --out DIR`: write N validated reference modules and a manifest.

Each module is composed from an API set sampled from the co-occurrence distribution (or written
by a model with --model), then validated: static checks, the degenerate-task audit in the
evaluator's sandbox, memory cap, and on a GPU the measured runtime band (see
kernelzero/propose/validate.py). Files are KernelBench-named (`{id}_{Name}.py`) with one
`manifest.jsonl` line each: API set, hashes, cost estimate, validation figures. The same seed
gives the same modules. A summary of why candidates were rejected ends the run.
"""
from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    p = sub.add_parser("propose", help="compose and validate new reference modules",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--n", type=int, required=True, help="validated modules to write")
    p.add_argument("--out", required=True, help="output directory")
    p.add_argument("--apis", type=int, default=2, help="operators per API set (2 or 3; more on request)")
    p.add_argument("--seed", type=int, default=0, help="fixes every sampled choice")
    p.add_argument("--target", choices=["cpu", "h100", "h200"], default="cpu",
                   help="machine the modules are sized for (cpu: small, interpreter-friendly)")
    p.add_argument("--device", choices=["cpu", "cuda"], default=None,
                   help="where the sandbox runs them (default: cuda for GPU targets, else cpu)")
    p.add_argument("--model", help="model spec for the LLM proposer (hf:PATH, vllm:PATH, "
                   "openai:URL#MODEL, replay:PATH); default: the programmatic composer")
    p.add_argument("--dist", help="co-occurrence distribution JSON (default: the shipped one)")
    p.add_argument("--workers", type=int, default=2, help="sandbox runs in flight")
    p.add_argument("--bundle", type=int, default=None,
                   help="modules validated per sandbox start (default: 8 on cpu, 1 on GPUs)")
    p.add_argument("--max-candidates", type=int, default=None,
                   help="give up after this many candidates (default 5 N + 20)")
    p.add_argument("--json", action="store_true", help="print the summary as one JSON document")
    p.set_defaults(func=run)


def run(args) -> int:
    from pathlib import Path

    from kernelzero.cli import UsageError
    if args.n < 1 or args.apis < 1 or args.workers < 1 or (args.bundle is not None and args.bundle < 1):
        raise UsageError("--n, --apis, --workers and --bundle must be >= 1")
    out = Path(args.out)
    if out.exists() and any(out.glob("*.py")):
        raise UsageError(f"{out} already holds modules; choose an empty or new directory")
    try:
        from tqdm import tqdm
    except ImportError:  # a bare GPU machine may lack it: no bar, same results
        tqdm = _NoBar
    from kernelzero.catalog.cooccurrence import Distribution, load_default
    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.propose.loop import ProposeConfig, composer_candidates, llm_candidates, propose_modules
    try:
        dist = Distribution.load(args.dist) if args.dist else load_default()
    except (OSError, ValueError, KeyError) as e:
        raise UsageError(f"cannot read distribution {args.dist}: {e}") from None
    cfg = ProposeConfig(n=args.n, apis=args.apis, seed=args.seed, target=args.target,
                        workers=args.workers, bundle=args.bundle,
                        max_candidates=args.max_candidates)
    if args.model:
        from kernelzero.models import load_backend
        from kernelzero.propose.llm import LLMProposer, LLMProposerConfig
        try:
            backend = load_backend(args.model)
        except ValueError as e:
            raise UsageError(str(e)) from None
        candidates = llm_candidates(cfg, dist, LLMProposer(backend, LLMProposerConfig(target=args.target)))
    else:
        candidates = composer_candidates(cfg, dist)
    device = args.device or ("cpu" if args.target == "cpu" else "cuda")
    bar = tqdm(total=args.n, desc="validated", unit="module", file=sys.stderr, disable=args.json)
    out.mkdir(parents=True, exist_ok=True)
    written = 0

    def save_new(rep) -> None:
        """Write modules as they are accepted, so an interrupted run keeps every finished one."""
        nonlocal written
        with open(out / "manifest.jsonl", "a") as mf:
            for i, a in enumerate(rep.accepted[written:], written + 1):
                fname = f"{i}_{a.name}.py"
                (out / fname).write_text(a.source)
                mf.write(json.dumps({"file": fname, "problem_id": i, "name": a.name, "apis": a.apis,
                                     "origin": a.origin, "task_hash": a.task_hash,
                                     "canonical_hash": a.canonical_hash, "seed": args.seed,
                                     "cost": a.meta, "validation": a.figures}) + "\n")
        written = len(rep.accepted)

    latest = None

    def progress(rep):
        nonlocal latest
        latest = rep
        save_new(rep)
        bar.n = len(rep.accepted)
        bar.set_postfix(tried=rep.candidates, rejected=sum(rep.rejections.values()))
        bar.refresh()

    try:
        with Evaluator(EvalConfig(device=device, max_workers=args.workers)) as ev:
            report = propose_modules(cfg, ev, candidates, dist, on_progress=progress)
    except KeyboardInterrupt:
        if latest is not None:  # what was rejected so far, for whoever stopped a slow run
            print(f"\ninterrupted after {len(latest.accepted)} modules; so far: "
                  + json.dumps(latest.summary()), file=sys.stderr)
        raise
    save_new(report)
    bar.close()
    summary = {**report.summary(), "out": str(out), "target": args.target, "device": device,
               "seed": args.seed}
    if args.json:
        print(json.dumps(summary))
    else:
        rate = summary["validation_pass_rate"]
        print(f"wrote {len(report.accepted)}/{args.n} modules to {out} in {report.wall_s:.1f} s "
              f"({summary['valid_per_min']} valid/min); {report.validated} validated, pass rate "
              f"{'-' if rate is None else f'{100 * rate:.1f}%'}; {report.candidates} candidates")
        for title, counts in (("filtered before validation", report.filtered),
                              ("rejected by validation", report.rejections)):
            if counts:
                print(f"{title}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    if len(report.accepted) < args.n:
        print(f"only {len(report.accepted)} of {args.n} modules passed within "
              f"{cfg.budget} candidates", file=sys.stderr)
        return 1
    return 0


class _NoBar:
    """Without tqdm: one plain progress line per update, on stderr."""

    def __init__(self, *a, total=None, disable=False, **k):
        self.n, self.total, self.disable, self._post = 0, total, disable, {}

    def set_postfix(self, **k):
        self._post = k

    def refresh(self):
        if not self.disable:
            extra = ", ".join(f"{k} {v}" for k, v in self._post.items())
            print(f"validated {self.n}/{self.total} ({extra})", file=sys.stderr, flush=True)

    def close(self):
        pass
