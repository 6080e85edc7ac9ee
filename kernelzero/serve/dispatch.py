"""Dispatcher: a bounded queue of candidates in front of a judging pool, drained by threads.

Covers: admission with back-pressure (`QueueFull` when accepting a batch would put more than
`max_queue` candidates in the building), merging what is waiting into one `judge_many` call per
dispatcher thread (so the pool sees big batches even when clients send small ones), a future per
candidate, and the counters `/health` reports. Works with any pool that has
`judge_many(pairs, on_verdict)` (the local `Evaluator`, `RayPool`).

Does not cover: HTTP (kernelzero/serve/app.py), nor cancelling work whose client went away: an
accepted candidate is always judged, and its verdict is dropped if nobody waits for it.
"""
from __future__ import annotations

import collections
import threading
import time
from concurrent.futures import Future


class QueueFull(Exception):
    """Accepting this batch would exceed the queue bound; try again later."""


class PoolFailed(Exception):
    """The pool raised instead of returning verdicts (its message says why)."""


class Dispatcher:
    """Feed a pool from a bounded queue with `threads` dispatcher threads.

    max_queue: candidates accepted and not yet finished (waiting + being judged), at most.
    threads: concurrent `judge_many` calls on the pool.
    max_dispatch: candidates handed to the pool in one `judge_many` call, at most.
    For the local Evaluator use threads = its max_workers and max_dispatch = 1: candidates then
    flow through one by one with exactly the evaluator's own parallelism, and a slow candidate
    holds up nothing but its own slot. For RayPool use a few threads with large batches (the
    cluster spreads each batch itself).
    """

    def __init__(self, pool, max_queue: int = 256, threads: int = 4, max_dispatch: int = 1):
        if max_queue < 1 or threads < 1 or max_dispatch < 1:
            raise ValueError("Dispatcher needs max_queue, threads and max_dispatch >= 1")
        self.pool = pool
        self.max_queue = max_queue
        self.max_dispatch = max_dispatch
        self._queue: collections.deque = collections.deque()  # (task, cand, future)
        self._cond = threading.Condition()
        self._in_flight = 0
        self._judged = 0
        self._pool_failures = 0
        self._stopping = False
        self._thread_state: list[dict] = [{"busy": False, "batch": 0, "since": None}
                                          for _ in range(threads)]
        self._threads = [threading.Thread(target=self._loop, args=(k,), daemon=True,
                                          name=f"kz-dispatch-{k}") for k in range(threads)]
        self._started = False

    def start(self) -> None:
        if not self._started:
            self._started = True
            for t in self._threads:
                t.start()

    def submit(self, pairs: list) -> list[Future]:
        """Queue `pairs` as one unit, or raise QueueFull (nothing queued) when over the bound."""
        futures = [Future() for _ in pairs]
        with self._cond:
            if self._stopping:
                raise PoolFailed("the server is shutting down")
            if len(self._queue) + self._in_flight + len(pairs) > self.max_queue:
                raise QueueFull(f"{len(self._queue)} candidates queued and {self._in_flight} being "
                                f"judged; the bound is {self.max_queue}")
            for (task, cand), fut in zip(pairs, futures):
                self._queue.append((task, cand, fut))
            self._cond.notify_all()
        return futures

    def _take(self) -> list | None:
        with self._cond:
            while not self._queue and not self._stopping:
                self._cond.wait()
            if self._stopping:
                return None
            items = []
            while self._queue and len(items) < self.max_dispatch:
                items.append(self._queue.popleft())
            self._in_flight += len(items)
            return items

    def _loop(self, k: int) -> None:
        state = self._thread_state[k]
        while True:
            items = self._take()
            if items is None:
                return
            state.update(busy=True, batch=len(items), since=time.time())
            futures = [fut for _, _, fut in items]

            def deliver(i: int, verdict) -> None:
                if verdict is not None and not futures[i].done():  # None: an aborted evaluator
                    futures[i].set_result(verdict)

            try:
                verdicts = self.pool.judge_many([(t, c) for t, c, _ in items], on_verdict=deliver)
                for i, v in enumerate(verdicts):
                    deliver(i, v)
                error = None
            except BaseException as e:  # the pool broke: every waiting client gets a 503
                error = PoolFailed(f"the judging pool failed: {type(e).__name__}: {e}")
            with self._cond:
                self._in_flight -= len(items)
                self._judged += sum(1 for f in futures if f.done() and not f.exception())
                self._pool_failures += error is not None
            for fut in futures:
                if not fut.done():
                    fut.set_exception(error or PoolFailed("the pool returned no verdict"))
            state.update(busy=False, batch=0, since=None)

    def state(self) -> dict:
        now = time.time()
        with self._cond:
            return {"queue_depth": len(self._queue), "in_flight": self._in_flight,
                    "max_queue": self.max_queue, "judged_total": self._judged,
                    "pool_failures": self._pool_failures,
                    "dispatchers": [{"busy": s["busy"], "batch": s["batch"],
                                     "busy_s": round(now - s["since"], 3) if s["since"] else None}
                                    for s in self._thread_state]}

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop taking work; fail what is still queued; wait briefly for the threads."""
        with self._cond:
            self._stopping = True
            left = list(self._queue)
            self._queue.clear()
            self._cond.notify_all()
        for _, _, fut in left:
            if not fut.done():
                fut.set_exception(PoolFailed("the server is shutting down"))
        for t in self._threads:
            if t.is_alive():
                t.join(timeout_s)
