"""Pools: where candidates are judged, behind one API (`judge`, `judge_many`, `close`).

- `local`: the `Evaluator` in this process, judging in sandboxed workers on this machine.
- `ray`: `RayPool` (ray_pool.py), the same evaluator in Ray actors (one per GPU) on every node
  of a cluster; its settings (`RayPoolConfig`): ray_config.py; its scheduler thread (queue,
  answers, retries): ray_scheduler.py; the actors themselves: ray_actors.py; which actor gets a
  candidate: ray_placement.py; how many workers each actor is told to expect: ray_hints.py. Ray
  is imported only when this kind is asked for.

Here: `make_pool` picks a pool by kind, `pool_kind(pool)` names one ("local", "ray"), and
`warm_up_in_background` (warm_up.py) starts a pool's spare workers before its first batch.
Every pool is a context manager. The HTTP client (`kernelzero.serve.client.RewardClient`) has
the same API but lives above `eval`; the trainer picks it when `reward.url` is set.
"""
from __future__ import annotations

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.pools.warm_up import warm_up_in_background

__all__ = ["POOL_KINDS", "make_pool", "pool_kind", "warm_up_in_background"]

POOL_KINDS = ("local", "ray")


def make_pool(kind: str, config: EvalConfig, ray_address: str | None = None, **ray_options):
    """An `Evaluator` (kind="local") or a `RayPool` (kind="ray") judging under `config`.

    ray_address: the Ray cluster to join (None: a private local cluster, or $RAY_ADDRESS;
        "auto": the cluster started on this machine with `ray start`). Only for kind="ray".
    ray_options: fields of `RayPoolConfig` (gpus_per_run, gpu_resource, max_retries, ...).
    """
    if kind == "local":
        if ray_address is not None or ray_options:
            raise ValueError("ray_address and Ray options apply only to the 'ray' pool")
        from kernelzero.eval import Evaluator

        return Evaluator(config)
    if kind == "ray":
        from kernelzero.eval.pools.ray_config import RayPoolConfig
        from kernelzero.eval.pools.ray_pool import RayPool

        return RayPool(config, RayPoolConfig(address=ray_address, **ray_options))
    raise ValueError(f"pool kind {kind!r}: choose one of {POOL_KINDS}")


def pool_kind(pool) -> str:
    """The kind of a pool ("local" for the Evaluator, else its `kind`, else its class name)."""
    kind = getattr(pool, "kind", None)
    if isinstance(kind, str):
        return kind
    return "local" if type(pool).__name__ == "Evaluator" else type(pool).__name__
