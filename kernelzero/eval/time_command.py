"""The judge's side of a worker's `time` command (the loop itself: worker/timer.py): sending it
(`time_module`, the caller holding the GPU lock), sending it once more when its loop saw work
outlive the calls (`time_settled`), and reading the reply: the `Timing` of the times that count
(`_timing`), how many calls the loop made (`timed_calls`), and its diagnostics (`timing_details`:
shown, never judged on).

For the reference (reference.py) and a candidate (judgement.py). Does not cover ruling on the
times (rulings.py).
"""
from __future__ import annotations

import time

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.sandbox.sandbox import SandboxWorker
from kernelzero.eval.schedule import Schedule
from kernelzero.eval.verdict import Timing


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


DETAIL_KEYS = ("warmup_calls", "launch_lead_ms", "spin_ms_median", "spun_calls", "synced_calls",
               "between_calls_ms", "flush_ms", "l2_reset_ms", "launch_bound_calls",
               "same_address_calls", "allocator_calls", "loop_ms", "command_ms",
               "overhead_ms_per_call", "sync_latency_ms", "after_stream_gap_ms", "disturbed_syncs",
               "run_delay_ms_max", "host_busy", "retimed")


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
