"""EvalConfig: how candidates are judged, and RuntimeConfig: how fast the judge gets there.
Every knob documented once and validated when built."""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Literal

TOLERANCES = {
    # name: {dtype: (atol, rtol)}; dtypes not listed use the fp32 entry.
    "strict": {"float32": (1e-4, 1e-4), "float64": (1e-7, 1e-7),
               "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)},
    "paper": {"float32": (1e-2, 1e-2), "float64": (1e-2, 1e-2),
              "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)},
}


def _check_choices(config, choices: dict) -> None:
    for name, allowed in choices.items():
        if getattr(config, name) not in allowed:
            raise ValueError(f"{type(config).__name__}.{name}={getattr(config, name)!r}: "
                             f"choose one of {allowed}")


@dataclass
class RuntimeConfig:
    """The evaluator's throughput machinery: worker processes, device memory, and how outputs
    reach the judge. None of these changes what a verdict says (EvalConfig.JUDGING_FIELDS).

    Workers:
    compile_jobs: parallel jobs of one CUDA extension build (MAX_JOBS of torch's ninja). None:
        the host's cores shared among max_workers judgements (builds.py).
    start_method: how worker processes start: `spawn` (a fresh `python -I` each), `fork` (forked
        from a fork server that imported torch once; see kernelzero/eval/sandbox/forkserver.py), or
        `auto`: fork on the CPU, spawn on cuda (fork is not yet measured on a GPU).
    prestart: keep spare worker processes started (torch imported, CUDA ready) so start-up is
        off the critical path; each process still judges exactly one module.
    spares: how many (None: 2 max_workers + 2 on cuda, where a start takes seconds; max_workers
        + 1 on the CPU); on cuda at most what a third of the card's memory holds at
        worker_overhead_mb each (EvalConfig.spares_on). A batch needs one worker per candidate
        and one per new task: a spare pool smaller than that starts the rest while the batch
        waits (`take_s` in phases_s).
    spare_reserve_mb: GPU memory (MiB) each spare allocates while warming and hands back to its
        own caching allocator, so the first correctness trial's large allocations are carved
        from it instead of going to the driver while other processes share the GPU. Idle spares
        hold it: spares x this much of the GPU. 0 (the default): none.

    Device memory:
    load_reserve_factor / load_reserve_max_mb: on cuda, each worker, once its judgement is
        admitted (memory_budget_mb) and before the GPU lock is taken, takes about
        load_reserve_factor times one call's input bytes plus the model's weights (the task's
        footprint), at most load_reserve_max_mb MiB and what it was admitted for, from the
        driver and hands it back to its own caching allocator, where its trials find it
        (reserve.py): only memory the trials would allocate anyway, taken earlier, released
        with the worker. A factor of 0 turns it off.
    memory_budget_mb: device memory the judge plans its judgements into: each is admitted once
        its footprint (footprint.py) fits beside the others' (memory_gate.py). None: on cuda,
        the memory free when the evaluator starts, less memory_margin_mb and worker_overhead_mb
        for each spare worker; no limit on the CPU.
    memory_margin_mb: device memory the budget leaves to the rest (the judge's own CUDA
        context and comparison scratch, other processes' growth).
    worker_overhead_mb: device memory one worker holds beyond its tensors (CUDA context, library
        handles and workspaces), counted for every worker a judgement runs.
    reference_store_mb: the largest size of one task's reference outputs (every trial's) the
        judge keeps; a task over it is streamed: each judgement runs the reference again beside
        its candidate, trial by trial, and compares at once (evaluator.py). None: an eighth of
        the memory budget (no limit without one).
    stream_chunk_mb: the outputs of the trials one `run` request returns take at most this much
        (at least one trial a request): the judge holds their copies until they are compared.

    Outputs:
    transfer: how CUDA outputs reach the judge: `ipc` shares GPU memory (compared on the GPU, no
        host copies; `auto` picks it on cuda), `host` copies through shared host memory.
    ipc_output_pool: with `ipc`, workers copy the outputs they share into a memory pool of their
        own, each in an allocation sized to it (cuda_ipc.output_pool), so that the judge maps
        output-sized allocations, not the large ones the copies are otherwise cut from.
    ipc_min_bytes: with `ipc`, output tensors smaller than this go through shared host memory
        instead: copying them is cheap, while every CUDA IPC mapping is a driver call, which
        other processes' allocations and frees can hold up (50-680 ms of decoding per candidate
        measured under load, docs/perf.md).
    ipc_arena: with `ipc`, each worker copies the outputs it shares into one allocation (its
        arena, cuda_ipc.Arena) which the judge maps once: a candidate's is sized from the
        reference's outputs and mapped before the GPU lock is taken, so no mapping is left
        inside the lock's holds (the timed calls' re-checked outputs included); a reference's
        is made at its first output. Outputs that do not fit get allocations of their own.
    """

    compile_jobs: int | None = None
    start_method: Literal["auto", "spawn", "fork"] = "auto"
    prestart: bool = True
    spares: int | None = None
    spare_reserve_mb: int = 0
    load_reserve_factor: float = 6.0
    load_reserve_max_mb: int = 4096
    memory_budget_mb: int | None = None
    memory_margin_mb: int = 4096
    worker_overhead_mb: int = 1024
    reference_store_mb: int | None = None
    stream_chunk_mb: int = 1024
    transfer: Literal["auto", "ipc", "host"] = "auto"
    ipc_output_pool: bool = True
    ipc_min_bytes: int = 2 << 20
    ipc_arena: bool = True

    def __post_init__(self) -> None:
        _check_choices(self, {"transfer": ("auto", "ipc", "host"),
                              "start_method": ("auto", "spawn", "fork")})
        for name in ("spare_reserve_mb", "load_reserve_factor", "load_reserve_max_mb",
                     "ipc_min_bytes", "memory_margin_mb", "worker_overhead_mb",
                     "stream_chunk_mb"):
            if getattr(self, name) < 0:
                raise ValueError(f"RuntimeConfig.{name} must be >= 0")
        for name in ("memory_budget_mb", "reference_store_mb", "spares"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"RuntimeConfig.{name} must be >= 0 (or None for the default)")
        if self.compile_jobs is not None and self.compile_jobs < 1:
            raise ValueError("RuntimeConfig.compile_jobs must be >= 1 (or None for the default)")

    @classmethod
    def from_dict(cls, section: dict) -> RuntimeConfig:
        """A RuntimeConfig from a config file's `runtime` section, naming any unknown key."""
        allowed = [f.name for f in dataclasses.fields(cls)]
        unknown = [k for k in section if k not in allowed]
        if unknown:
            raise ValueError(f"EvalConfig.runtime: unknown key{'s' if len(unknown) > 1 else ''} "
                             f"{', '.join(map(repr, unknown))}; allowed: {', '.join(allowed)}")
        return cls(**section)


@dataclass
class EvalConfig:
    """How candidates are judged.

    device: `cpu` runs Triton through the interpreter (no timing); `cuda` compiles, runs and times.
    backend: `auto` detects the kernel language from the source; `triton`/`cuda` force it.
    policy: `strict` (work in own kernels; the default), `kernelbench` (torch ops allowed, but a
        custom kernel must exist) or `none` (no policy checks: only for benchmarking the
        evaluator itself with trivially correct candidates).
    tolerance: `strict` (fp32 atol=rtol=1e-4, fp16/bf16 1e-2) or `paper` (1e-2 everywhere).
    correctness_trials: trials with fresh inputs from the secret seed schedule (at least 5).
    hardening_trials: three more trials whose float inputs are re-drawn from other distributions
        (signed normal, offset and scaled, heavy-tailed), counted where the reference stays finite.
    poke_trial: one more trial: the second trial's inputs again, in the same buffers, with a few
        elements changed in place (a kernel that memoises its result by a sample of its input
        answers stale there; trials.py).
    timing: whether to time on a GPU (ignored on CPU, where timing fields stay null).
    timing_warmup: untimed calls before timing: at least this many ...
    timing_warmup_ms: ... and at least this much wall time of them, so that the GPU has left its
        idle clocks before the first timed call (a few calls of a 0.1-ms kernel are not enough;
        `triton.testing.do_bench` warms up for 25 ms).
    timing_min_trials / timing_max_trials: the stopping rule is "at least min trials, then stop
        once the IQR is within timing_rel_spread of the median, or max trials, or the budget".
    timing_budget_s: wall-clock budget for the timed calls of one module.
    timing_checked_calls: timed calls whose outputs are sent back and re-checked.
    compile_baseline: also time `torch.compile(Model)` and report `speedup_compile`.
    max_library_share: under `strict` on cuda, the largest share of a call's GPU kernel time that
        may run in vendor-library kernels (cuBLAS, cuDNN; see library_share.py); above it the
        candidate is `rejected` (`library_compute`), and the share is reported in the verdict.
        None profiles nothing (one profiled call per correct candidate is saved).
    load_timeout_s: limit for importing/compiling a candidate and building it.
    run_timeout_s: limit for the correctness trials (all of them) and again for timing.
    max_workers: candidate workers alive at once (compiles overlap; GPU phases are serialised).
    seed: the secret seed of the input schedule; None draws one from os.urandom per evaluator.
    work_dir: where worker temp dirs and build caches go (None: the system's temp dir).
    runtime: the throughput machinery (RuntimeConfig; a mapping of its fields is converted).
    """

    device: Literal["cpu", "cuda"] = "cpu"
    backend: Literal["auto", "triton", "cuda"] = "auto"
    policy: Literal["strict", "kernelbench", "none"] = "strict"
    tolerance: Literal["strict", "paper"] = "strict"
    correctness_trials: int = 5
    hardening_trials: bool = True
    poke_trial: bool = True
    timing: bool = True
    timing_warmup: int = 3
    timing_warmup_ms: float = 50.0
    timing_min_trials: int = 20
    timing_max_trials: int = 100
    timing_rel_spread: float = 0.02
    timing_budget_s: float = 5.0
    timing_checked_calls: int = 3
    compile_baseline: bool = False
    max_library_share: float | None = 0.5
    load_timeout_s: float = 300.0
    run_timeout_s: float = 120.0
    max_workers: int = 4
    seed: int | None = None
    work_dir: str | None = None
    runtime: RuntimeConfig = field(default_factory=RuntimeConfig)

    def __post_init__(self) -> None:
        _check_choices(self, {"device": ("cpu", "cuda"), "backend": ("auto", "triton", "cuda"),
                              "policy": ("strict", "kernelbench", "none"),
                              "tolerance": tuple(TOLERANCES)})
        if self.correctness_trials < 1:
            raise ValueError("EvalConfig.correctness_trials must be >= 1 (5 or more recommended)")
        if not 1 <= self.timing_min_trials <= self.timing_max_trials:
            raise ValueError("EvalConfig needs 1 <= timing_min_trials <= timing_max_trials")
        if self.max_library_share is not None and not 0.0 <= self.max_library_share <= 1.0:
            raise ValueError("EvalConfig.max_library_share must be None or within [0, 1]")
        if self.max_workers < 1:
            raise ValueError("EvalConfig.max_workers must be >= 1")
        if self.timing_warmup < 0 or self.timing_warmup_ms < 0:
            raise ValueError("EvalConfig.timing_warmup and timing_warmup_ms must be >= 0")
        for name in ("load_timeout_s", "run_timeout_s", "timing_budget_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"EvalConfig.{name} must be positive")
        if isinstance(self.runtime, dict):
            self.runtime = RuntimeConfig.from_dict(self.runtime)
        if not isinstance(self.runtime, RuntimeConfig):
            raise ValueError(f"EvalConfig.runtime={self.runtime!r}: give a RuntimeConfig or a "
                             f"mapping of its fields")

    # The knobs that change what a verdict says (not how fast it is reached): two judges agree on
    # a candidate only when these agree (the reward service reports them in /health).
    JUDGING_FIELDS = ("device", "backend", "policy", "tolerance", "correctness_trials",
                      "hardening_trials", "poke_trial", "timing", "timing_warmup", "timing_warmup_ms",
                      "timing_min_trials", "timing_max_trials", "timing_rel_spread",
                      "timing_checked_calls", "compile_baseline", "max_library_share")

    def judging_settings(self) -> dict:
        return {k: getattr(self, k) for k in self.JUDGING_FIELDS}

    def tolerance_for(self, dtype: str) -> tuple[float, float]:
        table = TOLERANCES[self.tolerance]
        return table.get(dtype, table["float32"])

    @property
    def timed(self) -> bool:
        return self.timing and self.device == "cuda"

    # What the runtime knobs come to on this device with this many workers.

    def load_options(self) -> dict:
        """The `load` command's output-sharing fields (worker.Worker._write)."""
        rt = self.runtime
        return {"ipc_pool": rt.ipc_output_pool, "ipc_min_bytes": rt.ipc_min_bytes,
                "ipc_arena": rt.ipc_arena}

    @property
    def transfer_mode(self) -> str:
        """RuntimeConfig.transfer resolved: `host` off cuda, `ipc` for `auto` on it."""
        if self.device != "cuda":
            return "host"
        return "ipc" if self.runtime.transfer == "auto" else self.runtime.transfer

    @property
    def worker_start(self) -> str:
        """RuntimeConfig.start_method resolved: `fork` on the CPU and `spawn` on cuda for `auto`."""
        if self.runtime.start_method != "auto":
            return self.runtime.start_method
        return "fork" if self.device == "cpu" else "spawn"

    @property
    def spare_pool_size(self) -> int:
        """RuntimeConfig.spares, or its default: 2 max_workers + 2 on cuda, max_workers + 1 on
        the CPU."""
        if self.runtime.spares is not None:
            return self.runtime.spares
        return 2 * self.max_workers + 2 if self.device == "cuda" else self.max_workers + 1

    def spares_on(self, gpu_bytes: int | None) -> int:
        """spare_pool_size on a card of `gpu_bytes`: at most as many as a third of its memory
        holds at worker_overhead_mb each. A spare holds its CUDA context and library handles
        (729 MiB measured on an H100): a trainer's 72 spares took 52 of the card's 80 GB, which
        left its judgements no memory budget, so they ran one at a time (docs/perf.md)."""
        size = self.spare_pool_size
        if self.device != "cuda" or not gpu_bytes:
            return size
        return min(size, max(1, gpu_bytes // 3 // (self.runtime.worker_overhead_mb << 20)))
