"""`kernelzero propose --n N --out DIR`: write N reference modules and a manifest.

Default: each module is composed from an API set sampled from the co-occurrence distribution (or
written by a model with --model), then validated: static checks, the degenerate-task audit in the
evaluator's sandbox, memory cap, and on a GPU the measured runtime band (see
kernelzero/propose/validate.py). The run ends with what became of every candidate: kept,
rejected by validation (with the reasons), filtered before validation (duplicates, API sets the
composer cannot build) or validated beyond the N needed (discarded, so the output depends only on
the seed).

--family: modules of the op family the teacher compiles (kernelzero.family: elementwise chains,
row reductions and norms, matmul + epilogue, in many phrasings), written directly with no model
and no validation run; duplicates (same text) are skipped and counted. --kinds, --min-ops and
--max-ops choose what is drawn; --target cpu or gpu sizes them.

Files are KernelBench-named (`{id}_{Name}.py`) with one `manifest.jsonl` line each (API set or
family metadata, hashes, cost estimate, validation figures). The same seed gives the same modules.
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
    p.add_argument("--target", choices=["cpu", "gpu", "h100", "h200"], default="cpu",
                   help="machine the modules are sized for (cpu: small, interpreter-friendly; "
                   "gpu: an H200)")
    p.add_argument("--family", action="store_true",
                   help="write modules of the teacher's op family (no model, no validation run)")
    p.add_argument("--kinds", default="elementwise,rowwise,matmul",
                   help="with --family: kinds to draw from (comma-separated)")
    p.add_argument("--min-ops", type=int, default=1, help="with --family: fewest ops per module")
    p.add_argument("--max-ops", type=int, default=3, help="with --family: most ops per module")
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
    """`kernelzero propose`: arguments checked, modules composed and validated, tasks written, in
    the order the user sees them. One function on purpose: each step is a few lines, used once."""
    from pathlib import Path

    from kernelzero.cli import UsageError
    if args.n < 1 or args.apis < 1 or args.workers < 1 or (args.bundle is not None and args.bundle < 1):
        raise UsageError("--n, --apis, --workers and --bundle must be >= 1")
    out = Path(args.out)
    if out.exists() and any(out.glob("*.py")):
        raise UsageError(f"{out} already holds modules; choose an empty or new directory")
    if args.family:
        return run_family(args, out)
    if args.target == "gpu":
        args.target = "h200"
    try:
        from tqdm import tqdm
    except ImportError:  # a bare GPU machine may lack it: no bar, same results
        tqdm = _NoBar
    from kernelzero.catalog.cooccurrence import Distribution, load_default
    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.propose.pipeline import ProposeConfig, composer_candidates, llm_candidates, propose_modules
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
               "seed": args.seed, "outcomes": outcomes(report)}
    if args.json:
        print(json.dumps(summary))
    else:
        rate = summary["validation_pass_rate"]
        print(f"wrote {len(report.accepted)}/{args.n} modules to {out} in {report.wall_s:.1f} s "
              f"({summary['valid_per_min']} valid/min); {report.validated} validated, pass rate "
              f"{'-' if rate is None else f'{100 * rate:.1f}%'}; {report.candidates} candidates")
        print(outcome_line(summary["outcomes"], args.n))
        for title, counts in (("filtered before validation", report.filtered),
                              ("validation rejections by reason (a module can have several)",
                               report.rejections)):
            if counts:
                print(f"{title}: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    if len(report.accepted) < args.n:
        print(f"only {len(report.accepted)} of {args.n} modules passed within "
              f"{cfg.budget} candidates", file=sys.stderr)
        return 1
    return 0


def outcomes(report) -> dict:
    """What became of every candidate; the counts add up to `report.candidates`."""
    kept = len(report.accepted)
    rejected = report.validated - kept
    filtered = sum(report.filtered.values())
    return {"candidates": report.candidates, "kept": kept, "rejected_by_validation": rejected,
            "filtered_before_validation": filtered,
            "validated_beyond_need": report.candidates - kept - rejected - filtered}


def outcome_line(o: dict, n: int) -> str:
    parts = [f"{o['kept']} kept", f"{o['rejected_by_validation']} rejected by validation",
             f"{o['filtered_before_validation']} filtered before validation"]
    if o["validated_beyond_need"]:
        parts.append(f"{o['validated_beyond_need']} validated beyond the {n} needed (discarded, so "
                     "the output depends only on the seed)")
    return f"of {o['candidates']} candidates: " + ", ".join(parts)


def run_family(args, out) -> int:
    """`--family`: family modules written directly (no model, no validation run)."""
    import time

    from kernelzero.cli import UsageError
    from kernelzero.family import FamilyConfig, make_module
    from kernelzero.tasks.task import source_hash

    try:
        cfg = FamilyConfig(kinds=tuple(k.strip() for k in args.kinds.split(",") if k.strip()),
                           min_ops=args.min_ops, max_ops=args.max_ops,
                           target="cpu" if args.target == "cpu" else "gpu")
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.model:
        raise UsageError("--family writes modules without a model; drop --model")
    t0 = time.perf_counter()
    out.mkdir(parents=True, exist_ok=True)
    seen: set[str] = set()
    written = duplicates = index = 0
    budget = args.max_candidates or 5 * args.n + 20
    with open(out / "manifest.jsonl", "a") as mf:
        while written < args.n and index < budget:
            m = make_module(cfg, args.seed, index)
            index += 1
            h = source_hash(m.source)
            if h in seen:
                duplicates += 1
                continue
            seen.add(h)
            written += 1
            fname = f"{written}_{m.name}.py"
            (out / fname).write_text(m.source)
            mf.write(json.dumps({"file": fname, "problem_id": written, "name": m.name, "origin": "family",
                                 "task_hash": h, "seed": args.seed, "family": m.meta}) + "\n")
    summary = {"accepted": written, "candidates": index, "outcomes": {
        "candidates": index, "kept": written, "duplicates": duplicates}, "kinds": list(cfg.kinds),
        "min_ops": cfg.min_ops, "max_ops": cfg.max_ops, "out": str(out), "target": cfg.target,
        "seed": args.seed, "wall_s": round(time.perf_counter() - t0, 2)}
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"wrote {written}/{args.n} family modules ({', '.join(cfg.kinds)}; {cfg.min_ops}-"
              f"{cfg.max_ops} ops; {cfg.target} sizes) to {out} in {summary['wall_s']} s; of {index} "
              f"composed: {written} kept, {duplicates} duplicates of an earlier module skipped")
    if written < args.n:
        print(f"only {written} distinct modules within {budget} candidates", file=sys.stderr)
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
