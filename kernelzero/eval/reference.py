"""Running the reference module in its own clean sandboxed process.

The reference (which the Proposer may have written, so it is untrusted too) runs every trial of
the schedule once per task: correctness inputs, hardening inputs, and the inputs of the timed
calls whose outputs will be re-checked. Its outputs come back to the judge and stay there; no
candidate process ever holds them. On a GPU it is then timed exactly like a candidate.
"""
from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Callable

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.cuda_ipc import SharedMappings
from kernelzero.eval.gpu_lock import gpu_lock_for
from kernelzero.eval.sandbox import SandboxWorker, WorkerDied, WorkerTimeout
from kernelzero.eval.schedule import Schedule, Trial
from kernelzero.eval.tensorio import DecodeError, TensorOut, decode
from kernelzero.eval.verdict import Timing


@dataclass
class TrialResult:
    outputs: object                 # decoded (TensorOut / scalar / sequence)
    digest: float                   # checksum of the inputs the worker generated
    mutated: list[int]              # inputs the module changed in place
    inputs_after: object = None     # decoded values of the mutated inputs after the call
    inputs: object = None           # decoded pristine inputs (probe only)


@dataclass
class ReferenceRun:
    ok: bool
    reason: str = ""
    trials: dict[Trial, TrialResult] = field(default_factory=dict)
    timed: dict[int, TrialResult] = field(default_factory=dict)  # checked timed-call index -> result
    timing: Timing | None = None
    compile_timing: Timing | None = None
    gpu: str | None = None
    l2_bytes: int | None = None
    peak_mem_bytes: int | None = None
    forward_peak_bytes: int | None = None  # one forward's inputs + its peak allocations (cuda)
    log_tail: str = ""
    schedule: Schedule | None = None
    io_bytes: int | None = None     # input + output bytes of one call (for the roofline bound)
    time_wall_ms_per_call: float | None = None  # judge-side wall clock of its timed loop, per call
    phases_s: dict = field(default_factory=dict)  # where the judge's wall time went (diagnostics)
    timing_details: dict = field(default_factory=dict)  # how its timed loop ran (timing_details())


def _finite(obj) -> bool:
    import torch
    if isinstance(obj, TensorOut):
        t = obj.tensor
        return not (t.is_floating_point() or t.is_complex()) or bool(torch.isfinite(t).all())
    if isinstance(obj, (tuple, list)):
        return all(_finite(x) for x in obj)
    if isinstance(obj, float):
        return obj == obj and abs(obj) != float("inf")
    return True


def decode_trials(worker: SandboxWorker, reply: dict, want_inputs: bool = False,
                  mapped: SharedMappings | None = None) -> list[TrialResult]:
    """Every trial's outputs (and inputs where sent), in the judge's own memory. Each shared
    allocation is mapped once for the whole reply and unmapped before this returns, under the
    caller's GPU lock (`mapped`, if given, counts the time spent mapping)."""
    out = []
    mapped = SharedMappings() if mapped is None else mapped

    def read(item):
        return decode(item["desc"], worker.path_of(item["file"]), mapped=mapped)
    for t in reply["trials"]:
        res = TrialResult(outputs=read(t["outputs"]), digest=float(t.get("input_digest", 0.0)),
                          mutated=[int(i) for i in t.get("mutated", [])])
        if "inputs_after" in t:
            res.inputs_after = read(t["inputs_after"])
        if want_inputs and "inputs" in t:
            res.inputs = read(t["inputs"])
        out.append(res)
    mapped.clear()
    return out


def time_module(worker: SandboxWorker, cfg: EvalConfig, schedule: Schedule, l2_bytes: int | None,
                compile_: bool = False, checked: list[int] | None = None,
                late_counts: bool = True) -> dict:
    """Send the `time` command (caller holds the GPU lock). Returns the raw reply.
    `late_counts` false (a reference): the times are the calls' own even when work outlived them
    (timer.py: an upper bound of a reference's time would inflate the speedups against it)."""
    flush = max(4 * (l2_bytes or 50 * 2**20), 64 * 2**20)
    msg = {"op": "time", "seeds": schedule.timing_seeds, "checked": checked or [],
           "warmup": cfg.timing_warmup,
           "warmup_ms": cfg.timing_warmup_ms, "min_trials": cfg.timing_min_trials,
           "max_trials": cfg.timing_max_trials, "rel_spread": cfg.timing_rel_spread,
           "budget_s": cfg.timing_budget_s, "flush_bytes": flush, "compile": compile_,
           "late_counts": late_counts}
    timeout = cfg.run_timeout_s + cfg.timing_budget_s + (cfg.load_timeout_s if compile_ else 0)
    return worker.request(msg, timeout)


