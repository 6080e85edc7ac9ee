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
from dataclasses import asdict, dataclass
from typing import Callable

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.pools.ray_actors import JudgeActors, default_evaluator_factory
from kernelzero.eval.pools.ray_hints import BatchHints
from kernelzero.eval.pools.ray_placement import TaskAffinity, choose
from kernelzero.eval.verdict import Verdict

INSTALL_HINT = ("the Ray pool needs Ray: pip install 'kernelzero[ray]' (or pip install "
                "'ray[default]'), on every node of the cluster")
RETRYABLE_EXCEPTIONS = (OSError, MemoryError)


def import_ray():
    """Import Ray, or raise ImportError with the install hint (Ray is an optional dependency)."""
    try:
        import ray
    except ImportError as e:
        raise ImportError(INSTALL_HINT) from e
    return ray


@dataclass
class RayPoolConfig:
    """Where and how a RayPool places its work.

    address: the cluster to join: None starts a private local cluster (or joins the one named by
        the RAY_ADDRESS environment variable), "auto" joins the cluster started on this machine
        with `ray start`, "HOST:PORT" joins that head. Ignored when Ray is already initialised in
        this process (the pool then uses that connection and leaves it open on close).
    use_gpus: whether actors claim `gpu_resource` (one unit each, one actor per unit); None means
        only when judging on CUDA. True on a CPU run exercises the GPU placement with declared
        resources (tests).
    gpu_resource: the Ray resource an actor claims: "GPU" (Ray's own; sets CUDA_VISIBLE_DEVICES)
        or a custom resource declared with `ray start --resources` (then no CUDA_VISIBLE_DEVICES:
        on a real GPU machine use "GPU").
    runs_per_gpu: candidates one GPU actor judges at once (its evaluator's max_workers); None
        means the EvalConfig's max_workers. Checking and timing stay exclusive on the GPU.
    actors: number of actors when not claiming GPUs; None means one per alive node.
    cpus_per_actor: Ray CPUs each actor claims.
    max_retries: extra attempts for a candidate whose actor died (or whose evaluator raised
        OSError / MemoryError) before it gets a `worker_lost` runtime_error.
    start_timeout_s: how long a batch may wait with no actor able to start before it fails.
    max_start_failures: actor starts that may fail in a row (an import error, a bad environment
        on the nodes) before the queued candidates fail with the last start error.
    rescan_s: how often the cluster is checked for new or lost nodes while judging.
    """

    address: str | None = None
    use_gpus: bool | None = None
    gpu_resource: str = "GPU"
    runs_per_gpu: int | None = None
    actors: int | None = None
    cpus_per_actor: float = 1.0
    max_retries: int = 3
    start_timeout_s: float = 300.0
    max_start_failures: int = 3
    rescan_s: float = 5.0

    def __post_init__(self) -> None:
        if self.runs_per_gpu is not None and not 1 <= self.runs_per_gpu <= 64:
            raise ValueError("RayPoolConfig.runs_per_gpu must be in 1..64 (or None: max_workers)")
        if not self.gpu_resource or not isinstance(self.gpu_resource, str):
            raise ValueError("RayPoolConfig.gpu_resource must name a Ray resource, e.g. 'GPU'")
        if self.actors is not None and self.actors < 1:
            raise ValueError("RayPoolConfig.actors must be >= 1 (or None: one per node)")
        if self.cpus_per_actor < 0:
            raise ValueError("RayPoolConfig.cpus_per_actor must be >= 0")
        if self.max_retries < 0:
            raise ValueError("RayPoolConfig.max_retries must be >= 0 (a candidate that kills "
                             "its judge would otherwise be retried forever)")
        if self.start_timeout_s <= 0 or self.rescan_s <= 0:
            raise ValueError("RayPoolConfig.start_timeout_s and rescan_s must be positive")

    def claims_gpus(self, config: EvalConfig) -> bool:
        return self.use_gpus if self.use_gpus is not None else config.device == "cuda"


class RayPoolError(RuntimeError):
    """Some candidates could not be judged: the evaluator raised (a KernelZero bug) or no actor
    could start. `failures` maps index -> reason."""

    def __init__(self, failures: dict[int, str]):
        self.failures = failures
        first = min(failures)
        super().__init__(f"{len(failures)} candidate(s) could not be judged; first: "
                         f"#{first}: {failures[first]}")


@dataclass
class _Job:
    pair: tuple
    future: Future
    attempts: int = 0
    task_hash: str = ""  # pair[0].hash, hashed once: placement reads it often


class RayPool:
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
        """Fill the ready actors' free slots from the queue (placement: the module docstring)."""
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


def _first_line(e: BaseException) -> str:
    """The useful line of a Ray error (the cause's last line: its exception type and message)."""
    lines = [line.strip() for line in str(e).strip().splitlines() if line.strip()]
    return (lines[-1] if lines else type(e).__name__)[:300]
