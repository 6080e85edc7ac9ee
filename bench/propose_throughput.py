"""Proposer throughput: validated modules per minute, validation pass rate, rejection reasons.

Runs the same loop as `kernelzero propose` (composer -> validation check in the evaluator's
sandbox) for --n modules per API-set size, once per --workers value, each with a fresh evaluator.
Also times the composer alone (no sandbox) to show where the time goes. Reports, per run:
valid_per_min (accepted modules / wall minutes), validation_pass_rate (accepted / modules sent to
validation), what was filtered before validation (uncomposable sets, duplicates), rejection
codes, the machine (cores, load average at start and end: other processes share the CPU).

    python bench/propose_throughput.py --n 40 --apis 2 3 --workers 2 3 --out runs/bench/propose_cpu.json
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import random
import sys
import time
from pathlib import Path


def compose_rate(target: str, apis: int, n: int, seed: int) -> dict:
    from kernelzero.catalog.cooccurrence import load_default
    from kernelzero.propose.composer import ComposeConfig, Composer
    from kernelzero.propose.emit import ComposeError
    dist, comp, rng = load_default(), Composer(ComposeConfig(target=target)), random.Random(seed)
    ok = fail = 0
    t0 = time.perf_counter()
    while ok < n:
        try:
            comp.compose(dist.sample(rng, apis), rng)
            ok += 1
        except ComposeError:
            fail += 1
    dt = time.perf_counter() - t0
    return {"composed": ok, "compose_failed": fail, "composed_per_s": round(ok / dt, 1)}


def run_once(n: int, apis: int, workers: int, seed: int, target: str) -> dict:
    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.propose.pipeline import ProposeConfig, propose_modules
    cfg = ProposeConfig(n=n, apis=apis, seed=seed, target=target, workers=workers)
    load0 = os.getloadavg()
    with Evaluator(EvalConfig(device="cpu", max_workers=workers)) as ev:
        rep = propose_modules(cfg, ev)
    return {"apis": apis, "workers": workers, "n": n, "seed": seed, **rep.summary(),
            "loadavg_start": [round(x, 2) for x in load0],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()]}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=40, help="validated modules per run")
    ap.add_argument("--apis", type=int, nargs="+", default=[2, 3], help="API-set sizes to run")
    ap.add_argument("--workers", type=int, nargs="+", default=[2], help="sandbox runs in flight")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--target", default="cpu")
    ap.add_argument("--out", help="write the results as JSON here")
    args = ap.parse_args(argv)
    result = {"machine": {"cpus": os.cpu_count(), "platform": platform.platform(),
                          "python": platform.python_version()},
              "compose_only": {k: compose_rate(args.target, k, 200, args.seed) for k in args.apis},
              "runs": []}
    for k in args.apis:
        for w in args.workers:
            r = run_once(args.n, k, w, args.seed, args.target)
            result["runs"].append(r)
            print(json.dumps(r), flush=True)
    print("| API-set size | workers | valid/min | validation pass rate | filtered before validation | rejections | load avg (start/end) |")
    print("|---|---|---|---|---|---|---|")
    for r in result["runs"]:
        print(f"| {r['apis']} | {r['workers']} | {r['valid_per_min']} | "
              f"{r['accepted']}/{r['validated']} = {100 * (r['validation_pass_rate'] or 0):.1f}% | "
              f"{r['filtered'] or '-'} | {r['rejections'] or '-'} | "
              f"{r['loadavg_start'][0]} / {r['loadavg_end'][0]} |")
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
