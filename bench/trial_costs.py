"""Where a candidate's correctness phase spends its time, alone on the GPU, function by function.

Two profiles (cProfile, host time) of the throughput bench's problems at KernelBench's sizes:
- worker side: `Worker.run` (5 poisoned trials, outputs shared over CUDA IPC) in this process,
  on a warmed worker, the way a spare runs it;
- judge side: `Evaluator.judge` of a second candidate of the same task (its reference already
  cached), with one worker: the candidate's load, build, trials, the judge's copies and
  comparisons, its timing and re-check.

    python bench/trial_costs.py --problems ReLU_64M Matmul_4096 --out trial_costs.json
"""
from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import sys
import time
import types
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_throughput import as_candidate, kernelbench_config, make_tasks  # noqa: E402


def top(prof: cProfile.Profile, n: int, key: str) -> str:
    s = io.StringIO()
    pstats.Stats(prof, stream=s).sort_stats(key).print_stats(n)
    return "\n".join(line for line in s.getvalue().splitlines() if line.strip())[-6000:]


def worker_side(task, reps: int) -> dict:
    import torch
    from kernelzero.eval.worker.worker import Worker
    w = Worker()
    t0 = time.perf_counter()
    w.warm({"device": "cuda", "transfer": "ipc"})
    warm_s = time.perf_counter() - t0
    mod = types.ModuleType("kz_reference")
    exec(compile(task.source, "reference.py", "exec"), mod.__dict__)
    w.ref, w.device, w.transfer, w.role = mod, "cuda", "ipc", "reference"
    t0 = time.perf_counter()
    w.build({"init_seed": 0})
    build_s = time.perf_counter() - t0
    runs = []
    prof = cProfile.Profile()
    for r in range(reps):
        cmd = {"trials": [{"seed": 100 * r + i} for i in range(5)], "poison": True}
        t0 = time.perf_counter()
        if r == reps - 1:
            prof.enable()
        reply = w.run(cmd)
        if r == reps - 1:
            prof.disable()
        torch.cuda.synchronize()
        runs.append({"run_ms": (time.perf_counter() - t0) * 1e3,
                     "trials": [{k: round(t[k], 3) for k in ("inputs_ms", "draw_ms", "wall_ms",
                                                              "mutation_check_ms")}
                                for t in reply["trials"]]})
        w._keep.clear()
    return {"warm_s": warm_s, "build_s": build_s, "runs": runs,
            "profile_tottime": top(prof, 30, "tottime"),
            "profile_cumulative": top(prof, 40, "cumulative")}


def judge_side(task) -> dict:
    from kernelzero.eval import Evaluator
    cfg = kernelbench_config(max_workers=1, spares=3)
    with Evaluator(cfg) as ev:
        ev.warm_up()
        first = ev.judge(task, as_candidate(task, 0))  # the reference is computed and cached
        prof = cProfile.Profile()
        t0 = time.perf_counter()
        prof.enable()
        v = ev.judge(task, as_candidate(task, 1))
        prof.disable()
        wall = time.perf_counter() - t0
    return {"first_status": first.status, "status": v.status, "wall_s": wall,
            "phases_s": v.phases_s, "profile_tottime": top(prof, 30, "tottime"),
            "profile_cumulative": top(prof, 50, "cumulative")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--problems", nargs="+", default=["ReLU_64M", "Matmul_4096"])
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--side", choices=["worker", "judge", "both"], default="both")
    ap.add_argument("--out", default="trial_costs.json")
    a = ap.parse_args()
    tasks = {t.name: t for t in make_tasks(1)}
    res = {}
    for name in a.problems:
        res[name] = {}
        if a.side in ("worker", "both"):
            res[name]["worker"] = worker_side(tasks[name], a.reps)
            for r in res[name]["worker"]["runs"]:
                print(f"{name} worker run {r['run_ms']:.1f} ms: {r['trials']}")
        if a.side in ("judge", "both"):
            res[name]["judge"] = judge_side(tasks[name])
            j = res[name]["judge"]
            print(f"{name} judge {j['status']} {j['wall_s']:.3f} s {j['phases_s']}")
        Path(a.out).write_text(json.dumps(res, indent=1))
    for name, r in res.items():
        for side, d in r.items():
            print(f"===== {name} {side}: by own time\n{d['profile_tottime']}")


if __name__ == "__main__":
    main()
