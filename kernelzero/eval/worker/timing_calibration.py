"""What the timed loop measures before its first timed call (timer.TimedLoop.calibrate): the
warm-up calls and the host time each forward takes to launch, the launch lead that sets a call's
spin (`lead_ms_for`, raised mid-loop for a launch-bound call too), the GPU's spin rate, the time
of one L2 flush, and the latency of a device-wide synchronize.

Runs inside the worker, on the captured primitives (timing_primitives.py). Does not cover the
timed calls (timer.py) nor the rules the loop decides by (timing_rules.py); the synchronize
latency only borrows their notion of a disturbed sample.
"""
from __future__ import annotations

import statistics

from kernelzero.eval.worker.timing_rules import clean_or_all

LEAD_MAX_MS = 2.0


def warm_up(worker, model, seeds, warm_n: int, warm_ms: float) -> tuple[list[float], int]:
    """Untimed calls, by count and by time: the first calls after an idle spell run at idle
    clocks, and a fixed count of a fast kernel ends before the clocks are up. They follow the
    timed calls' own pattern (fresh inputs each call, the last ones dropped first, no
    synchronize between calls except every 8th, so the host clock tracks GPU time), so the
    caching allocator already holds every block the timed calls need (a cudaMalloc, or a
    cudaFree that synchronises, inside a timed call would be timed). Returns the host time
    each forward took to launch, and the number of calls."""
    torch, prim = worker.torch, worker.primitives
    t_warm, n, host_ms, args = prim["clock"](), 0, [], None
    with torch.no_grad():
        while n < warm_n or (prim["clock"]() - t_warm < warm_ms / 1e3 and n < 10_000):
            args = None  # dropped before the next are drawn: the same blocks come back
            args = worker.make_inputs(int(seeds[n % len(seeds)]))
            t_call = prim["clock"]()
            model(*args)
            host_ms.append(1e3 * (prim["clock"]() - t_call))
            n += 1
            if n % 8 == 0:
                prim["sync"]()
    return host_ms, n


def lead_ms_for(host_ms: list[float]) -> float:
    """How long the GPU spins before a timed call that nothing queued covers: about twice the
    host time the module's forward takes to launch (measured in the warm-up), 20 us to
    LEAD_MAX_MS; longer for the rest of the calls whenever a call turns out launch-bound.

    Without it the GPU may reach the start event before the host has launched the call's first
    kernel, and the launch latency is timed as if it were GPU work: for a Python launcher
    (Triton) on a busy host, tens to hundreds of microseconds, as much as a fast kernel itself.
    A forward that synchronises the host pays for it anyway (its events wait for the spin)."""
    if not host_ms:
        return 0.0
    return min(LEAD_MAX_MS, max(0.02, 2.0 * statistics.median(host_ms) + 0.02))


def spin_cycles_per_ms(prim, stream) -> float:
    """How many `gpu_sleep` cycles make a millisecond on this GPU now (0: no spin available)."""
    if prim["gpu_sleep"] is None:
        return 0.0
    start, end = prim["Event"](enable_timing=True), prim["Event"](enable_timing=True)
    probe = 1_000_000
    prim["record"](start, stream)
    prim["gpu_sleep"](probe)
    prim["record"](end, stream)
    prim["ev_sync"](end)
    ms = prim["elapsed"](start, end)
    return probe / ms if ms > 0 else 0.0


def flush_gpu_ms(prim, stream, flush, start, end, n: int = 3) -> float:
    """GPU time of one L2 flush (fastest of n): the part of the launch lead it provides."""
    best = float("inf")
    for _ in range(n):
        prim["record"](start, stream)
        flush.zero_()
        prim["record"](end, stream)
        prim["ev_sync"](end)
        best = min(best, prim["elapsed"](start, end))
    return max(0.0, best)


def sync_latency_ms(prim, stream, flush, end, after, n: int = 11) -> float:
    """Median gap between an event recorded behind a short piece of work (an L2 flush) and one
    recorded once a device-wide synchronize has waited for it: what the third event of a timed
    call adds when the call left no work behind (the host waits on a busy GPU, as in the loop).
    The median is of the samples in which the host thread did not wait for a CPU, when 3 or more
    did not (a busy host's others hold the time it waited)."""
    gaps, waits = [], []
    for _ in range(n):
        flush.zero_()
        prim["record"](end, stream)
        delay = prim["run_delay"]()
        prim["sync"]()
        prim["record"](after, stream)
        waits.append(prim["run_delay"]() - delay)
        prim["ev_sync"](after)
        gaps.append(prim["elapsed"](end, after))
    return statistics.median(clean_or_all(gaps, waits, 3))
