"""The scheduler thread of a RayPool: it fills the ready actors' free slots from the queue
(placement: ray_placement.py), collects each candidate's answer, and keeps the failure rules of
ray_pool.py's docstring (a lost actor's candidates retried elsewhere, a candidate that exhausts
its retries ruled `worker_lost`, a queue no actor can start for failed).

`RayScheduler` is RayPool's base class: its methods run on the pool's state, set up in
`RayPool.__init__` (the queue and the candidates in flight, the actors, their task affinity and
batch hints, the counters), every change under the pool's `_cond`. Does not cover the pool's
API (ray_pool.py: `judge_many` queues the candidates and waits for their futures) nor starting
and dropping the actors (ray_actors.py).
"""
from __future__ import annotations

import time
from concurrent.futures import Future
from dataclasses import dataclass

from kernelzero.eval.pools.ray_placement import choose
from kernelzero.eval.verdict import Verdict

RETRYABLE_EXCEPTIONS = (OSError, MemoryError)


@dataclass
class _Job:
    pair: tuple
    future: Future
    attempts: int = 0
    task_hash: str = ""  # pair[0].hash, hashed once: placement reads it often


class RayScheduler:
    """The scheduler thread's part of a RayPool (the module docstring); `_loop` is the thread."""

    # -- actors ------------------------------------------------------------------------------
    def _drop_actor(self, aid: int) -> None:
        self._affinity.forget_actor(aid)
        if self._judges.drop(aid):
            self._stats["actors_lost"] += 1

    # -- the scheduler thread ----------------------------------------------------------------
    def _loop(self) -> None:
        try:
            self._schedule()
        except BaseException as e:  # lost the cluster, or a bug: nobody may wait forever
            with self._cond:
                self._broken = f"the RayPool scheduler stopped: {type(e).__name__}: {e}"
                jobs = list(self._queue) + [job for job, _ in self._inflight.values()]
                self._queue.clear()
                self._inflight.clear()
            for job in jobs:
                if not job.future.done():
                    job.future.set_exception(RuntimeError(self._broken))

    def _schedule(self) -> None:
        last_scan = time.time()
        while True:
            with self._cond:
                while not self._closed and not self._queue and not self._inflight \
                        and not self._judges.starting:
                    self._cond.wait(1.0)
                    self._hints.collect()
                if self._closed:
                    return
                self._assign()
                self._hints.collect()
                refs = list(self._inflight) + list(self._judges.starting)
            if time.time() - last_scan > self.ray_config.rescan_s:
                last_scan = time.time()
                with self._cond:
                    self._judges.scale()
                    self._check_stalled()
            if not refs:
                time.sleep(0.05)
                continue
            done, _ = self._ray.wait(refs, num_returns=1, timeout=0.2)
            for ref in done:
                self._finish(ref)

    def _assign(self) -> None:
        """Fill the ready actors' free slots from the queue (placement: ray_pool.py's docstring)."""
        free = {aid: a.slots - a.busy for aid, a in self._judges.by_id.items() if a.ready}
        while self._queue:
            picked = choose((j.task_hash for j in self._queue), free, self._affinity.holders)
            if picked is None:
                return
            i, aid = picked
            job = self._queue[i]
            del self._queue[i]
            actor = self._judges.by_id[aid]
            ref = actor.handle.judge.remote(*job.pair)
            self._inflight[ref] = (job, aid)
            actor.busy += 1
            free[aid] -= 1
            self._affinity.add(job.task_hash, aid)

    def _check_stalled(self) -> None:
        """Fail the queue when no actor can start: after start_timeout_s without a ready actor,
        or after max_start_failures failed starts in a row (replacements would fail the same)."""
        if not self._queue or any(a.ready for a in self._judges.by_id.values()):
            self._stalled_since = None
            return
        now = time.time()
        if self._stalled_since is None:
            self._stalled_since = now
        failed = self._start_failures >= self.ray_config.max_start_failures
        if failed or now - self._stalled_since > self.ray_config.start_timeout_s:
            why = (f"{self._start_failures} actor starts failed in a row; the last: "
                   f"{self._start_error}" if failed else
                   f"none was ready within {self.ray_config.start_timeout_s:g} s")
            while self._queue:
                self._queue.popleft().future.set_exception(RuntimeError(
                    f"no judging actor could start on the Ray cluster ({why})"))
            self._stalled_since = None
            self._start_failures = 0

    def _finish(self, ref) -> None:
        from ray import exceptions as rex

        with self._cond:
            if ref in self._judges.starting:
                self._started(ref)
                return
            job, aid = self._inflight.pop(ref)
            if aid in self._judges.by_id:
                self._judges.by_id[aid].busy -= 1
        try:
            verdict, placement = self._ray.get(ref)
        except (rex.RayActorError, rex.WorkerCrashedError, rex.NodeDiedError,
                rex.ObjectLostError, rex.LocalRayletDiedError) as e:
            with self._cond:
                self._drop_actor(aid)
                self._judges.scale()
                self._retry(job, e)
            return
        except rex.RayTaskError as e:
            if isinstance(e.cause, RETRYABLE_EXCEPTIONS):
                with self._cond:
                    self._retry(job, e.cause)
            else:
                job.future.set_exception(RuntimeError(f"{type(e.cause).__name__}: {e.cause}"))
            return
        except rex.RayError as e:
            job.future.set_exception(RuntimeError(f"{type(e).__name__}: {e}"))
            return
        with self._cond:
            self._stats["judged"] += 1
            self._per_node[placement.get("node_id", "?")] += 1
            self.placements.append({**placement, "candidate_hash": job.pair[1].hash,
                                    "task_hash": job.task_hash})
        job.future.set_result(verdict)

    def _started(self, ref) -> None:
        """An actor's `ready()` answered (the caller holds self._cond): it is ready, or it could
        not start and another is tried."""
        from ray import exceptions as rex

        aid = self._judges.starting.pop(ref)
        try:
            where = self._ray.get(ref)
        except rex.RayError as e:
            self._drop_actor(aid)  # could not start (its node went away): try again
            self._start_failures += 1
            self._start_error = _first_line(e)
            self._check_stalled()
            if self._queue:
                self._judges.scale()
            return
        self._start_failures = 0
        actor = self._judges.by_id.get(aid)
        if actor is not None:
            actor.ready, actor.where = True, where
            self._hints.actor_ready(actor.handle, len(self._judges.ready()))

    def _retry(self, job: _Job, error: BaseException) -> None:
        job.attempts += 1
        if job.attempts > self.ray_config.max_retries:
            self._stats["worker_lost"] += 1
            job.future.set_result(self._worker_lost_verdict(job, error))
        else:
            self._stats["retried"] += 1
            self._queue.appendleft(job)
            self._cond.notify_all()

    def _worker_lost_verdict(self, job: _Job, error: BaseException) -> Verdict:
        task, cand = job.pair
        return Verdict(
            status="runtime_error",
            reason=(f"the judging worker died on every one of {job.attempts} attempts "
                    f"({type(error).__name__}); the candidate may kill its judge"),
            flags=["worker_lost"], backend=cand.resolved_backend(), device=self.config.device,
            policy=self.config.policy, task_hash=task.hash, candidate_hash=cand.hash)


def _first_line(e: BaseException) -> str:
    """The useful line of a Ray error (the cause's last line: its exception type and message)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]
