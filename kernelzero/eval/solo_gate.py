"""SoloGate: judgements run side by side, except a retry that must run alone.

A judgement that runs out of GPU memory while others share the GPU may have failed because of
them (their inputs, outputs and cached blocks), not because of what it judges. Its verdict would
blame the candidate (or the task) for its neighbours: it is judged again, alone. `alone()` waits
until the judgements in flight have finished and holds new ones back until it is done (so a
steady stream of new judgements cannot starve it).

Covers the judgements of one evaluator (threads of one process: the local pool, a Ray actor).
Other processes on the same GPU are not held back.
"""
from __future__ import annotations

import contextlib
import threading


class SoloGate:
    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._running = 0      # judgements in flight
        self._started = 0      # judgements ever started (to tell whether others overlapped)
        self._solo_waiting = 0
        self._solo = False

    @contextlib.contextmanager
    def shared(self):
        """One ordinary judgement; yields a function telling whether another ran beside it."""
        with self._cond:
            while self._solo or self._solo_waiting:
                self._cond.wait()
            others_at_start = self._running
            self._running += 1
            self._started += 1
            started_before = self._started
        try:
            yield lambda: others_at_start > 0 or self._started != started_before
        finally:
            with self._cond:
                self._running -= 1
                self._cond.notify_all()

    @contextlib.contextmanager
    def alone(self):
        """Run with no other judgement of this gate in flight."""
        with self._cond:
            self._solo_waiting += 1
            try:
                while self._running or self._solo:
                    self._cond.wait()
            finally:
                self._solo_waiting -= 1
            self._solo = True
        try:
            yield
        finally:
            with self._cond:
                self._solo = False
                self._cond.notify_all()


def out_of_memory(status: str, reason: str) -> bool:
    """A verdict that says the GPU ran out of memory (what a neighbour can cause): in the
    candidate's or the reference's worker, or in the judge while it opened the outputs."""
    r = reason.lower()
    oom = ("outofmemoryerror" in r or "out of memory" in r) and "killed; out of memory?" not in r
    judge_side = status == "incorrect" and r.startswith("the candidate's outputs could not be read")
    return oom and (status in ("runtime_error", "invalid_task") or judge_side)
