"""EvalConfig: every knob of the evaluator, documented once, validated when built."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

TOLERANCES = {
    # name: {dtype: (atol, rtol)}; dtypes not listed use the fp32 entry.
    "strict": {"float32": (1e-4, 1e-4), "float64": (1e-7, 1e-7),
               "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)},
    "paper": {"float32": (1e-2, 1e-2), "float64": (1e-2, 1e-2),
              "float16": (1e-2, 1e-2), "bfloat16": (1e-2, 1e-2)},
}


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
    compile_jobs: parallel jobs of one CUDA extension build (MAX_JOBS of torch's ninja). None:
        the host's cores shared among max_workers judgements (builds.py).
    load_timeout_s: limit for importing/compiling a candidate and building it.
    run_timeout_s: limit for the correctness trials (all of them) and again for timing.
    max_workers: candidate workers alive at once (compiles overlap; GPU phases are serialised).
    prestart: keep spare worker processes started (torch imported, CUDA ready) so start-up is
        off the critical path; each process still judges exactly one module.
    spares: how many (None: 2 max_workers + 2 on cuda, where a start takes seconds; max_workers
        + 1 on the CPU). A batch needs one worker per candidate and one per new task: a spare
        pool smaller than that starts the rest while the batch waits (`take_s` in phases_s).
    spare_reserve_mb: GPU memory (MiB) each spare allocates while warming and hands back to its
        own caching allocator, so the first correctness trial's large allocations are carved
        from it instead of going to the driver while other processes share the GPU. Idle spares
        hold it: spares x this much of the GPU. 0 (the default): none.
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
    transfer: how CUDA outputs reach the judge: `ipc` shares GPU memory (compared on the GPU, no
        host copies; `auto` picks it on cuda), `host` copies through shared host memory.
    ipc_output_pool: with `ipc`, workers copy the outputs they share into a memory pool of their
        own, each in an allocation sized to it (cuda_ipc.output_pool), so that the judge maps
        output-sized allocations, not the large ones the copies are otherwise cut from.
    ipc_min_bytes: with `ipc`, output tensors smaller than this go through shared host memory
        instead: copying them is cheap, while every CUDA IPC mapping is a driver call, which
        other processes' allocations and frees can hold up (50-680 ms of decoding per candidate measured
        under load, docs/perf.md).
    ipc_arena: with `ipc`, each worker copies the outputs it shares into one allocation (its
        arena, cuda_ipc.Arena) which the judge maps once: a candidate's is sized from the
        reference's outputs and mapped before the GPU lock is taken, so no mapping is left
        inside the lock's holds (the timed calls' re-checked outputs included); a reference's
        is made at its first output. Outputs that do not fit get allocations of their own.
    start_method: how worker processes start: `spawn` (a fresh `python -I` each), `fork` (forked
        from a fork server that imported torch once; see kernelzero/eval/sandbox/forkserver.py), or
        `auto`: fork on the CPU, spawn on cuda (fork is not yet measured on a GPU).
    seed: the secret seed of the input schedule; None draws one from os.urandom per evaluator.
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
    compile_jobs: int | None = None
    load_timeout_s: float = 300.0
    run_timeout_s: float = 120.0
    max_workers: int = 4
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
    seed: int | None = None
    start_method: Literal["auto", "spawn", "fork"] = "auto"
    transfer: Literal["auto", "ipc", "host"] = "auto"
    ipc_output_pool: bool = True
    ipc_min_bytes: int = 2 << 20
    ipc_arena: bool = True
    work_dir: str | None = None  # where worker temp dirs and build caches go (default: system tmp)
    extra_flags: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        choices = {"device": ("cpu", "cuda"), "backend": ("auto", "triton", "cuda"),
                   "policy": ("strict", "kernelbench", "none"), "tolerance": tuple(TOLERANCES),
                   "transfer": ("auto", "ipc", "host"),
                   "start_method": ("auto", "spawn", "fork")}
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"EvalConfig.{name}={getattr(self, name)!r}: choose one of {allowed}")
        if self.correctness_trials < 1:
            raise ValueError("EvalConfig.correctness_trials must be >= 1 (5 or more recommended)")
        if not 1 <= self.timing_min_trials <= self.timing_max_trials:
            raise ValueError("EvalConfig needs 1 <= timing_min_trials <= timing_max_trials")
        if self.max_library_share is not None and not 0.0 <= self.max_library_share <= 1.0:
            raise ValueError("EvalConfig.max_library_share must be None or within [0, 1]")
        if self.max_workers < 1:
            raise ValueError("EvalConfig.max_workers must be >= 1")
        for name in ("spare_reserve_mb", "load_reserve_factor", "load_reserve_max_mb",
                     "ipc_min_bytes", "memory_margin_mb", "worker_overhead_mb",
                     "stream_chunk_mb"):
            if getattr(self, name) < 0:
                raise ValueError(f"EvalConfig.{name} must be >= 0")
        for name in ("memory_budget_mb", "reference_store_mb"):
            if getattr(self, name) is not None and getattr(self, name) < 0:
                raise ValueError(f"EvalConfig.{name} must be >= 0 (or None for the default)")
        if self.compile_jobs is not None and self.compile_jobs < 1:
            raise ValueError("EvalConfig.compile_jobs must be >= 1 (or None for the default)")
        if self.spares is not None and self.spares < 0:
            raise ValueError("EvalConfig.spares must be >= 0 (or None for the default)")
        if self.timing_warmup < 0 or self.timing_warmup_ms < 0:
            raise ValueError("EvalConfig.timing_warmup and timing_warmup_ms must be >= 0")
        for name in ("load_timeout_s", "run_timeout_s", "timing_budget_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"EvalConfig.{name} must be positive")

    # The knobs that change what a verdict says (not how fast it is reached): two judges agree on
    # a candidate only when these agree (the reward service reports them in /health).
    JUDGING_FIELDS = ("device", "backend", "policy", "tolerance", "correctness_trials",
                      "hardening_trials", "poke_trial", "timing", "timing_warmup", "timing_warmup_ms",
                      "timing_min_trials", "timing_max_trials", "timing_rel_spread",
                      "timing_checked_calls", "compile_baseline", "max_library_share")

    def load_options(self) -> dict:
        """The `load` command's output-sharing fields (worker.Worker._write)."""
        return {"ipc_pool": self.ipc_output_pool, "ipc_min_bytes": self.ipc_min_bytes,
                "ipc_arena": self.ipc_arena}

    def judging_settings(self) -> dict:
        return {k: getattr(self, k) for k in self.JUDGING_FIELDS}

    def tolerance_for(self, dtype: str) -> tuple[float, float]:
        table = TOLERANCES[self.tolerance]
        return table.get(dtype, table["float32"])

    @property
    def transfer_mode(self) -> str:
        if self.device != "cuda":
            return "host"
        return "ipc" if self.transfer == "auto" else self.transfer

    @property
    def worker_start(self) -> str:
        if self.start_method != "auto":
            return self.start_method
        return "fork" if self.device == "cpu" else "spawn"

    @property
    def spare_pool_size(self) -> int:
        """`spares`, or its default: 2 max_workers + 2 on cuda, max_workers + 1 on the CPU."""
        if self.spares is not None:
            return self.spares
        return 2 * self.max_workers + 2 if self.device == "cuda" else self.max_workers + 1

    @property
    def timed(self) -> bool:
        return self.timing and self.device == "cuda"
