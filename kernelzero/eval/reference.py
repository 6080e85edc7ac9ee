"""Running the reference module in its own clean sandboxed process.

The reference (which the Proposer may have written, so it is untrusted too) runs every trial of
the schedule once per task: correctness inputs, hardening inputs, and the inputs of the timed
calls whose outputs will be re-checked. Its outputs come back to the judge and stay there; no
candidate process ever holds them. On a GPU it is then timed exactly like a candidate.

A task whose outputs are too large to keep (memory_plan.MemoryPlan.streamed: KernelBench's
reach 8 GiB a call, 12 trials a task) is streamed: the run above keeps only what the outputs say
about the task (their size and finiteness, the inputs' checksums and mutations) and its timing,
and each judgement runs the reference again in a worker of its own (`StreamedReference`,
streamed_reference.py), one trial at a time beside its candidate, comparing each trial's outputs
in place before the next.

Here: `run_reference` and its steps (load, admit, build and run, record, time, keep). A trial's
results and how they are decoded: trial_results.py; the `time` command: time_command.py.
"""
from __future__ import annotations

import contextlib
import os
import time
import weakref
from dataclasses import dataclass, field
from typing import Callable

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.transport.cuda_ipc import SharedMappings
from kernelzero.eval.device.footprint import Footprint
from kernelzero.eval.device.gpu_lock import gpu_lock_for
from kernelzero.eval.device.memory_gate import Grant
from kernelzero.eval.device.memory_plan import MemoryPlan
from kernelzero.eval.sandbox.channel import WorkerDied, WorkerTimeout
from kernelzero.eval.sandbox.sandbox import SandboxWorker
from kernelzero.eval.schedule import Schedule, Trial
from kernelzero.eval.time_command import (_timing, time_module, time_settled, timed_calls,
                                          timing_details)
from kernelzero.eval.transport.tensorio import DecodeError
from kernelzero.eval.trial_results import (TrialResult, _nbytes, _summary, decode_trials,
                                           worker_breakdown)
from kernelzero.eval.verdict import Timing


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
    footprint: Footprint = field(default_factory=Footprint)  # one call's memory (footprint.py)
    streamed: bool = False  # outputs not kept: each judgement runs the reference beside it


def run_reference(task_source: str, cfg: EvalConfig, schedule: Schedule, take_worker,
                  time_it: bool, init_seed: int = 0, want_inputs: bool = False,
                  extra_trials: list[Trial] | None = None,
                  publish: Callable[[ReferenceRun], None] | None = None,
                  plan: MemoryPlan | None = None, cached: bool = True) -> ReferenceRun:
    """`take_worker(name)` returns a started SandboxWorker (see spares.SparePool.take).
    `publish(run)` is called once the outputs are in `run`, before it is timed (see
    reference_cache.py); the run it gets is the one returned, unless timing then fails.
    `plan`: the run is admitted for its footprint before it touches the device, and a task
    whose outputs are too large to keep is streamed (the run keeps what each trial's outputs
    say about the task, not the outputs: `ReferenceRun.streamed`). `cached`: the judge keeps
    the run (the reference cache); a probe's (false) outputs go to its caller, never streamed."""
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
    # `unless_kept` releases the run's memory grant, unless the run keeps it (its outputs)
    with w.released(), contextlib.ExitStack() as unless_kept:
        try:
            info = load_module(w, task_source, cfg, init_seed,
                               footprint=plan is not None and plan.measures())
            if not info.get("ok"):
                what = "build" if info.get("phase") == "init" else "load"  # construct: "init"
                return ReferenceRun(False, f"the reference failed to {what}: {info.get('reason')}",
                                    log_tail=w.log_tail())
            phases["load_s"] = time.perf_counter() - t0 - phases["take_s"]
            fp = Footprint.from_dict(info.get("footprint"))
            streamed = plan is not None and cached and plan.streamed(fp, len(trials))
            grant = None
            if plan is not None:
                grant = unless_kept.enter_context(_admit(plan, fp, len(trials), streamed, phases))
                reserve(w, cfg, plan.reserve_bytes(fp, grant.nbytes), phases)
            run, results = _build_and_run(w, cfg, schedule, trials, fp, streamed, plan,
                                          init_seed, want_inputs, phases)
            if not run.ok:
                return run
            if publish is not None:
                publish(run)
            if time_it:
                _time_reference(w, cfg, run, phases)
            run.log_tail = w.log_tail()
            if grant is not None:  # what stays: the outputs the judge keeps, held with the run
                _keep_with(run, grant, w, 0 if streamed or not cached
                           else fp.stored_bytes(len(results)))
                unless_kept.pop_all()
            return run
        except (WorkerTimeout, WorkerDied, DecodeError, KeyError, TypeError, ValueError) as e:
            return _failed_run(e, w)


