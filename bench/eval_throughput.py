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
import dataclasses
import gc
import json
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelzero.eval import EvalConfig, Evaluator, RuntimeConfig  # noqa: E402
from kernelzero.tasks import Candidate, Task  # noqa: E402

PROBLEMS = {
    # name: (init, forward body, args, inputs, init inputs); `{s}` scales the leading (batch)
    # dimension, so --size-scale S multiplies every problem's work by S.
    "Matmul_4096": ("", "return torch.matmul(A, B)", "A, B",
                    "[torch.randn(4096 * {s}, 4096), torch.randn(4096, 4096)]", "[]"),
    "Conv2d_large": ("self.conv = nn.Conv2d(64, 128, 3, padding=1)", "return self.conv(x)", "x",
                     "[torch.randn(16 * {s}, 64, 256, 256)]", "[]"),
    "Sum_100M": ("", "return torch.sum(x, dim=1)", "x", "[torch.randn(128 * {s}, 1024, 800)]", "[]"),
    "Softmax_64M": ("", "return torch.softmax(x, dim=1)", "x", "[torch.randn(4096 * {s}, 16384)]", "[]"),
    "ReLU_64M": ("", "return torch.relu(x)", "x", "[torch.randn(4096 * {s}, 16384)]", "[]"),
    "Linear_ReLU": ("self.fc = nn.Linear(4096, 4096)", "return torch.relu(self.fc(x))", "x",
                    "[torch.randn(4096 * {s}, 4096)]", "[]"),
    "Conv_ReLU_Bias": ("self.conv = nn.Conv2d(32, 64, 3)\n        self.bias = nn.Parameter(torch.randn(64, 1, 1))",
                       "return torch.relu(self.conv(x)) + self.bias", "x",
                       "[torch.randn(32 * {s}, 32, 256, 256)]", "[]"),
    "LayerNorm": ("self.ln = nn.LayerNorm(8192)", "return self.ln(x)", "x",
                  "[torch.randn(8192 * {s}, 8192)]", "[]"),
    "Argmax_100M": ("", "return torch.argmax(x, dim=2)", "x", "[torch.randn(256 * {s}, 512, 800)]", "[]"),
    "GELU_Mean": ("", "return torch.nn.functional.gelu(x).mean(dim=-1)", "x",
                  "[torch.randn(16384 * {s}, 4096)]", "[]"),
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


def make_tasks(scale: int = 1) -> list[Task]:
    tasks = []
    for i, (name, (init, body, args, inputs, init_inputs)) in enumerate(PROBLEMS.items(), 1):
        src = TEMPLATE.format(cls="Model", init=init or "pass", body=body, args=args,
                              inputs=inputs.format(s=scale), init_inputs=init_inputs)
        tasks.append(Task(source=src, name=f"{name}x{scale}" if scale > 1 else name,
                          level=1, problem_id=i))
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


def timed_loops(verdicts) -> dict:
    """What the timed loops cost beyond the kernels (from each verdict's timing_details, the
    candidate's and, once per task, the reference's): host wall of the loops, their calls, the
    median per-call overhead, and how many draws put their inputs at earlier calls' addresses."""
    loops, seen = [], set()
    for v in verdicts:
        for side, d in (v.timing_details or {}).items():
            key = v.task_hash if side == "reference" else id(d)  # a task's reference: once
            if "loop_ms" in d and key not in seen:
                seen.add(key)
                loops.append(d)
    if not loops:
        return {}
    return {"loops": len(loops), "loop_s": sum(d["loop_ms"] for d in loops) / 1e3,
            "overhead_ms_per_call_median": statistics.median(d["overhead_ms_per_call"] for d in loops),
            "overhead_ms_per_call_max": max(d["overhead_ms_per_call"] for d in loops),
            "same_address_calls": sum(d.get("same_address_calls", 0) for d in loops),
            "launch_bound_calls": sum(d.get("launch_bound_calls", 0) for d in loops),
            "spun_calls": sum(d.get("spun_calls", 0) for d in loops),
            "synced_calls": sum(d.get("synced_calls", 0) for d in loops),
            # synchronizes whose host thread waited for a CPU (a busy host), the longest wait
            "disturbed_syncs": sum(d.get("disturbed_syncs", 0) for d in loops),
            "run_delay_ms_max": max((d.get("run_delay_ms_max", 0.0) for d in loops), default=0.0),
            "retimed_loops": sum(bool(d.get("retimed")) for d in loops),
            "between_calls_ms_median": _median_of(loops, "between_calls_ms"),
            "l2_reset_ms": sum(d.get("l2_reset_ms", 0.0) for d in loops)}


def _candidate_loop(v) -> dict:
    """The candidate's timed-loop diagnostics of a verdict (empty when it was not timed)."""
    return (v.timing_details or {}).get("candidate", {})


def _round_trips(verdicts) -> dict:
    """The judge's time around each candidate's timing command beyond the worker's own time for
    it (pipe round trip, reading the reply, waking up): summed and the largest, in ms. A loop
    timed twice (`retimed`) is left out: the judge's time then holds both commands."""
    extra = [1e3 * v.phases_s["timing_s"] - d["command_ms"] for v in verdicts
             if "timing_s" in (v.phases_s or {})
             and "command_ms" in (d := _candidate_loop(v))
             and not d.get("retimed")]
    return {"n": len(extra), "sum_ms": sum(extra), "max_ms": max(extra)} if extra else {}


def _median_of(loops: list[dict], key: str):
    vals = [d[key] for d in loops if d.get(key) is not None]
    return statistics.median(vals) if vals else None


def lock_timeline(path: str, t0: float, t1: float) -> dict:
    """From a KZ_GPU_LOCK_TRACE file: seconds of [t0, t1] (wall clock) in which the GPU lock was
    held for timing (exclusive), held only for running modules (shared: correctness trials,
    builds, spare start-ups), or not held at all; plus how long timings waited in total."""
    holds: dict = {}
    spans = {"exclusive": [], "shared": []}
    waits: dict = {}
    timing_wait = 0.0
    labelled: list = []  # (start, end, mode, what) of every hold
    for line in Path(path).read_text().splitlines() if os.path.exists(path) else []:
        try:
            ts, pid, tid, mode, event, *what = line.split()
            ts = float(ts)
        except ValueError:
            continue
        key = (pid, tid, mode)
        if event == "wait":
            waits[key] = ts
        elif event == "hold":
            holds[key] = ts
            if mode == "exclusive" and key in waits:
                timing_wait += ts - waits.pop(key)
        elif event == "free" and key in holds:
            spans[mode].append((holds[key], ts))
            labelled.append((holds.pop(key), ts, mode, what[0] if what else "-"))
    for key, ts in holds.items():  # still held at the end
        spans[key[2]].append((ts, t1))

    def union(iv):
        total, end = 0.0, t0
        for a, b in sorted((max(a, t0), min(b, t1)) for a, b in iv):
            if b <= max(a, end):
                continue
            total += b - max(a, end)
            end = b
        return total

    excl, any_ = union(spans["exclusive"]), union(spans["exclusive"] + spans["shared"])
    timed = sorted(spans["exclusive"])
    return {"wall_s": t1 - t0, "timing_held_s": excl, "shared_only_s": any_ - excl,
            "idle_s": (t1 - t0) - any_, "timing_wait_sum_s": timing_wait,
            "timings": len(spans["exclusive"]), "shared_holds": len(spans["shared"]),
            # before the first timing (references and first candidates loading and running),
            # and after the last (the last re-checks and verdicts)
            "before_first_timing_s": (timed[0][0] - t0) if timed else None,
            "after_last_timing_s": (t1 - max(b for _, b in timed)) if timed else None,
            "segments": _segments(spans, t0, t1), "holders": _holders(labelled, t0, t1)}


def _holders(labelled: list, t0: float, t1: float) -> dict:
    """What held the lock: per label (ref_run, cand_run, cand_time, ...) how many holds, their
    summed and longest seconds, and the seconds in which only shared holders of it held it."""
    out: dict = {}
    for a, b, mode, what in labelled:
        a, b = max(a, t0), min(b, t1)
        if b <= a:
            continue
        d = out.setdefault(what, {"holds": 0, "held_s": 0.0, "max_s": 0.0})
        d["holds"] += 1
        d["held_s"] = round(d["held_s"] + (b - a), 4)
        d["max_s"] = round(max(d["max_s"], b - a), 4)
    return out


def _segments(spans: dict, t0: float, t1: float) -> list:
    """[start_s, end_s, state] from t0, state "timing" | "shared" | "idle": the lock's timeline."""
    cuts = sorted({t0, t1} | {min(max(x, t0), t1) for iv in spans.values() for a, b in iv
                              for x in (a, b)})
    out: list = []
    for a, b in zip(cuts, cuts[1:]):
        mid = (a + b) / 2
        state = ("timing" if any(x <= mid < y for x, y in spans["exclusive"]) else
                 "shared" if any(x <= mid < y for x, y in spans["shared"]) else "idle")
        if out and out[-1][2] == state:
            out[-1][1] = round(b - t0, 4)
        else:
            out.append([round(a - t0, 4), round(b - t0, 4), state])
    return out


class InterpreterLag:
    """How late a thread of the judge wakes from a short sleep: the wait for the interpreter lock
    (and for a CPU) that every judge thread meets when it wakes, the one holding the GPU for a
    timing included. Diagnostics only: it adds one more thread that wants the lock."""

    def __init__(self, period_s: float = 0.002):
        self.period_s, self.lags = period_s, []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            t = time.perf_counter()
            time.sleep(self.period_s)
            self.lags.append(time.perf_counter() - t - self.period_s)

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def summary(self) -> dict:
        if len(self.lags) < 2:
            return {}
        q = statistics.quantiles([1e3 * x for x in self.lags], n=100, method="inclusive")
        return {"wakeups": len(self.lags), "median_ms": q[49], "p90_ms": q[89], "p99_ms": q[98],
                "max_ms": 1e3 * max(self.lags), "over_1ms": sum(x > 1e-3 for x in self.lags)}


class CollectorPauses:
    """Every cyclic garbage collection in the judge while the batch runs (gc.callbacks): how long
    it held the interpreter lock, which every judge thread, the timing one included, waits for."""

    def __init__(self):
        self.pauses, self._t0 = [], None

    def _callback(self, phase: str, info: dict) -> None:
        if phase == "start":
            self._t0 = time.perf_counter()
        elif self._t0 is not None:
            self.pauses.append((info.get("generation"), time.perf_counter() - self._t0))
            self._t0 = None

    def __enter__(self):
        gc.callbacks.append(self._callback)
        return self

    def __exit__(self, *exc):
        gc.callbacks.remove(self._callback)

    def summary(self) -> dict:
        if not self.pauses:
            return {"collections": 0}
        gen, longest = max(self.pauses, key=lambda p: p[1])
        return {"collections": len(self.pauses), "sum_ms": 1e3 * sum(p[1] for p in self.pauses),
                "max_ms": 1e3 * longest, "max_generation": gen,
                "by_generation": {g: sum(1 for p in self.pauses if p[0] == g) for g in (0, 1, 2)}}


def kernelbench_config(max_workers: int, **runtime) -> EvalConfig:
    """KernelBench's workload on cuda: 5 correctness trials, 3 warm-up calls (no time-based
    warm-up), 100 timed calls, 3 of them re-checked; no hardening trials, no policy.
    `runtime`: RuntimeConfig fields."""
    return EvalConfig(device="cuda", policy="none", correctness_trials=5, hardening_trials=False,
                      timing_warmup=3, timing_warmup_ms=0.0, timing_min_trials=100,
                      timing_max_trials=100, timing_budget_s=60, timing_checked_calls=3,
                      max_workers=max_workers, runtime=RuntimeConfig(**runtime))


def throughput(workers: int, quick: bool, transfer: str = "auto", start_method: str = "auto",
               scale: int = 1, warm: bool = False, spares: int | None = None,
               reserve_mb: int = 0, knobs: dict | None = None) -> dict:
    """Judge the batch; the clock starts when the evaluator is created (cold) or, with warm, once
    its spare workers are started and warmed (a long-lived judge: a trainer, the service).
    `knobs`: further RuntimeConfig fields (the memory and output-sharing flags of `main`)."""
    knobs = dict(knobs or {})
    cfg = kernelbench_config(transfer=transfer, start_method=start_method, max_workers=workers,
                             spares=spares, spare_reserve_mb=reserve_mb, **knobs)
    tasks = make_tasks(scale)[: 3 if quick else None]
    pairs = [(t, as_candidate(t, k)) for t in tasks for k in range(2)]
    warm_up_s, ready = None, None
    trace = tempfile.mktemp(prefix="kz-gpu-lock-", suffix=".trace")
    os.environ["KZ_GPU_LOCK_TRACE"] = trace  # inherited by nothing untrusted: the judge writes it
    t0, w0 = time.perf_counter(), time.time()
    with Evaluator(cfg) as ev:
        if warm:
            ready = ev.warm_up()
            warm_up_s = time.perf_counter() - t0
            t0, w0 = time.perf_counter(), time.time()
        load_before = os.getloadavg()[0]
        with InterpreterLag() as lag, CollectorPauses() as pauses:
            verdicts = ev.judge_many(pairs)
        ref_phases = dict(ev.reference_phases)
        wall, w1 = time.perf_counter() - t0, time.time()
        # how busy the host's CPUs were (1-minute load averages; other jobs show here)
        host_load = {"cpus": os.cpu_count(), "load_1m_before": load_before,
                     "load_1m_after": os.getloadavg()[0]}
    os.environ.pop("KZ_GPU_LOCK_TRACE", None)
    gpu_lock = lock_timeline(trace, w0, w1)
    Path(trace).unlink(missing_ok=True)
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
             "speedup": v.speedup, "flags": v.flags, "wall_s": v.wall_s, "phases_s": v.phases_s,
             "retimed": bool(_candidate_loop(v).get("retimed")),
             # the worker's own time for the timing command (timing_s beyond it: round trip)
             "timing_command_ms": _candidate_loop(v).get("command_ms"),
             "timing_loop_ms": _candidate_loop(v).get("loop_ms"),
             **{k: _candidate_loop(v).get(k) for k in
                ("after_stream_gap_ms", "sync_latency_ms", "disturbed_syncs", "run_delay_ms_max")},
             "reason": v.reason[:160]}
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
            "spare_reserve_mb": reserve_mb, "load_reserve_factor": cfg.runtime.load_reserve_factor,
            "ipc_output_pool": cfg.runtime.ipc_output_pool,
            "ipc_min_bytes": cfg.runtime.ipc_min_bytes, "ipc_arena": cfg.runtime.ipc_arena,
            "gc_pauses": pauses.summary(),
            "interpreter_lag": lag.summary(), "timing_round_trip_ms": _round_trips(verdicts),
            "size_scale": scale, "clock": "warm" if warm else "cold", "warm_up_s": warm_up_s,
            "spares_ready": ready, "start_method": cfg.worker_start, "gpu_lock": gpu_lock,
            "sandbox": (verdicts[0].env or {}).get("sandbox", {}).get("isolation"),
            "timed_loops": timed_loops(verdicts), "transfer": cfg.transfer_mode,
            "host_load": host_load, "gpu": verdicts[0].env.get("gpu"), "rows": rows}


