"""Evaluator throughput on KernelBench-sized problems: wall time against the GPU work it judged.

Does the work KernelBench's evaluator does per candidate (5 correctness trials, 100 timed trials,
the reference timed too) for 20 trivially correct candidates (the reference itself as ModelNew,
two per problem, as in the anchor measurement on the architecture page: 402 s of wall time for
about 19 s of GPU work), then prints total wall time next to the GPU time those calls took.

GPU time is counted from our own CUDA-event medians: for each candidate (correctness trials +
warm-up + timed calls) x its median, plus for each task (its trials + warm-up + timed calls) x the
reference median. Also measures the repeatability of `speedup` over three evaluations (fresh
evaluators, nothing cached) of real Triton/CUDA candidates.

    python bench/eval_throughput.py [--out results.json] [--workers 8] [--quick]
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelzero.eval import EvalConfig, Evaluator  # noqa: E402
from kernelzero.tasks import Candidate, Task  # noqa: E402

PROBLEMS = {
    # name: (init, forward body, inputs, init inputs)
    "Matmul_4096": ("", "return torch.matmul(A, B)", "A, B",
                    "[torch.randn(4096, 4096), torch.randn(4096, 4096)]", "[]"),
    "Conv2d_large": ("self.conv = nn.Conv2d(64, 128, 3, padding=1)", "return self.conv(x)", "x",
                     "[torch.randn(16, 64, 256, 256)]", "[]"),
    "Sum_100M": ("", "return torch.sum(x, dim=1)", "x", "[torch.randn(128, 1024, 800)]", "[]"),
    "Softmax_64M": ("", "return torch.softmax(x, dim=1)", "x", "[torch.randn(4096, 16384)]", "[]"),
    "ReLU_64M": ("", "return torch.relu(x)", "x", "[torch.randn(4096, 16384)]", "[]"),
    "Linear_ReLU": ("self.fc = nn.Linear(4096, 4096)", "return torch.relu(self.fc(x))", "x",
                    "[torch.randn(4096, 4096)]", "[]"),
    "Conv_ReLU_Bias": ("self.conv = nn.Conv2d(32, 64, 3)\n        self.bias = nn.Parameter(torch.randn(64, 1, 1))",
                       "return torch.relu(self.conv(x)) + self.bias", "x",
                       "[torch.randn(32, 32, 256, 256)]", "[]"),
    "LayerNorm": ("self.ln = nn.LayerNorm(8192)", "return self.ln(x)", "x",
                  "[torch.randn(8192, 8192)]", "[]"),
    "Argmax_100M": ("", "return torch.argmax(x, dim=2)", "x", "[torch.randn(256, 512, 800)]", "[]"),
    "GELU_Mean": ("", "return torch.nn.functional.gelu(x).mean(dim=-1)", "x",
                  "[torch.randn(16384, 4096)]", "[]"),
}

TEMPLATE = '''import torch
import torch.nn as nn


class {cls}(nn.Module):
    def __init__(self):
        super().__init__()
        {init}

    def forward(self, {args}):
        {body}


def get_inputs():
    return {inputs}


def get_init_inputs():
    return {init_inputs}
'''


def make_tasks() -> list[Task]:
    tasks = []
    for i, (name, (init, body, args, inputs, init_inputs)) in enumerate(PROBLEMS.items(), 1):
        src = TEMPLATE.format(cls="Model", init=init or "pass", body=body, args=args,
                              inputs=inputs, init_inputs=init_inputs)
        tasks.append(Task(source=src, name=name, level=1, problem_id=i))
    return tasks


def as_candidate(task: Task, variant: int) -> Candidate:
    src = task.source.replace("class Model(", "class ModelNew(")
    return Candidate(source=src + f"\n# variant {variant}\n", name=f"{task.name}_v{variant}")


def gpu_seconds(v, cfg) -> float:
    """Kernel time this candidate's judging spent on the GPU (its own calls only)."""
    if not v.runtime_ms:
        return 0.0
    calls = v.trials_run + cfg.timing_warmup + v.runtime_ms.n
    return calls * v.runtime_ms.median_ms / 1e3