def _admit(plan: MemoryPlan, fp: Footprint, outputs: int, streamed: bool, phases: dict) -> Grant:
    """The run's memory grant from the plan (waited for: `memory_wait_s`)."""
    t1 = time.perf_counter()
    grant = plan.admit(plan.reference_bytes(fp, outputs, streamed), "reference")
    phases["memory_wait_s"] = time.perf_counter() - t1
    return grant


def _build_and_run(w: SandboxWorker, cfg: EvalConfig, schedule: Schedule, trials: list[Trial],
                   fp: Footprint, streamed: bool, plan: MemoryPlan | None, init_seed: int,
                   want_inputs: bool, phases: dict) -> tuple[ReferenceRun, list[TrialResult]]:
    """Under the GPU lock (shared): build the reference on the device and run every trial, as
    many a request as the plan allows. The run with its trials' results filled in, and those
    results in trial order; or a failed run (and no results)."""
    slots = 1 if streamed else (plan.slots(fp, len(trials)) if plan else len(trials))
    in_place = plan.in_place_bytes() if plan is not None else 0
    t1 = time.perf_counter()
    with gpu_lock_for(cfg.device, shared=True, what="ref_run"):  # a GPU, not a quiet one
        phases["gpu_wait_s"] = time.perf_counter() - t1
        t1 = time.perf_counter()
        info = w.request({"op": "build", "init_seed": init_seed}, cfg.load_timeout_s)
        if not info.get("ok"):
            return ReferenceRun(False, f"the reference failed to build: {info.get('reason')}",
                                log_tail=w.log_tail()), []
        run = ReferenceRun(True, gpu=info.get("gpu"), l2_bytes=info.get("l2_bytes"),
                           schedule=schedule, footprint=fp, streamed=streamed)
        phases["build_s"] = time.perf_counter() - t1
        results, replies = [], []
        for at in range(0, len(trials), slots):
            reply = w.request({"op": "run", "reuse": False, "return_inputs": want_inputs,
                               "trials": [t.as_dict() for t in trials[at:at + slots]],
                               "share_in_place_bytes": in_place, "trim": streamed},
                              cfg.run_timeout_s * 2)
            if not reply.get("ok"):
                return ReferenceRun(False, "the reference failed to run: "
                                    + reference_failure(reply, fp, plan),
                                    log_tail=w.log_tail(), footprint=fp), []
            results += _decode_part(w, reply, want_inputs, streamed, phases)
            replies.append(reply)
        phases["build_run_s"] = time.perf_counter() - t1
        phases.update(worker_breakdown({"trials": [t for r in replies for t in r["trials"]]}))
    run.phases_s = phases
    _record(run, trials, results, replies)
    return run, results


def _decode_part(w: SandboxWorker, reply: dict, want_inputs: bool, streamed: bool,
                 phases: dict) -> list[TrialResult]:
    """One `run` reply's trials, decoded (for a streamed task, only what the outputs say)."""
    t2 = time.perf_counter()
    mapped = SharedMappings(copy=not streamed)
    part = decode_trials(w, reply, want_inputs, mapped)
    if streamed:  # what the outputs say about the task; then they go
        part = [_summary(r) for r in part]
    mapped.clear()
    phases["decode_s"] = phases.get("decode_s", 0.0) + time.perf_counter() - t2
    phases["decode_map_s"] = phases.get("decode_map_s", 0.0) + mapped.map_s
    return part


def _record(run: ReferenceRun, trials: list[Trial], results: list[TrialResult],
            replies: list[dict]) -> None:
    """The results into `run`: correctness and hardening trials (a hardening trial only where
    the reference stays finite), the checked timed calls, then any extra trials; with the
    run's peak memory, one call's I/O bytes and its measured footprint."""
    schedule, fp = run.schedule, run.footprint
    run.peak_mem_bytes = max((r.get("peak_mem_bytes") or 0 for r in replies), default=0) or None
    run.forward_peak_bytes = max((r.get("forward_peak_bytes") or 0 for r in replies),
                                 default=0) or None
    if results:
        out_bytes = _nbytes(results[0].outputs) if not run.streamed else results[0].out_bytes
        run.io_bytes = int(replies[0]["trials"][0].get("input_bytes", 0)) + out_bytes
        run.footprint = fp.with_measured(run.forward_peak_bytes, out_bytes)
    n_corr, n_checked = len(schedule.correctness), len(schedule.checked)
    for t, r in zip(trials[:n_corr], results[:n_corr]):
        # Hardening inputs only count where the reference itself stays finite.
        if t.dist == "task" or r.finite:
            run.trials[t] = r
    for idx, r in zip(schedule.checked, results[n_corr:n_corr + n_checked]):
        run.timed[idx] = r
    for t, r in zip(trials[n_corr + n_checked:], results[n_corr + n_checked:]):
        run.trials[t] = r


