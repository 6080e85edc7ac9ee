"""ReferenceCache: each task's reference computed once, shared by all its candidates.

A reference run has two parts of very different urgency: its outputs (every candidate of the task
needs them before its correctness trials) and its timing (needed only when a candidate is about
to be timed, and waiting for the GPU to itself). So each reference runs in its own thread and
publishes its outputs as soon as they are decoded (`ReferenceHandle.outputs()` returns then),
while its timing goes on; `ReferenceHandle.complete()` waits for the timing too. A candidate
never holds a slot of the judge idle behind another module's timing just to learn what the
right answer was.

Outputs can be large (and live in GPU memory on cuda), so the cache is bounded: a finished
reference is dropped once no pending candidate needs it and the cache is over `capacity`.
`prefetch(tasks)` computes references ahead of the candidates that need them, within the bound.
"""
from __future__ import annotations

import collections
import contextvars
import threading
from typing import Callable

from kernelzero.eval.reference import ReferenceRun
from kernelzero.tasks.task import Task


class ReferenceHandle:
    """One task's reference run, in progress or finished. A candidate keeps its handle, so the
    run it waits for is the one it started with even if the cache drops the task meanwhile."""

    def __init__(self) -> None:
        self.run: ReferenceRun | None = None
        self.has_outputs = threading.Event()  # run holds outputs (or the reason it has none)
        self.done = threading.Event()         # ... and its timing is finished too

    def outputs(self) -> ReferenceRun:
        """The reference with its outputs (its timing may still be running)."""
        self.has_outputs.wait()
        return self.run  # type: ignore[return-value]

    def complete(self) -> ReferenceRun:
        """The reference once its timing has finished too."""
        self.done.wait()
        return self.run  # type: ignore[return-value]


class ReferenceCache:
    def __init__(self, compute: Callable[[Task, Callable[[ReferenceRun], None]], ReferenceRun],
                 capacity: int):
        """`compute(task, publish)` runs a reference and calls `publish(run)` once its outputs
        are in `run` (before timing it); it returns the finished run."""
        self._compute, self.capacity = compute, capacity
        self._entries: dict[str, ReferenceHandle] = {}
        self._cond = threading.Condition()
        self._pending: collections.Counter = collections.Counter()  # task hash -> candidates left
        self.phases: dict[str, dict] = {}  # task hash -> where its reference's time went

    def get(self, task: Task) -> ReferenceHandle:
        """The task's reference run: the cached one, else one started now in its own thread
        (in the caller's context: a judgement running alone passes its ticket on,
        memory_gate.py)."""
        with self._cond:
            entry = self._entries.get(task.hash)
            if entry is not None:
                return entry
            entry = self._entries[task.hash] = ReferenceHandle()
        ctx = contextvars.copy_context()
        threading.Thread(target=ctx.run, args=(self._run, task, entry), daemon=True,
                         name=f"kz-reference-{task.hash[:8]}").start()
        return entry

    def restart(self, task: Task) -> ReferenceHandle:
        """`get`, except that a run still in progress or failed is replaced by a new one started
        now (a judgement running alone: the run in progress may be held back until it ends)."""
        with self._cond:
            entry = self._entries.get(task.hash)
            if entry is not None and not (entry.done.is_set() and entry.run and entry.run.ok):
                del self._entries[task.hash]
        return self.get(task)

    # -- bookkeeping by the batch ------------------------------------------------------------
    def expect(self, task_hash: str, n: int = 1) -> None:
        """n more candidates of this task will ask for its reference (keeps it cached)."""
        with self._cond:
            self._pending[task_hash] += n

    def release(self, task_hash: str, n: int = 1) -> None:
        """n candidates of this task are done with its reference."""
        with self._cond:
            self._pending[task_hash] -= n
            self._evict()
            self._cond.notify_all()

    def prefetch(self, tasks: list[Task], stop: Callable[[], bool]) -> None:
        """Start references in task order, each once the previous one has its outputs, keeping
        at most capacity - 1 that candidates still need (the last slot is for a candidate whose
        task was not prefetched yet)."""
        for task in tasks:
            with self._cond:
                while not stop() and self._busy() >= self.capacity - 1:
                    self._cond.wait(timeout=1.0)
                if stop():
                    return
                if self._pending[task.hash] <= 0:  # its candidates are all judged already
                    continue
            self.get(task).outputs()

    def wake(self) -> None:
        """Wake a `prefetch` waiting for room, so it sees its stop condition now (not after its
        one-second timeout: judge_many waits for it before it returns)."""
        with self._cond:
            self._cond.notify_all()

    def forget_failed(self, task_hash: str) -> None:
        """Drop this task's reference if it finished and failed, so the next `get` runs it again
        (it may have failed for want of memory that other judgements held)."""
        with self._cond:
            entry = self._entries.get(task_hash)
            if entry is not None and entry.done.is_set() and not (entry.run and entry.run.ok):
                del self._entries[task_hash]

    def clear(self, keep: str | None = None) -> None:
        """Drop every finished reference but `keep`'s (their memory goes once no judgement
        holds their handles)."""
        with self._cond:
            self._entries = {h: e for h, e in self._entries.items()
                             if h == keep or not e.done.is_set()}

    def reclaim(self, force: bool = False) -> None:
        """Drop the finished references no pending candidate needs (`force`: every finished
        one; a candidate still to come computes its reference again). The memory gate's
        reclaim (memory_gate.py)."""
        with self._cond:
            self._entries = {h: e for h, e in self._entries.items()
                             if not e.done.is_set() or (self._pending[h] > 0 and not force)}
            self._cond.notify_all()

    def __len__(self) -> int:
        return len(self._entries)

    # -- internals ---------------------------------------------------------------------------
    def _run(self, task: Task, entry: ReferenceHandle) -> None:
        def publish(run: ReferenceRun) -> None:
            entry.run = run
            entry.has_outputs.set()

        try:
            run = self._compute(task, publish)
        except Exception as e:  # noqa: BLE001 - a bug must not leave candidates waiting forever
            run = ReferenceRun(False, f"the judge failed while running the reference: "
                                      f"{type(e).__name__}: {e}")
        with self._cond:
            # A failure after the outputs were published (the worker died while timing) replaces
            # the run: candidates that wait for `complete()` see it; ones already judged stand.
            entry.run = run
            self.phases[task.hash] = run.phases_s
            entry.has_outputs.set()
            entry.done.set()
            self._evict()
            self._cond.notify_all()

    def _busy(self) -> int:
        """Cached references that candidates still need (caller holds the condition)."""
        return sum(1 for h in self._entries if self._pending[h] > 0)

    def _evict(self) -> None:
        """Drop the oldest finished references no pending candidate needs (caller holds it)."""
        for h, e in list(self._entries.items()):
            if len(self._entries) <= self.capacity:
                return
            if self._pending[h] <= 0 and e.done.is_set():
                del self._entries[h]
