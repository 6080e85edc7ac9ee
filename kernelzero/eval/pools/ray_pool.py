"""RayPool: the evaluator spread over every node (and every GPU) of a Ray cluster.

Covers: judging (task, candidate) pairs on Ray actors, each holding a warm `Evaluator` on its
node; one actor per GPU when judging on CUDA, so each GPU is claimed by exactly one judge and is
exclusive while a candidate is checked and timed; surviving the loss of a worker process or a
whole node mid-batch; the same `judge` / `judge_many(pairs, on_verdict)` API as the local
`Evaluator`, so every caller can take either (see `kernelzero.eval.pools.make_pool`).

Does not cover: judging itself (that is the `Evaluator`, unchanged, inside each actor), storing
verdicts (the caller's `on_verdict` does that), or starting a multi-node cluster (`ray start
--head` on one machine, `ray start --address=HEAD:6379` on the others; then pass `address="auto"`
or the head's address). Every node needs kernelzero installed in the same Python as Ray.

How the work is placed:
- The judges are Ray actors, each holding a warm Evaluator (`kernelzero.eval.pools.ray_actors`).
- On CUDA: one actor per GPU of the cluster. Each claims one unit of `gpu_resource` and judges up
  to `runs_per_gpu` candidates at once with one Evaluator: their start-up, imports and compiles
  (`load_inline`, Triton) overlap on the node's CPUs, while the evaluator's GPU lock lets one of
  them at a time run its trials or its timing on the GPU.
- On CPU: one actor per node (`actors` overrides), judging `max_workers` candidates at once.
- Task affinity (`kernelzero.eval.pools.ray_placement`): an actor caches the reference of each task
  it judges, so a free slot takes the first queued candidate of a task its actor was given, else the
  first of a task no actor holds, else the queue's head; these two go to the actor with the most
  free slots (first candidates spread over the actors). No slot idles waiting for an affine actor; a
  dropped actor's tasks are forgotten. Nodes that join get actors within `rescan_s`.
- Batch hint: actors get one candidate at a time, so `judge_many` tells each ready actor's spare
  pool how many workers to expect (its share of candidates + distinct tasks, see
  `kernelzero.eval.pools.ray_hints`), as the local `Evaluator.judge_many` does, so that no actor
  keeps starting spares (a CUDA context and CPU each) that nobody takes while the batch runs.

Failure rules (nothing lost, nothing delivered twice):
- An actor whose process or node dies: the candidates it held are handed to other actors (a
  replacement is started where resources allow), each at most `max_retries` more times. An
  `OSError` / `MemoryError` raised by the evaluator is retried the same way.
- Each index reaches `on_verdict` exactly once. A candidate can be *judged* twice (its actor died
  after judging, before answering) but is *stored* once; `Store.put` is idempotent per (run, key).
- A candidate still without a verdict after every retry gets `runtime_error` flagged
  `worker_lost`, never an exception that sinks the batch. (Candidates that shared an actor with
  one that killed it are retried too; they only end like this if that keeps happening.)
- Any other exception from the evaluator is a bug in KernelZero: the rest of the batch is still
  delivered, then `RayPoolError` is raised naming the failed indices. So is a cluster on which
  no actor could start within `start_timeout_s`.
"""
from __future__ import annotations

import collections
import dataclasses
import threading
import time
from concurrent.futures import Future, wait, FIRST_COMPLETED
from dataclasses import asdict
from typing import Callable

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.pools.ray_actors import JudgeActors, default_evaluator_factory
from kernelzero.eval.pools.ray_config import RayPoolConfig, import_ray
from kernelzero.eval.pools.ray_hints import BatchHints
from kernelzero.eval.pools.ray_placement import TaskAffinity
from kernelzero.eval.pools.ray_scheduler import RayScheduler, _Job
from kernelzero.eval.verdict import Verdict


