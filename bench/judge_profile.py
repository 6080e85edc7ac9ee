"""Where judging small modules on a GPU spends its time: held-out-style batches, phase by phase.

A held-out evaluation or an RL step on cuda judges many small family modules, each its own task
(one reference and one candidate worker each). This bench judges N teacher kernels of family
modules at GPU sizes (all correct, so every one runs every phase) in one `judge_many`, the way
`kernelzero train` does, and reports for each arm:

- the rate (judged a second), the statuses;
- the device memory: free before the evaluator, free once its spares are started, the memory
  budget the judge planned into and what one spare holds (measured);
- where a judgement's time went (median and total seconds of each `Verdict.phases_s` entry:
  waiting for a worker, loading, the reference, memory admission, the GPU lock, trials, timing);
- the GPU lock's timeline (bench/eval_throughput.py `lock_timeline`: held for timing, shared
  only, idle).

Arms (`--arms`, each with its own evaluator and its own modules, so nothing is cached between
them): `train` (the trainer's evaluator: EvalConfig of --preset, its spare pool included),
`train-fork` (the same, workers forked from a fork server instead of spawned),
`train-double-count` (the judge before 7 Dec: the spare pool as the trainer asks for it, with no
cap, and the budget counting the started spares' memory twice), `untimed` (the `train` arm without timing). Stopped by SIGTERM (`timeout`), an
arm keeps what it judged and the file is written.

    python bench/judge_profile.py --n 30 --arms train,train-fork --out judge_profile.json
"""
from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))


def teacher_pairs(n: int, seed: int, max_ops: int):
    """N (task, teacher kernel) pairs of family modules at GPU sizes, every kind, 1..max_ops ops."""
    from kernelzero.family import FamilyConfig, generate
    from kernelzero.tasks import Candidate, Task
    from kernelzero.teacher import compile_module
    pairs, i = [], 0
    cfg = FamilyConfig(target="gpu", min_ops=1, max_ops=max_ops)
    while len(pairs) < n:
        for m in generate(cfg, n, seed=seed, start=i):
            r = compile_module(m.source)
            if r.ok and len(pairs) < n:
                pairs.append((Task.from_source(m.source, f"{len(pairs)}_{m.name}"), Candidate(r.kernel_source)))
        i += n
    return pairs


def free_mib() -> float | None:
    import torch
    return torch.cuda.mem_get_info()[0] / 2**20 if torch.cuda.is_available() else None


def run_arm(arm: str, pairs, preset: str, limit_s: float) -> dict:
    from eval_throughput import lock_timeline
    from kernelzero.eval import Evaluator
    from kernelzero.train.config_file import load_config

    cfg = load_config(preset).eval_config()
    if arm == "untimed":
        cfg.timing = False
    if arm == "train-fork":
        cfg.runtime.start_method = "fork"
    trace = tempfile.mktemp(prefix="kz-gpu-lock-", suffix=".trace")
    os.environ["KZ_GPU_LOCK_TRACE"] = trace
    free0 = free_mib()
    out = {"arm": arm, "n": len(pairs), "max_workers": cfg.max_workers, "timed": cfg.timed,
           "free_before_mib": free0}
    with Evaluator(cfg) as ev:
        if arm == "train-double-count":  # the judge before 7 Dec: the pool as asked, no cap ...
            ev.spares.size = ev.memory.spares = cfg.spare_pool_size
            ev.memory.spares_ready = None  # ... and every spare's overhead counted, started or not
        out["spares"] = ev.spares.size  # the cap by the card's memory applied (other arms)
        t0 = time.perf_counter()
        out["spares_ready"] = ev.warm_up()
        out["warm_up_s"] = time.perf_counter() - t0
        free1 = free_mib()
        out["free_with_spares_mib"] = free1
        if free0 is not None and out["spares_ready"]:
            out["mib_per_spare"] = (free0 - free1) / out["spares_ready"]
        judged: dict[int, object] = {}
        t0, w0 = time.perf_counter(), time.time()

        def progress(i, v):
            judged[i] = v
            if len(judged) % 5 == 0 or len(judged) == len(pairs):
                print(f"  {arm}: judged {len(judged)}/{len(pairs)} "
                      f"({len(judged) / (time.perf_counter() - t0):.2f}/s)", file=sys.stderr, flush=True)
            if time.perf_counter() - t0 > limit_s and not ev.aborted:
                ev.abort()  # the rest are not judged: the rate so far is the figure

        print(f"  {arm}: {out['spares_ready']} spares ready in {out['warm_up_s']:.0f} s; judging",
              file=sys.stderr, flush=True)
        try:
            ev.judge_many(pairs, on_verdict=progress)
        except KeyboardInterrupt:  # SIGTERM: keep what was judged
            out["interrupted"] = True
        wall, w1 = time.perf_counter() - t0, time.time()
        out["budget_mib"] = (ev.memory.budget_bytes() or 0) / 2**20
        ref_phases = list(ev.reference_phases.values())
    os.environ.pop("KZ_GPU_LOCK_TRACE", None)
    verdicts = list(judged.values())
    out.update(judged=len(verdicts), wall_s=wall, rate_per_s=len(verdicts) / wall if wall else None,
               statuses=dict(Counter(v.status for v in verdicts)),
               phases=_phase_table([v.phases_s for v in verdicts] + [{"wall_s": v.wall_s} for v in verdicts]),
               reference_phases=_phase_table(ref_phases),
               gpu_lock={k: v for k, v in lock_timeline(trace, w0, w1).items() if k != "segments"})
    Path(trace).unlink(missing_ok=True)
    return out


def _phase_table(rows) -> dict:
    by = defaultdict(list)
    for r in rows:
        for k, v in (r or {}).items():
            if isinstance(v, (int, float)):
                by[k].append(float(v))
    return {k: {"median": round(statistics.median(v), 3), "sum": round(sum(v), 1), "n": len(v)}
            for k, v in sorted(by.items())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=30, help="modules an arm (default 30)")
    ap.add_argument("--arms", default="train-double-count,train,untimed")
    ap.add_argument("--preset", default="ablation-gate-gpu", help="whose eval section (default: the gate's)")
    ap.add_argument("--max-ops", type=int, default=4)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--limit-s", type=float, default=150.0, help="stop an arm's judging after this long")
    ap.add_argument("--out", default="judge_profile.json")
    args = ap.parse_args(argv)

    def stop(signum, frame):
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    results = []
    for k, arm in enumerate(args.arms.split(",")):
        pairs = teacher_pairs(args.n, args.seed + 1000 * k, args.max_ops)
        print(f"arm {arm}: {len(pairs)} teacher kernels", file=sys.stderr, flush=True)
        results.append(run_arm(arm, pairs, args.preset, args.limit_s))
        interrupted = results[-1].get("interrupted")
        Path(args.out).write_text(json.dumps({"args": vars(args), "arms": results}, indent=1))
        r = results[-1]
        print(f"arm {arm}: {r['judged']} judged in {r['wall_s']:.1f} s ({r['rate_per_s']:.2f}/s); "
              f"budget {r['budget_mib']:.0f} MiB; spares {r['spares_ready']}/{r['spares']} "
              f"({r.get('mib_per_spare') or 0:.0f} MiB each); statuses {r['statuses']}", file=sys.stderr, flush=True)
        if interrupted:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
