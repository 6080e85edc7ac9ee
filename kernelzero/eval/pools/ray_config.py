"""How a RayPool is set up: `RayPoolConfig` (which cluster it joins, what each judging actor
claims, how many candidates it judges at once, how failures are retried and how long a batch
waits for an actor), and `import_ray` (Ray is an optional dependency: without it, the install
hint).

Does not cover the pool itself (ray_pool.py) nor its actors (ray_actors.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelzero.eval.config import EvalConfig

INSTALL_HINT = ("the Ray pool needs Ray: pip install 'kernelzero[ray]' (or pip install "
                "'ray[default]'), on every node of the cluster")


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