def time_settled(worker: SandboxWorker, cfg: EvalConfig, schedule: Schedule,
                 l2_bytes: int | None, checked: list[int] | None = None,
                 late_counts: bool = True) -> tuple[dict, float]:
    """`time_module`, and once more when its loop saw work outlive the calls
    (`work_after_stream`): GPU work of another process during the loop (the GPU time-slices
    between processes, milliseconds at a time) reads exactly like that, while a module that
    really leaves work behind does so again, and is judged on the second loop. Returns the reply
    kept (`retimed` when it is the second) and the judge's wall-clock ms of that loop."""
    t0 = time.perf_counter()
    reply = time_module(worker, cfg, schedule, l2_bytes, checked=checked, late_counts=late_counts)
    if reply.get("ok") and reply.get("work_after_stream"):
        t0 = time.perf_counter()
        reply = {**time_module(worker, cfg, schedule, l2_bytes, checked=checked,
                               late_counts=late_counts), "retimed": True}
    return reply, (time.perf_counter() - t0) * 1e3


def run_reference(task_source: str, cfg: EvalConfig, schedule: Schedule, take_worker,
                  time_it: bool, init_seed: int = 0, want_inputs: bool = False,
                  extra_trials: list[Trial] | None = None,
                  publish: Callable[[ReferenceRun], None] | None = None) -> ReferenceRun:
    """`take_worker(name)` returns a started SandboxWorker (see spares.SparePool.take).
    `publish(run)` is called once the outputs are in `run`, before it is timed (see
    reference_cache.py); the run it gets is the one returned, unless timing then fails."""
    trials = list(schedule.correctness) + [Trial(s) for s in
                                           (schedule.timing_seeds[i] for i in schedule.checked)]
    trials += extra_trials or []
    phases: dict[str, float] = {}
    t0 = time.perf_counter()
    try:
        w = take_worker("ref")
    except (WorkerDied, WorkerTimeout) as e:
        return ReferenceRun(False, f"could not start a sandbox worker: {e}")
    phases["take_s"] = time.perf_counter() - t0
    with w.released():
        try:
            task_path = os.path.join(w.dir, "reference.py")  # the worker's own copy
            with open(task_path, "w", encoding="utf-8") as dst:
                dst.write(task_source)
            info = w.request({"op": "load", "role": "reference", "task_path": task_path,
                              "device": cfg.device, "transfer": cfg.transfer_mode,
                              "init_seed": init_seed, **cfg.load_options()},
                             cfg.load_timeout_s)
            if not info.get("ok"):
                what = "build" if info.get("phase") == "init" else "load"  # construct: "init"
                return ReferenceRun(False, f"the reference failed to {what}: {info.get('reason')}",
                                    log_tail=w.log_tail())
            phases["load_s"] = time.perf_counter() - t0 - phases["take_s"]
            if info.get("reserved_bytes"):  # reserve.py (a size, not a time)
                phases["reserved_mb"] = info["reserved_bytes"] / 2**20
            t1 = time.perf_counter()
            with gpu_lock_for(cfg.device, shared=True, what="ref_run"):  # a GPU, not a quiet one
                phases["gpu_wait_s"] = time.perf_counter() - t1
                t1 = time.perf_counter()
                info = w.request({"op": "build", "init_seed": init_seed}, cfg.load_timeout_s)
                if not info.get("ok"):
                    return ReferenceRun(False, f"the reference failed to build: {info.get('reason')}",
                                        log_tail=w.log_tail())
                run = ReferenceRun(True, gpu=info.get("gpu"), l2_bytes=info.get("l2_bytes"),
                                   schedule=schedule)
                phases["build_s"] = time.perf_counter() - t1
                reply = w.request({"op": "run", "trials": [t.as_dict() for t in trials],
                                   "return_inputs": want_inputs}, cfg.run_timeout_s * 2)
                if not reply.get("ok"):
                    return ReferenceRun(False, f"the reference failed to run: {reply.get('reason')}",
                                        log_tail=w.log_tail())
                t2 = time.perf_counter()
                mapped = SharedMappings()
                results = decode_trials(w, reply, want_inputs, mapped)
                phases["build_run_s"] = time.perf_counter() - t1
                phases["decode_s"] = time.perf_counter() - t2  # the judge's copies of outputs
                phases["decode_map_s"] = mapped.map_s  # of which mapping worker memory
                phases.update(worker_breakdown(reply))
            run.phases_s = phases
            run.peak_mem_bytes = reply.get("peak_mem_bytes")
            run.forward_peak_bytes = reply.get("forward_peak_bytes")
            if results:
                run.io_bytes = int(reply["trials"][0].get("input_bytes", 0)) + \
                    _nbytes(results[0].outputs)
            n_corr = len(schedule.correctness)
            for t, r in zip(trials[:n_corr], results[:n_corr]):
                # Hardening inputs only count where the reference itself stays finite.
                if t.dist == "task" or _finite(r.outputs):
                    run.trials[t] = r
            for idx, r in zip(schedule.checked, results[n_corr:n_corr + len(schedule.checked)]):
                run.timed[idx] = r
            for t, r in zip(trials[n_corr + len(schedule.checked):],
                            results[n_corr + len(schedule.checked):]):
                run.trials[t] = r
            if publish is not None:
                publish(run)
            if time_it:
                t1 = time.perf_counter()
                with gpu_lock_for(cfg.device, what="ref_time"):  # timing: the GPU to itself
                    t0 = time.perf_counter()
                    phases["timing_wait_s"] = t0 - t1
                    reply, loop_wall_ms = time_settled(w, cfg, schedule, run.l2_bytes,
                                                       late_counts=False)
                    run.timing, run.timing_details = _timing(reply), timing_details(reply)
                    if run.timing:
                        run.time_wall_ms_per_call = loop_wall_ms / timed_calls(reply, run.timing)
                    if cfg.compile_baseline:
                        run.compile_timing = _timing(time_module(w, cfg, schedule, run.l2_bytes,
                                                                 compile_=True, late_counts=False))
                    phases["timing_s"] = time.perf_counter() - t0
            run.log_tail = w.log_tail()
            return run
        except WorkerTimeout:
            return ReferenceRun(False, "the reference did not finish within its time limit",
                                log_tail=w.log_tail())
        except WorkerDied as e:
            return ReferenceRun(False, f"the reference crashed: {e}", log_tail=w.log_tail())
        except (DecodeError, KeyError, TypeError, ValueError) as e:
            return ReferenceRun(False, f"the reference returned unusable outputs: {e}",
                                log_tail=w.log_tail())


