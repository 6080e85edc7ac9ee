"""One `Evaluator.judge_many` call: (task, candidate) pairs judged in parallel, verdicts in the
order given.

Pairs are taken task by task, `max_workers` at once, each by `Evaluator.judge`. A background
thread computes the next tasks' references ahead of the candidates that need them (a few tasks
ahead, bounded by the reference cache), and a reference stays cached while any candidate of its
task is still pending: each pair releases its task's reference once, when it is judged or
cancelled. The spare pool is told how many workers the batch takes, so that it starts no spare
(CPU- and GPU-heavy) for nobody while the batch is judged.

Ctrl-C kills every worker at once and keeps nothing half-judged; an exception from the judge
stops the batch and leaves the evaluator usable. Judging one pair is not covered here
(evaluator.py).
"""
from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

from kernelzero.eval.verdict import Verdict


class JudgingBatch:
    """`ev` is the Evaluator whose workers, references and spares the batch uses."""

    def __init__(self, ev, pairs: list, on_verdict=None):
        self.ev, self.pairs, self.on_verdict = ev, pairs, on_verdict
        self.results: list[Verdict | None] = [None] * len(pairs)
        self.order = sorted(range(len(pairs)), key=lambda i: pairs[i][0].hash)
        self._released: set[int] = set()
        self._release_guard = threading.Lock()
        self._done = threading.Event()

    def run(self) -> list[Verdict | None]:
        """The verdicts in the order of the pairs (None for a pair not judged: aborted)."""
        ev = self.ev
        for t, _ in self.pairs:
            ev.references.expect(t.hash)
        tasks, workers = self._references_and_workers()
        ev.spares.begin_batch(workers)  # spares beyond these would start for nobody
        prefetch = threading.Thread(target=ev.references.prefetch, daemon=True,
                                    args=(tasks, lambda: self._done.is_set() or ev.aborted))
        prefetch.start()
        pool = ThreadPoolExecutor(max_workers=ev.config.max_workers)
        try:
            self._judge_all(pool)
        finally:
            self._done.set()
            ev.references.wake()
            for i in range(len(self.pairs)):  # futures cancelled before they ran
                self._release(i)
            ev.spares.end_batch()
        pool.shutdown(wait=True)
        prefetch.join(timeout=1)
        return self.results

    def _references_and_workers(self) -> tuple[list, int]:
        """The tasks whose references to compute ahead, and the workers the batch takes: one
        per candidate that runs (the text alone does not decide its verdict) and one per task
        such a candidate runs against (its reference). The other tasks need no reference."""
        ev, pairs = self.ev, self.pairs
        runs = [i for i in self.order if ev.needs_worker(*pairs[i])]
        tasks = list({pairs[i][0].hash: pairs[i][0] for i in runs}.values())
        return tasks, len(runs) + len(tasks)

    def _judge_all(self, pool: ThreadPoolExecutor) -> None:
        """Every pair, in task order, on the pool's threads; returns when all are judged."""
        try:
            futures = [pool.submit(self._judge_one, i) for i in self.order]
            for f in futures:
                f.result()
        except KeyboardInterrupt:  # Ctrl-C: kill every worker now; nothing half-judged is kept
            self.ev.abort()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        except BaseException:  # a bug in the judge: stop this batch, keep the evaluator usable
            pool.shutdown(wait=True, cancel_futures=True)
            raise

    def _judge_one(self, i: int) -> Verdict | None:
        """Pair `i`'s verdict, kept and passed to `on_verdict`; none once the batch is aborted
        (a judgement whose worker was killed is no real verdict)."""
        try:
            if self.ev.aborted:
                return None
            v = self.ev.judge(*self.pairs[i])
            if self.ev.aborted:  # killed mid-judgement: not a real verdict
                return None
            self.results[i] = v
            if self.on_verdict is not None:
                self.on_verdict(i, v)
            return v
        finally:
            self._release(i)

    def _release(self, i: int) -> None:
        """Let go of pair `i`'s hold on its task's reference: once per pair, by whichever thread
        gets there first (its judging thread, or the batch's end for a pair cancelled)."""
        with self._release_guard:
            if i in self._released:
                return
            self._released.add(i)
        self.ev.references.release(self.pairs[i][0].hash)
