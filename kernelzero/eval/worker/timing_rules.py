"""The rules the timed loop (timer.py) decides by, on what it has recorded: which calls it
synchronises (`sync_chance`), when it may stop (`spread_ok`, after MIN_SYNCED synchronised
calls, or SETTLE_SYNCED while their gaps say work outlived the calls), which synchronizes a busy
host disturbed (`is_undisturbed`, `clean_or_all`), and whether work outlived the calls (`is_late`,
judged on the `evidence_calls`). Timer.py's docstring says why each rule is what it is.

Pure functions of numbers: recording the events and reading the clocks is timer.py's, the
measurements before the loop timing_calibration.py's.
"""
from __future__ import annotations

import statistics

SYNC_EVERY = 8    # on average one timed call in this many is followed by a device-wide synchronize
MIN_SYNCED = 6    # ... and the loop does not stop before this many unchecked calls were,
SETTLE_SYNCED = 12  # or this many while their gaps say work outlived the call (a median of a
                    # few gaps can be off: before declaring it, the loop looks at more of them)
LATE_MS = 0.06    # work after the call counts once the median gap exceeds the latency by this
                  # (0.03 was too thin: honest loops under host load showed gaps 0.03-0.04 ms
                  # beyond the latency on the H200, and their times then counted those gaps)
RUN_DELAY_MS = 0.02  # a synchronize whose host thread waited longer for a CPU is disturbed


def evidence_calls(sampled: dict[int, tuple[float, float]]) -> list[int]:
    """The sampled calls to judge late work on: those whose synchronize the host thread waited
    out without waiting for a CPU, when there are MIN_SYNCED of them; otherwise all (a host too
    busy to tell, or a module that keeps its CPUs busy, is judged as if every gap were clean)."""
    calls = sorted(sampled)
    return clean_or_all(calls, [sampled[k][1] for k in calls], MIN_SYNCED)


def is_undisturbed(wait_ms: float) -> bool:
    return wait_ms <= RUN_DELAY_MS


def clean_or_all(items: list, waits: list[float], at_least: int) -> list:
    """The items whose host thread did not wait for a CPU, when at least `at_least` did not;
    otherwise all of them (the loop's evidence, and the latency calibration's samples)."""
    clean = [x for x, w in zip(items, waits) if is_undisturbed(w)]
    return clean if len(clean) >= at_least else list(items)


def sync_gaps(sampled: dict[int, tuple[float, float]], calls: list[int]) -> list[float]:
    return [sampled[k][0] for k in calls]


def sync_chance(p_sync: float, sampled: dict[int, tuple[float, float]], left: int) -> float:
    """The chance this call is synchronised: p_sync, raised once a synchronize was disturbed so
    that the calls left are likely to hold the undisturbed ones still missing (half as many
    tries again as the share of undisturbed ones so far says are needed)."""
    clean = sum(is_undisturbed(w) for _, w in sampled.values())
    missing = MIN_SYNCED - clean
    if missing <= 0 or clean == len(sampled):
        return p_sync
    share = (clean + 1) / (len(sampled) + 2)
    return max(p_sync, min(1.0, 1.5 * missing / share / max(1, left)))


def is_late(gaps: list[float], times: list[float], latency: float) -> bool:
    """Whether work outlived the calls: the median gap from a synchronised call's end event to
    the event after the synchronize exceeds the synchronize latency by LATE_MS or 5%."""
    return bool(gaps) and statistics.median(gaps) > \
        latency + max(LATE_MS, 0.05 * statistics.median(times))


def spread_ok(times: list[float], rel: float) -> bool:
    """The stopping rule: the inter-quartile range is within `rel` of the median."""
    q = statistics.quantiles(times, n=4, method="inclusive")
    med = statistics.median(times)
    return med > 0 and (q[2] - q[0]) / med <= rel