class RayPoolError(RuntimeError):
    """Some candidates could not be judged: the evaluator raised (a KernelZero bug) or no actor
    could start. `failures` maps index -> reason."""

    def __init__(self, failures: dict[int, str]):
        self.failures = failures
        first = min(failures)
        super().__init__(f"{len(failures)} candidate(s) could not be judged; first: "
                         f"#{first}: {failures[first]}")


class RayPool(RayScheduler):
    """Judge candidates on a Ray cluster; same API as `Evaluator` (see the module docstring)."""

    kind = "ray"

    def __init__(self, config: EvalConfig, ray_config: RayPoolConfig | None = None, *,
                 address: str | None = None, evaluator_factory: Callable | None = None):
        """`address` overrides `ray_config.address`; `evaluator_factory(cfg)` builds the judge
        object inside each actor (default: `Evaluator(cfg)`; it must be picklable)."""
        self.config = config
        self.ray_config = rc = ray_config or RayPoolConfig()
        if address is not None:
            rc.address = address
        self._ray = ray = import_ray()
        self._owns_ray = False
        if not ray.is_initialized():
            ray.init(address=rc.address, include_dashboard=False, configure_logging=False)
            self._owns_ray = True
        self._gpu = rc.claims_gpus(config)
        self._slots = (rc.runs_per_gpu or config.max_workers) if self._gpu else config.max_workers
        self._judges = JudgeActors(ray, evaluator_factory or default_evaluator_factory,
                                   dataclasses.replace(config, max_workers=self._slots),
                                   self._slots, claim=rc.gpu_resource if self._gpu else None,
                                   cpus=rc.cpus_per_actor, count=rc.actors)
        self._cond = threading.Condition()
        self._queue: collections.deque[_Job] = collections.deque()
        self._inflight: dict = {}   # ObjectRef -> (job, actor id)
        self._affinity = TaskAffinity()  # task hash -> actors given a candidate of it
        self._start_failures = 0    # actor starts failed in a row (reset by one that works)
        self._start_error = ""
        self._stalled_since: float | None = None  # queue waiting with no ready actor, since
        self._hints = BatchHints(ray)  # each actor's share of the batches' worker takes
        self._stats = {"judged": 0, "retried": 0, "worker_lost": 0, "actors_lost": 0}
        self._per_node: collections.Counter = collections.Counter()
        # Where recent candidates ran: {"node_id", "pid", "gpu_ids", "resources", "started",
        # "ended", "candidate_hash", "task_hash"} (wall-clock seconds); the newest 10,000 are kept.
        self.placements: collections.deque[dict] = collections.deque(maxlen=10_000)
        self._closed = False
        self._broken: str | None = None
        if self._judges.desired() < 1:
            raise RuntimeError(
                f"the Ray cluster offers 0 of resource {rc.gpu_resource!r}, and every judge "
                f"claims one: start the nodes with GPUs (`ray start --num-gpus N`, or "
                f"`--resources` for a custom name), or judge on CPU")
        self._judges.scale()
        self._thread = threading.Thread(target=self._loop, name="kz-raypool", daemon=True)
        self._thread.start()

    # -- the evaluator API -------------------------------------------------------------------
    def judge(self, task, cand) -> Verdict:
        return self.judge_many([(task, cand)])[0]

    def judge_many(self, pairs, on_verdict: Callable[[int, Verdict], None] | None = None
                   ) -> list[Verdict]:
        """Judge every pair on the cluster; results in input order, `on_verdict(i, v)` called
        once per index, from this thread, as soon as its verdict is in. Safe to call from
        several threads at once (they share the actors).

        Each actor's spare pool is told how many workers to expect (ray_hints.py), as the
        local `Evaluator.judge_many` tells its own."""
        if self._closed or self._broken:
            raise RuntimeError(self._broken or "this RayPool is closed")
        jobs = [_Job(tuple(pair), Future(), task_hash=pair[0].hash) for pair in pairs]
        index = {id(j.future): i for i, j in enumerate(jobs)}
        results: list[Verdict | None] = [None] * len(jobs)
        failures: dict[int, str] = {}
        pending = {j.future for j in jobs}
        takes = len(jobs) + len({j.task_hash for j in jobs})  # this batch's, not yet delivered
        with self._cond:
            self._hints.begin(takes, self._judges.ready())  # before queuing: before its first takes
            self._queue.extend(jobs)
            self._cond.notify_all()
        try:
            while pending:
                done, pending = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    i = index[id(fut)]
                    if fut.exception() is not None:
                        failures[i] = str(fut.exception())
                        continue
                    results[i] = fut.result()
                    if on_verdict is not None:
                        on_verdict(i, results[i])
                with self._cond:  # a delivered candidate took its worker
                    self._hints.delivered(len(done))
                takes -= len(done)
        finally:
            with self._cond:
                if pending:  # interrupted (Ctrl-C, on_verdict raised): withdraw the unstarted
                    for job in jobs:
                        if job.future in pending and job in self._queue:
                            self._queue.remove(job)
                self._hints.end(takes, self._judges.ready())
        if failures:
            raise RayPoolError(failures)
        return results  # type: ignore[return-value]

    def warm_up(self, timeout_s: float = 300.0) -> int:
        """Wait (at most timeout_s) until every actor the cluster has room for is up and its
        spare workers are ready; returns the number of ready spares over all actors."""
        deadline = time.time() + timeout_s
        while time.time() < deadline:
            with self._cond:
                if self._broken:
                    raise RuntimeError(self._broken)
                actors = list(self._judges.by_id.values())
                if actors and all(a.ready for a in actors):
                    break
            time.sleep(0.1)
        refs = [a.handle.warm_up.remote(max(1.0, deadline - time.time())) for a in actors if a.ready]
        return sum(self._ray.get(refs, timeout=max(1.0, deadline - time.time() + 5)))

    # -- state -------------------------------------------------------------------------------
    def health(self) -> dict:
        """Cluster and pool state for `/health` and the benchmark."""
        ray = self._ray
        with self._cond:
            tasks = self._affinity.tasks_per_actor()
            actors = [{"id": aid, "ready": a.ready, "busy": a.busy, "slots": a.slots,
                       "tasks": tasks[aid], "node_id": a.where.get("node_id"),
                       "pid": a.where.get("pid"), "gpu_ids": a.where.get("gpu_ids")}
                      for aid, a in self._judges.by_id.items()]
            state = {"queued": len(self._queue), "in_flight": len(self._inflight),
                     **self._stats, "per_node": dict(self._per_node)}
        return {"kind": self.kind, "broken": self._broken,
                "nodes_alive": sum(1 for n in ray.nodes() if n.get("Alive")),
                "resources_total": ray.cluster_resources(),
                "resources_available": ray.available_resources(),
                "claims_gpus": self._gpu, "slots_per_actor": self._slots, "actors": actors,
                "ray_config": asdict(self.ray_config), **state}

    def close(self) -> None:
        if self._closed:
            return
        with self._cond:
            self._closed = True
            self._cond.notify_all()
            for job in self._queue:
                job.future.set_exception(RuntimeError("the RayPool was closed"))
            self._queue.clear()
        self._thread.join(10)
        with self._cond:
            self._hints.collect(timeout_s=1.0)  # the last expect(None)s, sent just now
            # Nobody will collect the candidates still on the actors: their callers must not
            # wait forever (a judge_many in another thread).
            running = [job for job, _ in self._inflight.values()]
            self._inflight.clear()
        for job in running:
            if not job.future.done():
                job.future.set_exception(RuntimeError(
                    "the RayPool was closed while this candidate was being judged"))
        self._judges.close()
        if self._owns_ray and self._ray.is_initialized():
            self._ray.shutdown()

    def __enter__(self) -> "RayPool":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