def repeatability(workers: int, save=None, names: list[str] | None = None) -> dict:
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
        if names and name not in names:
            continue
        src = (ex / tpath).read_text()
        for a, b in subs.items():
            src = src.replace(a, b)
        task, cand = Task(source=src, name=name), Candidate.from_file(ex / cpath)
        speedups, runs = [], []
        for _ in range(3):
            with Evaluator(EvalConfig(device="cuda", max_workers=workers)) as ev:
                v = ev.judge(task, cand)
            speedups.append(v.speedup)
            runs.append({"speedup": v.speedup, "flags": v.flags, "timing_details": v.timing_details,
                         "cand": dataclasses.asdict(v.runtime_ms) if v.runtime_ms else None,
                         "ref": dataclasses.asdict(v.ref_runtime_ms) if v.ref_runtime_ms else None})
            print(f"  {name}: speedup {v.speedup} ({v.status}; {v.reason[:100]})", flush=True)
            for side, d in (v.timing_details or {}).items():
                print(f"      {side}: " + ", ".join(f"{k} {x}" for k, x in d.items()), flush=True)
            out[name] = {"speedups": list(speedups), "runs": runs, "partial": True}
            if save:
                save(out)
        ok = all(s is not None for s in speedups)
        out[name] = {"speedups": speedups, "status": v.status, "reason": v.reason[:200], "runs": runs,
                     "spread_pct": 100 * (max(speedups) - min(speedups)) / statistics.median(speedups)
                     if ok else None}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", default=os.path.join(tempfile.gettempdir(), "eval_throughput.json"))
    ap.add_argument("--workers", type=int, default=8)
    ap.add_argument("--quick", action="store_true", help="3 problems only")
    ap.add_argument("--scales", type=int, nargs="+", default=[1],
                    help="problem size multipliers, one throughput run each (4 gives about the "
                         "anchor's GPU work per candidate)")
    ap.add_argument("--clocks", nargs="+", default=["cold"], choices=["cold", "warm"],
                    help="cold: the clock includes starting the evaluator's workers; warm: it "
                         "starts once they are ready (a long-lived judge)")
    ap.add_argument("--spares", type=int, default=None,
                    help="RuntimeConfig.spares (default: the evaluator's; the batch needs one worker "
                         "per candidate and per task: 30 here)")
    ap.add_argument("--spare-reserve-mb", type=int, default=0,
                    help="RuntimeConfig.spare_reserve_mb: GPU memory each spare holds for its first "
                         "trial's allocations (0: none)")
    ap.add_argument("--load-reserve-factor", type=float, default=None,
                    help="RuntimeConfig.load_reserve_factor: memory each worker reserves while "
                         "loading, in inputs' sizes (default: the evaluator's; 0: none)")
    ap.add_argument("--no-ipc-pool", action="store_true",
                    help="RuntimeConfig.ipc_output_pool=False: shared outputs are copied wherever the "
                         "worker's allocator finds room (often inside its memory reserve)")
    ap.add_argument("--ipc-min-bytes", type=int, default=None,
                    help="RuntimeConfig.ipc_min_bytes: smaller outputs go through host memory "
                         "(default: the evaluator's; 0: every CUDA output over IPC)")
    ap.add_argument("--no-ipc-arena", action="store_true",
                    help="RuntimeConfig.ipc_arena=False: each shared output gets an allocation of its "
                         "own, which the judge maps while it holds the GPU lock")
    ap.add_argument("--skip-repeat", action="store_true")
    ap.add_argument("--repeat-only", action="store_true", help="only the repeatability part")
    ap.add_argument("--repeat-names", nargs="+", default=None,
                    help="only these repeatability candidates (relu_triton relu_cuda softmax_triton)")
    ap.add_argument("--repeat-workers", type=int, default=2,
                    help="max_workers of the repeatability evaluators (one candidate each)")
    ap.add_argument("--transfer", default="auto", choices=["auto", "ipc", "host"])
    ap.add_argument("--start-method", default="auto", choices=["auto", "spawn", "fork"],
                    help="how worker processes start (RuntimeConfig.start_method)")
    ap.add_argument("--sandbox", default=None, choices=["auto", "bwrap", "none"],
                    help="the workers' jail (KZ_SANDBOX; default: the environment's, else auto)")
    args = ap.parse_args()
    if args.sandbox:  # read by every SandboxLimits the evaluators make
        os.environ["KZ_SANDBOX"] = args.sandbox
    knobs = {"ipc_output_pool": not args.no_ipc_pool, "ipc_arena": not args.no_ipc_arena}
    for field, value in (("load_reserve_factor", args.load_reserve_factor),
                         ("ipc_min_bytes", args.ipc_min_bytes)):
        if value is not None:  # else the evaluator's default
            knobs[field] = value
    res: dict = {"throughput_runs": []}
    out = Path(args.out)
    if not args.repeat_only:
        for scale in args.scales:
            for clock in args.clocks:
                tp = throughput(args.workers, args.quick, args.transfer, args.start_method,
                                scale=scale, warm=clock == "warm", spares=args.spares,
                                reserve_mb=args.spare_reserve_mb, knobs=knobs)
                res["throughput_runs"].append(tp)
                out.write_text(json.dumps(res, indent=2))  # each finished run is kept
                report_throughput(tp)
    if not args.skip_repeat:
        res["repeatability"] = repeatability(
            args.repeat_workers, names=args.repeat_names,
            save=lambda r: out.write_text(json.dumps({**res, "repeatability": r}, indent=2)))
        for name, r in res["repeatability"].items():
            print(f"  speedup {name:15s} {r['speedups']} spread {r['spread_pct']}% ({r['status']})")
    out.write_text(json.dumps(res, indent=2))
    print(f"results: {out}")


