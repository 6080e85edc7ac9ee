"""The judging actors of a RayPool: what runs on each node, and the driver's set of them.

- `JudgeActor`: one warm `Evaluator` in a Ray actor on one node (and, on CUDA, one GPU: the actor
  claims one unit of the GPU resource, and Ray sets its CUDA_VISIBLE_DEVICES for its whole life).
  Several of the pool's threads call `judge` at once (up to its slots); the evaluator serialises
  their GPU phases itself. Actors, not one-shot tasks, because the evaluator keeps state worth
  keeping (reference outputs and timings, started spare workers, CUDA IPC handles opened in the
  judge process, which ties that process to one GPU for its life).
- `JudgeActors`: the driver's record of them: as many as the cluster has room for (one per unit
  of the claimed resource, else a set number or one per alive node), each started with its
  claims and marked ready once its `ready()` answers; a lost one is dropped (killed, should it
  still run) and replaced at the next `scale`.

Does not cover which actor gets a candidate (ray_placement.py), nor what becomes of the
candidates a lost actor held (ray_scheduler.py). The owner calls every JudgeActors method under its
own lock.
"""
from __future__ import annotations

import dataclasses
import itertools
import os
import time
from dataclasses import dataclass
from typing import Callable

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.pools.ray_hints import HINT_GROUP
from kernelzero.eval.verdict import Verdict


def default_evaluator_factory(cfg: EvalConfig):
    from kernelzero.eval import Evaluator
    from kernelzero.eval.pools.warm_up import warm_up_in_background
    ev = Evaluator(cfg)
    warm_up_in_background(ev)
    return ev


class JudgeActor:
    """One warm evaluator on one node; `judge` is called from several actor threads at once."""

    def __init__(self, factory: Callable, cfg: EvalConfig):
        import ray

        ctx = ray.get_runtime_context()
        self.where = {"node_id": ctx.get_node_id(), "pid": os.getpid(),
                      "gpu_ids": [str(g) for g in ctx.get_accelerator_ids().get("GPU", [])],
                      "resources": dict(ctx.get_assigned_resources())}
        self.ev = factory(cfg)

    def ready(self) -> dict:
        return self.where

    def warm_up(self, timeout_s: float) -> int:
        return self.ev.warm_up(timeout_s) if hasattr(self.ev, "warm_up") else 0

    def expect(self, takes: int | None) -> None:
        """About `takes` workers will be taken by this evaluator until the next hint (None: no
        batch in progress); see `SparePool.expect`. Evaluators without a spare pool ignore it."""
        spares = getattr(self.ev, "spares", None)
        if hasattr(spares, "expect"):
            spares.expect(takes)

    def judge(self, task, cand) -> tuple[Verdict, dict]:
        started = time.time()
        verdict = self.ev.judge(task, cand)
        return verdict, {**self.where, "started": started, "ended": time.time()}


@dataclass
class Judge:
    """The driver's record of one actor."""

    handle: object
    slots: int
    ready: bool = False
    busy: int = 0
    where: dict = dataclasses.field(default_factory=dict)
    created: float = dataclasses.field(default_factory=time.time)


class JudgeActors:
    def __init__(self, ray, factory: Callable, cfg: EvalConfig, slots: int, claim: str | None,
                 cpus: float, count: int | None):
        """factory(cfg): the judge inside each actor (picklable); cfg: its EvalConfig; slots:
        candidates one actor judges at once; claim: the resource each actor claims one unit of
        ("GPU", a custom one, or None); cpus: Ray CPUs each claims; count: how many actors
        without a claim (None: one per alive node)."""
        self._ray, self._args, self.slots = ray, (factory, cfg), slots
        self.claim, self.count = claim, count
        self._cls = ray.remote(concurrency_groups={HINT_GROUP: 1})(JudgeActor)
        self._options = {"num_cpus": cpus, "max_concurrency": slots, "max_restarts": 0,
                         "scheduling_strategy": "SPREAD"}
        if claim is not None:
            self._options.update({"num_gpus": 1} if claim == "GPU" else {"resources": {claim: 1}})
        self.by_id: dict[int, Judge] = {}
        self.starting: dict = {}  # ObjectRef of ready() -> actor id
        self._ids = itertools.count()

    def desired(self) -> int:
        """How many actors the cluster has room for now."""
        if self.claim is not None:
            return int(self._ray.cluster_resources().get(self.claim, 0) + 1e-6)
        if self.count is not None:
            return self.count
        return max(1, sum(1 for n in self._ray.nodes() if n.get("Alive")))

    def scale(self) -> None:
        """Start actors until there are as many as the cluster has room for."""
        while len(self.by_id) < self.desired():
            handle = self._cls.options(**self._options).remote(*self._args)
            aid = next(self._ids)
            self.by_id[aid] = Judge(handle, self.slots)
            self.starting[handle.ready.remote()] = aid

    def ready(self) -> list:
        """The ready actors' handles."""
        return [a.handle for a in self.by_id.values() if a.ready]

    def drop(self, aid: int) -> bool:
        """Forget actor `aid` and kill it, should it still run; whether it was one of them."""
        actor = self.by_id.pop(aid, None)
        if actor is None:
            return False
        try:
            self._ray.kill(actor.handle)
        except Exception:  # already gone with its node
            pass
        return True

    def close(self) -> None:
        """Kill every actor."""
        for aid in list(self.by_id):
            self.drop(aid)