def throughput(workers: int, quick: bool, transfer: str = "auto", start_method: str = "auto") -> dict:
    cfg = EvalConfig(device="cuda", policy="none", correctness_trials=5, transfer=transfer,
                     start_method=start_method,
                     hardening_trials=False, timing_warmup=3, timing_min_trials=100,
                     timing_max_trials=100, timing_budget_s=60, timing_checked_calls=3,
                     max_workers=workers)
    tasks = make_tasks()[: 3 if quick else None]
    pairs = [(t, as_candidate(t, k)) for t in tasks for k in range(2)]
    t0 = time.perf_counter()
    with Evaluator(cfg) as ev:
        verdicts = ev.judge_many(pairs)
        ref_phases = dict(ev.reference_phases)
    wall = time.perf_counter() - t0
    cand_gpu = sum(gpu_seconds(v, cfg) for v in verdicts)
    ref_gpu = 0.0
    seen = set()
    for (t, _), v in zip(pairs, verdicts):
        if t.hash not in seen and v.ref_runtime_ms:
            seen.add(t.hash)
            n_ref_calls = v.trials_run + cfg.timing_checked_calls + cfg.timing_warmup + v.ref_runtime_ms.n
            ref_gpu += n_ref_calls * v.ref_runtime_ms.median_ms / 1e3
    rows = [{"candidate": c.name, "status": v.status, "runtime_ms": v.runtime_ms.median_ms if v.runtime_ms else None,
             "ref_ms": v.ref_runtime_ms.median_ms if v.ref_runtime_ms else None,
             "speedup": v.speedup, "wall_s": v.wall_s, "phases_s": v.phases_s, "reason": v.reason[:160]}
            for (_, c), v in zip(pairs, verdicts)]
    gpu = cand_gpu + ref_gpu
    phase_names = sorted({k for v in verdicts for k in v.phases_s})
    phases_sum = {k: sum(v.phases_s.get(k, 0.0) for v in verdicts) for k in phase_names}
    ref_names = sorted({k for p in ref_phases.values() for k in p})
    ref_sum = {k: sum(p.get(k, 0.0) for p in ref_phases.values()) for k in ref_names}
    return {"phases_sum_s": phases_sum, "reference_phases_sum_s": ref_sum,
            "reference_phases": ref_phases, "candidates": len(pairs), "correct": sum(v.correct for v in verdicts),
            "wall_s": wall, "gpu_s": gpu, "gpu_s_candidates": cand_gpu, "gpu_s_reference": ref_gpu,
            "wall_over_gpu": wall / gpu if gpu else None, "workers": workers,
            "transfer": cfg.transfer_mode,
            "gpu": verdicts[0].env.get("gpu"), "rows": rows}


def repeatability(workers: int) -> dict:
    ex = Path(__file__).resolve().parents[1] / "kernelzero" / "examples"
    big = {  # example candidates on KernelBench-sized versions of their tasks
        "relu_triton": ("tasks/level1/1_ReLU.py", "candidates/level_1_problem_1_sample_0_kernel.py",
                        {"batch_size = 16": "batch_size = 4096", "dim = 1000": "dim = 16383"}),
        "relu_cuda": ("tasks/level1/1_ReLU.py", "candidates/level_1_problem_1_sample_3_kernel.py",
                      {"batch_size = 16": "batch_size = 4096", "dim = 1000": "dim = 16383"}),
        "softmax_triton": ("tasks/level1/2_Softmax.py", "candidates/level_1_problem_2_sample_0_kernel.py",
                           {"batch_size = 16": "batch_size = 8192", "dim = 300": "dim = 4096"}),
    }
    out = {}
    for name, (tpath, cpath, subs) in big.items():
        src = (ex / tpath).read_text()
        for a, b in subs.items():
            src = src.replace(a, b)
        task, cand = Task(source=src, name=name), Candidate.from_file(ex / cpath)
        speedups = []
        for _ in range(3):
            with Evaluator(EvalConfig(device="cuda", max_workers=workers)) as ev:
                v = ev.judge(task, cand)
            speedups.append(v.speedup)
        ok = all(s is not None for s in speedups)
        out[name] = {"speedups": speedups, "status": v.status, "reason": v.reason[:200],
                     "spread_pct": 100 * (max(speedups) - min(speedups)) / statistics.median(speedups)
                     if ok else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "eval_throughput.json"))
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="3 problems only")
    ap.add_argument("--skip-repeat", action="store_true")
    ap.add_argument("--repeat-only", action="store_true", help="only the repeatability part")
    ap.add_argument("--repeat-workers", type=int, default=2,
                    help="max_workers of the repeatability evaluators (one candidate each)")
    ap.add_argument("--transfer", default="auto", choices=["auto", "ipc", "host"])
    ap.add_argument("--start-method", default="auto", choices=["auto", "spawn", "fork"],
                    help="how worker processes start (EvalConfig.start_method)")
    args = ap.parse_args()
    res = {}
    if not args.repeat_only:
        res["throughput"] = throughput(args.workers, args.quick, args.transfer, args.start_method)
        report_throughput(res["throughput"])
    if not args.skip_repeat:
        res["repeatability"] = repeatability(args.repeat_workers)
        for name, r in res["repeatability"].items():
            print(f"  speedup {name:15s} {r['speedups']} spread {r['spread_pct']}% ({r['status']})")
    Path(args.out).write_text(json.dumps(res, indent=2))
    print(f"results: {args.out}")


def report_throughput(tp: dict) -> None:
    for r in tp["rows"]:
        print(f"  {r['candidate']:22s} {r['status']:10s} cand {r['runtime_ms'] or 0:9.3f} ms  "
              f"ref {r['ref_ms'] or 0:9.3f} ms  wall {r['wall_s']:6.1f} s  {r['reason'][:60]}")
    print(f"{tp['candidates']} candidates ({tp['correct']} correct) on {tp['gpu']} "
          f"[{tp['transfer']}, {tp['workers']} workers]: wall {tp['wall_s']:.1f} s, "
          f"GPU work {tp['gpu_s']:.1f} s -> wall/GPU = {tp['wall_over_gpu']:.2f}x "
          f"(KernelBench's evaluator: 402 s / 19 s = 21x)")
    print("  summed per-candidate phases (s): " +
          ", ".join(f"{k} {x:.1f}" for k, x in tp["phases_sum_s"].items()))
    print("  summed per-reference phases (s): " +
          ", ".join(f"{k} {x:.1f}" for k, x in tp["reference_phases_sum_s"].items()))


if __name__ == "__main__":
    main()