def _nbytes(obj) -> int:
    if isinstance(obj, TensorOut):
        return obj.tensor.numel() * obj.tensor.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(x) for x in obj)
    return 0


DETAIL_KEYS = ("warmup_calls", "launch_lead_ms", "spin_ms_median", "spun_calls", "synced_calls",
               "between_calls_ms", "flush_ms", "l2_reset_ms", "launch_bound_calls",
               "same_address_calls", "allocator_calls", "loop_ms", "command_ms",
               "overhead_ms_per_call", "sync_latency_ms", "after_stream_gap_ms", "disturbed_syncs",
               "run_delay_ms_max", "host_busy", "retimed")


def worker_breakdown(reply: dict) -> dict:
    """Where the worker says its correctness trials spent their time (diagnostics only: the
    worker's word, never used for a verdict)."""
    try:
        trials = reply.get("trials") or []
        parts = {f"run_{k}_s": sum(float(t.get(f"{k}_ms", 0.0)) for t in trials) / 1e3
                 for k in ("inputs", "draw", "wall", "mutation_check")}
        if trials:
            parts["run_first_trial_s"] = sum(float(trials[0].get(f"{k}_ms", 0.0)) for k in
                                             ("inputs", "wall", "mutation_check")) / 1e3
        return parts
    except (TypeError, ValueError, AttributeError):
        return {}


def timed_calls(reply: dict, timing: Timing) -> int:
    """How many calls the timed loop made: the times can be fewer (only the synchronised calls
    count when work outlived its call)."""
    try:
        return max(timing.n, int(reply.get("calls", 0)))
    except (TypeError, ValueError):
        return timing.n


def timing_details(reply: dict) -> dict:
    """The diagnostics of a `time` reply (the worker's word, and the judge's `retimed`: shown,
    never judged on)."""
    return {k: reply[k] for k in DETAIL_KEYS if k in reply}


def _timing(reply: dict) -> Timing | None:
    if not reply.get("ok") or not reply.get("times_ms"):
        return None
    return Timing.from_samples([float(x) for x in reply["times_ms"]])