def report_throughput(tp: dict) -> None:
    for r in tp["rows"]:
        print(f"  {r['candidate']:22s} {r['status']:10s} cand {r['runtime_ms'] or 0:9.3f} ms  "
              f"ref {r['ref_ms'] or 0:9.3f} ms  wall {r['wall_s']:6.1f} s  {r['reason'][:60]}")
    print(f"{tp['candidates']} candidates ({tp['correct']} correct) on {tp['gpu']} "
          f"[size x{tp['size_scale']}, {tp['clock']} clock, {tp['start_method']} workers "
          f"(isolation {tp.get('sandbox')}), "
          f"{tp['transfer']}, {tp['workers']} at once, host load "
          f"{tp['host_load']['load_1m_after']:.1f} on {tp['host_load']['cpus']} CPUs]: "
          f"wall {tp['wall_s']:.1f} s, "
          f"GPU work {tp['gpu_s']:.1f} s -> wall/GPU = {tp['wall_over_gpu']:.2f}x "
          f"(KernelBench's evaluator: 402 s / 19 s = 21x)")
    print("  summed per-candidate phases (s): " +
          ", ".join(f"{k} {x:.1f}" for k, x in tp["phases_sum_s"].items()))
    lk = tp.get("gpu_lock") or {}
    if lk:
        print(f"  GPU lock over the wall: timing {lk['timing_held_s']:.1f} s ({lk['timings']} timings), "
              f"shared only {lk['shared_only_s']:.1f} s, idle {lk['idle_s']:.1f} s; timings waited "
              f"{lk['timing_wait_sum_s']:.1f} s in all; first timing after "
              f"{lk.get('before_first_timing_s') or 0:.2f} s, last one ended "
              f"{lk.get('after_last_timing_s') or 0:.2f} s before the end")
        print("  lock holds (count, summed s, longest s): " + ", ".join(
            f"{w} {d['holds']} {d['held_s']:.2f} {d['max_s']:.2f}"
            for w, d in sorted((lk.get("holders") or {}).items())))
    tl = tp.get("timed_loops") or {}
    if tl:
        print(f"  timed loops: {tl['loops']} ({tl['loop_s']:.1f} s of host wall), overhead per call "
              f"{tl['overhead_ms_per_call_median']:.3f} ms median ({tl['overhead_ms_per_call_max']:.3f} "
              f"max) beyond the kernel; {tl['same_address_calls']} draws at earlier calls' "
              f"addresses; {tl['launch_bound_calls']} launch-bound, {tl['spun_calls']} spun, "
              f"{tl['synced_calls']} synchronised ({tl.get('disturbed_syncs', 0)} with the host "
              f"waiting for a CPU, {tl.get('run_delay_ms_max', 0):.2f} ms at most), "
              f"{tl.get('retimed_loops', 0)} timed again; GPU time between calls "
              f"{tl['between_calls_ms_median'] or 0:.3f} ms median; L2 resets "
              f"{tl['l2_reset_ms']:.0f} ms of host time")
    lag, rt = tp.get("interpreter_lag") or {}, tp.get("timing_round_trip_ms") or {}
    if lag:
        gcp = tp.get("gc_pauses") or {}
        print(f"  garbage collections: "
              f"{gcp.get('collections', 0)}, {gcp.get('sum_ms', 0):.0f} ms in all, the longest "
              f"{gcp.get('max_ms', 0):.1f} ms (generation {gcp.get('max_generation')})")
        print(f"  judge threads woke late: "
              f"median {lag['median_ms']:.2f} ms, p90 {lag['p90_ms']:.2f}, p99 {lag['p99_ms']:.2f}, "
              f"max {lag['max_ms']:.1f} ms; timing round trips beyond the worker's command: "
              f"{rt.get('sum_ms', 0):.0f} ms summed, {rt.get('max_ms', 0):.1f} ms the largest")
    print("  summed per-reference phases (s): " +
          ", ".join(f"{k} {x:.1f}" for k, x in tp["reference_phases_sum_s"].items()))


if __name__ == "__main__":
    main()