def _time_reference(w: SandboxWorker, cfg: EvalConfig, run: ReferenceRun, phases: dict) -> None:
    """Time the reference with the GPU to itself (its calls' own times: `late_counts` false),
    and torch.compile's baseline where asked."""
    t1 = time.perf_counter()
    with gpu_lock_for(cfg.device, what="ref_time"):  # timing: the GPU to itself
        t0 = time.perf_counter()
        phases["timing_wait_s"] = t0 - t1
        reply, loop_wall_ms = time_settled(w, cfg, run.schedule, run.l2_bytes, late_counts=False)
        run.timing, run.timing_details = _timing(reply), timing_details(reply)
        if run.timing:
            run.time_wall_ms_per_call = loop_wall_ms / timed_calls(reply, run.timing)
        if cfg.compile_baseline:
            run.compile_timing = _timing(time_module(w, cfg, run.schedule, run.l2_bytes,
                                                     compile_=True, late_counts=False))
        phases["timing_s"] = time.perf_counter() - t0


def _keep_with(run: ReferenceRun, grant: Grant, w: SandboxWorker, kept_bytes: int) -> None:
    """Shrink the run's grant to the outputs the judge keeps, released when the run goes (a
    large one only once the worker's memory is back)."""
    if grant.nbytes >= WAIT_EXIT_BYTES:
        w.close(wait=True)  # its memory back before the grant shrinks
    grant.keep(kept_bytes)
    weakref.finalize(run, grant.release)


def _failed_run(e: Exception, w: SandboxWorker) -> ReferenceRun:
    """The run a worker's failure ends in (a timeout, a crash, or outputs that cannot be read)."""
    if isinstance(e, WorkerTimeout):
        return ReferenceRun(False, "the reference did not finish within its time limit",
                            log_tail=w.log_tail())
    if isinstance(e, WorkerDied):
        return ReferenceRun(False, f"the reference crashed: {e}", log_tail=w.log_tail())
    return ReferenceRun(False, f"the reference returned unusable outputs: {e}",
                        log_tail=w.log_tail())


def load_module(w: SandboxWorker, task_source: str, cfg: EvalConfig, init_seed: int,
                footprint: bool) -> dict:
    """Write the worker's own copy of the reference and `load` it (constructed on the CPU under
    `init_seed`; with `footprint`, measured: footprint.py)."""
    task_path = os.path.join(w.dir, "reference.py")
    with open(task_path, "w", encoding="utf-8") as dst:
        dst.write(task_source)
    return w.request({"op": "load", "role": "reference", "task_path": task_path,
                      "device": cfg.device, "transfer": cfg.transfer_mode, "init_seed": init_seed,
                      "footprint": footprint, **cfg.load_options()}, cfg.load_timeout_s)


def reserve(w: SandboxWorker, cfg: EvalConfig, nbytes: int, phases: dict) -> None:
    """The worker takes `nbytes` from the driver now (reserve.py), outside the GPU lock."""
    if nbytes <= 0:
        return
    info = w.request({"op": "reserve", "bytes": int(nbytes)}, cfg.load_timeout_s)
    if info.get("reserved_bytes"):
        phases["reserved_mb"] = info["reserved_bytes"] / 2**20


def reference_failure(reply: dict, fp: Footprint, plan: "MemoryPlan | None") -> str:
    """Why a reference's `run` failed; out of memory, with what it needed and what it had."""
    reason = str(reply.get("reason"))
    if "out of memory" not in reason.lower() or plan is None:
        return reason
    return f"{reason} ({plan.describe_need(fp, reply.get('peak_mem_bytes'))})"


WAIT_EXIT_BYTES = 8 << 30  # a worker granted this much is gone before its grant is let go
# (a CUDA context's teardown takes a few hundred ms; memory freed later than the grant would let
# the next large judgement in too early)
