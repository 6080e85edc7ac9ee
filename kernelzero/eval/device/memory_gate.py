"""MemoryGate: who may hold device memory when, in one evaluator.

Two rules.

Admission: each judgement (and each reference run) asks for the device memory it will need at
its peak (footprint.py) before it touches the device, and waits until that fits in the budget
beside what the others were granted. Requests are served in order, so a large one is not
starved by a stream of small ones; a request larger than the whole budget is granted once no
other run holds memory (it may still fit: footprints are estimates). Memory the evaluator keeps
between judgements (cached reference outputs) is held by kept grants, and `reclaim` (the
reference cache's) is asked to drop what no pending judgement needs whenever a request waits.

Alone: a judgement that ran out of memory is judged again with nothing else in flight
(`alone()` waits until every judgement and every run's grant has ended, and holds new ones
back until it is done, so a steady stream of new work cannot starve it; the caller then
releases kept memory, spares and caches). Work started on its behalf (its task's reference,
computed in another thread) passes: the retry's context carries a ticket, which threads
started with that context (`contextvars.copy_context()`) inherit.

Covers the judgements of one evaluator (threads of one process: the local pool, a Ray actor).
Other processes on the same GPU are not planned for; a judgement that runs out of memory because
of them is judged again alone, and its verdict says what the GPU had free.
"""
from __future__ import annotations

import contextlib
import contextvars
import itertools
import threading
from typing import Callable

_TICKET: contextvars.ContextVar[int | None] = contextvars.ContextVar("kz_solo_ticket",
                                                                     default=None)


class Grant:
    """Memory granted to one holder until `release` (idempotent). A grant is transient (a run
    in progress) until `keep` turns part of it into memory kept between judgements."""

    def __init__(self, gate: "MemoryGate", nbytes: int, what: str):
        self.gate, self.nbytes, self.what = gate, nbytes, what
        self.kept = False
        self._released = False

    def keep(self, nbytes: int) -> "Grant":
        """Hold only `nbytes` from now on, as kept memory (cached outputs)."""
        self.gate._keep(self, max(0, int(nbytes)))
        return self

    def release(self) -> None:
        self.gate._release(self)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release()


class MemoryGate:
    def __init__(self, capacity: int | None = None,
                 reclaim: Callable[[bool], None] | None = None) -> None:
        """capacity: bytes of device memory to plan into (None: no limit, only `alone`).
        reclaim(force): called (without the gate's lock) when a request does not fit, to
        release kept memory that nothing pending needs (force: that no judgement in flight
        holds, pending or not: nothing in flight will free any)."""
        self.capacity = capacity
        self.reclaim = reclaim
        self._cond = threading.Condition()
        self._running = 0      # judgements in flight
        self._started = 0      # judgements ever started (to tell whether others overlapped)
        self._granted = 0      # bytes held by grants
        self._transient = 0    # grants held by runs in progress (not kept memory)
        self._queue: list[tuple[int, int | None]] = []  # waiting requests: (number, ticket)
        self._numbers = itertools.count(1)
        self._solo_waiting = 0
        self._solo: int | None = None  # the ticket of the judgement running alone

    # -- judgements ----------------------------------------------------------------------------
    @contextlib.contextmanager
    def shared(self):
        """One ordinary judgement; yields a function telling whether another ran beside it.
        Held back while a judgement runs alone or waits to."""
        with self._cond:
            while self._solo_waiting or not self._passes(_TICKET.get()):
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
        """Run once no other judgement and no run's grant is in flight (memory kept between
        judgements is the caller's to release). Grants asked for inside, and in threads
        started with this context, pass; everyone else's wait until it is done."""
        ticket = next(self._numbers)
        with self._cond:
            self._solo_waiting += 1
            try:
                while self._running or self._transient or self._solo is not None:
                    self._cond.wait()
            finally:
                self._solo_waiting -= 1
            self._solo = ticket
        token = _TICKET.set(ticket)
        try:
            yield
        finally:
            _TICKET.reset(token)
            with self._cond:
                self._solo = None
                self._cond.notify_all()

    def is_alone(self) -> bool:
        """Whether the caller runs inside `alone()` (or on its behalf)."""
        return self._solo is not None and _TICKET.get() == self._solo

    # -- memory --------------------------------------------------------------------------------
    def admit(self, nbytes: int, what: str = "-") -> Grant:
        """A transient grant of `nbytes`, once it fits (see the module docstring)."""
        nbytes = max(0, int(nbytes))
        me = (next(self._numbers), _TICKET.get())
        with self._cond:
            self._queue.append(me)
            try:
                while not self._granted_now(me, nbytes):
                    self._cond.wait(timeout=1.0)
                self._granted += nbytes
                self._transient += 1
            finally:
                self._queue.remove(me)
                self._cond.notify_all()
        return Grant(self, nbytes, what)

    def _granted_now(self, me: tuple[int, int | None], nbytes: int) -> bool:
        """Whether the request may be granted now (caller holds the lock; `reclaim` runs
        without it): its turn, and room in the budget, after reclaiming if need be; or, too
        large even so, no run in flight that would free memory."""
        for attempt in range(2):
            if not self._passes(me[1]) or self._first_in_line() != me:
                return False
            if self.capacity is None or self._granted + nbytes <= self.capacity:
                return True
            if attempt or self.reclaim is None:
                break
            force = not self._transient  # nothing in flight will free memory
            self._cond.release()  # kept grants are released by their owners
            try:
                self.reclaim(force)
            finally:
                self._cond.acquire()
        return not self._transient

    def free_bytes(self) -> int | None:
        """Budget not granted (None without a budget)."""
        with self._cond:
            return None if self.capacity is None else self.capacity - self._granted

    def _passes(self, ticket: int | None) -> bool:
        return self._solo is None or ticket == self._solo

    def _first_in_line(self):
        """First come, first served, among the requests that may pass now."""
        return next((q for q in self._queue if self._passes(q[1])), None)

    def _keep(self, grant: Grant, nbytes: int) -> None:
        with self._cond:
            if grant._released or grant.kept:
                return
            self._granted -= grant.nbytes - min(nbytes, grant.nbytes)
            grant.nbytes = min(nbytes, grant.nbytes)
            grant.kept = True
            self._transient -= 1
            self._cond.notify_all()

    def _release(self, grant: Grant) -> None:
        with self._cond:
            if grant._released:
                return
            grant._released = True
            self._granted -= grant.nbytes
            if not grant.kept:
                self._transient -= 1
            self._cond.notify_all()


def out_of_memory(status: str, reason: str) -> bool:
    """A verdict that says the GPU ran out of memory (what a neighbour can cause): in the
    candidate's or the reference's worker, or in the judge while it opened the outputs."""
    r = reason.lower()
    oom = ("outofmemoryerror" in r or "out of memory" in r) and "killed; out of memory?" not in r
    judge_side = status == "incorrect" and r.startswith("the candidate's outputs could not be read")
    return oom and (status in ("runtime_error", "invalid_task") or judge_side)
