"""The verdict: the one record the evaluator returns for a (task, candidate) pair.

A verdict is plain data (JSON-serialisable, no tensors, no exceptions). Every failure is a field
of it: a timeout or a crash is `status`, never an exception escaping into the judge. `correct` is
true only when `status == "correct"`. Timing fields are null whenever nothing was timed (CPU runs,
failed candidates): the evaluator never invents a figure.
"""
from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field
from typing import Literal, get_args

Status = Literal[
    "correct",        # every correctness trial matched the reference within tolerance
    "incorrect",      # ran, but some output differed (shape, dtype, value, finiteness)
    "compile_error",  # Python syntax error or a CUDA/Triton build failure
    "runtime_error",  # raised, crashed (segfault, CUDA error) or ran out of memory
    "timeout",        # did not finish within its wall-clock limit; the process group was killed
    "rejected",       # refused by policy (e.g. a CUDA kernel on a CPU-only machine, forbidden ops)
    "format_error",   # no usable code: empty, or no `ModelNew` class
    "invalid_task",   # the reference itself is broken (does not load, raises, hangs)
]
STATUSES: tuple[str, ...] = get_args(Status)


@dataclass
class Timing:
    """Runtime of one module in milliseconds, from CUDA events over `n` timed calls."""

    median_ms: float
    iqr_ms: float  # inter-quartile range (q75 - q25), the spread we report
    mean_ms: float
    min_ms: float
    n: int

    @classmethod
    def from_samples(cls, samples_ms: list[float]) -> "Timing":
        import statistics

        xs = sorted(samples_ms)
        q = statistics.quantiles(xs, n=4, method="inclusive") if len(xs) >= 2 else [xs[0]] * 3
        return cls(median_ms=statistics.median(xs), iqr_ms=q[2] - q[0],
                   mean_ms=statistics.fmean(xs), min_ms=xs[0], n=len(xs))


@dataclass
class Verdict:
    status: Status
    reason: str
    backend: str = "unknown"          # triton | cuda | none | unknown
    device: str = "cpu"
    policy: str = "strict"
    flags: list[str] = field(default_factory=list)
    trials_run: int = 0                # correctness trials that ran
    trials_passed: int = 0             # ... and matched the reference
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    runtime_ms: Timing | None = None
    ref_runtime_ms: Timing | None = None
    speedup: float | None = None       # eager reference median / candidate median
    ref_compile_runtime_ms: Timing | None = None
    speedup_compile: float | None = None  # torch.compile reference median / candidate median
    library_share: float | None = None  # share of GPU kernel time in cuBLAS/cuDNN (strict, cuda)
    task_hash: str = ""
    candidate_hash: str = ""
    env: dict = field(default_factory=dict)
    wall_s: float | None = None       # wall-clock time spent judging this candidate
    phases_s: dict = field(default_factory=dict)  # load, reference wait, GPU wait, correctness, timing
    # How the timed loops ran, for "candidate" and "reference": warm-up calls, launch spin,
    # calls whose launch outlasted it, allocator calls inside the loop (diagnostics only).
    timing_details: dict = field(default_factory=dict)
    # Device memory (bytes): the task's footprint (footprint.py), what the judgement was admitted
    # for, the peaks the candidate's and the reference's workers reached, whether streamed.
    memory: dict = field(default_factory=dict)
    log_tail: str = ""                # last lines the candidate printed (for debugging only)

    @property
    def correct(self) -> bool:
        return self.status == "correct"

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["correct"] = self.correct
        d["trials"] = {"run": self.trials_run, "passed": self.trials_passed}
        d["hashes"] = {"task": self.task_hash, "candidate": self.candidate_hash}
        return d

    def to_json(self, **kw) -> str:
        return json.dumps(self.to_dict(), **kw)

    @classmethod
    def from_dict(cls, d: dict) -> "Verdict":
        names = {f.name for f in dataclasses.fields(cls)}
        kw = {k: v for k, v in d.items() if k in names}
        for k in ("runtime_ms", "ref_runtime_ms", "ref_compile_runtime_ms"):
            if isinstance(kw.get(k), dict):
                kw[k] = Timing(**kw[k])
        return cls(**kw)
