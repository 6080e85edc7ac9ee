"""Propose N validated modules: sample API sets, make modules, validate, keep the first N.

Candidates come from the composer (default) or an LLM proposer, in an order fixed by the seed.
Cheap filters run first and are counted apart from validation: API sets the composer cannot
build (`compose_failed`) and modules equivalent to one already tried (`pre_duplicate`, by
canonical AST form). The rest are validated in the evaluator's sandbox, `workers` sandboxes at a
time with `bundle_size` modules each, and accepted strictly in candidate order, so the output
depends only on the seed and the config (and, for an LLM, on the backend's determinism), never
on which sandbox run finished first.
Not covered: writing files (commands/propose_cmd.py) or the Proposer's training step.
"""
from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

from kernelzero.catalog.cooccurrence import Distribution, load_default
from kernelzero.catalog.specs import get_spec
from kernelzero.propose.builder import ComposeError
from kernelzero.propose.composer import ComposeConfig, Composer
from kernelzero.propose.dedup import canonical_hash
from kernelzero.propose.validate import ValidationConfig, ValidationResult, Validator
from kernelzero.tasks.task import source_hash


@dataclass
class ProposeConfig:
    """n: validated modules wanted. apis: operators per API set. seed: fixes everything sampled.
    target: machine model the modules are sized for (cpu, h100, h200). workers: sandbox runs in
    flight. bundle: modules validated per sandbox start (see bundle_size). max_candidates: give
    up after this many candidates (default 5 n + 20)."""

    n: int
    apis: int = 2
    seed: int = 0
    target: str = "cpu"
    workers: int = 2
    bundle: int | None = None
    max_candidates: int | None = None

    def __post_init__(self) -> None:
        if self.n < 1 or self.apis < 1 or self.workers < 1:
            raise ValueError("ProposeConfig needs n >= 1, apis >= 1 and workers >= 1")
        if self.bundle is not None and self.bundle < 1:
            raise ValueError("ProposeConfig.bundle must be >= 1 (or None for the default)")

    @property
    def bundle_size(self) -> int:
        """Modules per sandbox start: 8 for CPU-sized modules, 1 for GPU-sized ones (memory)."""
        return self.bundle or (8 if self.target == "cpu" else 1)

    @property
    def budget(self) -> int:
        return self.max_candidates or 5 * self.n + 20


@dataclass
class Candidate:
    index: int
    apis: list[str]
    source: str | None
    origin: str
    meta: dict = field(default_factory=dict)
    error: str = ""


@dataclass
class Accepted:
    name: str
    source: str
    apis: list[str]
    origin: str
    task_hash: str
    canonical_hash: str
    meta: dict
    figures: dict


@dataclass
class ProposeReport:
    accepted: list[Accepted] = field(default_factory=list)
    candidates: int = 0
    validated: int = 0
    filtered: Counter = field(default_factory=Counter)   # compose_failed, pre_duplicate, parse
    rejections: Counter = field(default_factory=Counter)  # validation codes
    wall_s: float = 0.0

    @property
    def pass_rate(self) -> float | None:
        """Share of modules sent to validation that passed it."""
        return len(self.accepted) / self.validated if self.validated else None

    def summary(self) -> dict:
        return {"accepted": len(self.accepted), "candidates": self.candidates,
                "validated": self.validated, "validation_pass_rate": self.pass_rate,
                "filtered": dict(self.filtered), "rejections": dict(self.rejections),
                "wall_s": round(self.wall_s, 2),
                "valid_per_min": round(60 * len(self.accepted) / self.wall_s, 2) if self.wall_s else None}


def module_name(order: list[str]) -> str:
    parts = []
    for op in order:
        tail = get_spec(op).call.split(".")[-1]
        parts.append(tail[:1].upper() + tail[1:])
    return "_".join(parts)


def composer_candidates(cfg: ProposeConfig, dist: Distribution) -> Iterator[Candidate]:
    rng = random.Random(cfg.seed)
    comp = Composer(ComposeConfig(target=cfg.target))
    i = 0
    while True:
        apis = dist.sample(rng, cfg.apis)
        try:
            c = comp.compose(apis, rng)
        except ComposeError as e:
            yield Candidate(i, apis, None, "composer", error=f"compose_failed: {e}")
        else:
            yield Candidate(i, apis, c.source, "composer", meta=c.manifest())
        i += 1


def llm_candidates(cfg: ProposeConfig, dist: Distribution, proposer, batch: int = 8,
                   weaknesses: str = "") -> Iterator[Candidate]:
    rng = random.Random(cfg.seed)
    i = 0
    while True:
        sets = [dist.sample(rng, cfg.apis) for _ in range(batch)]
        for apis, row in zip(sets, proposer.propose(sets, weaknesses, n=1)):
            if not row:
                yield Candidate(i, apis, None, "llm", error="parse: the backend gave no answer")
                i += 1
            for p in row:
                if p.source is None:
                    yield Candidate(i, apis, None, "llm", error=f"parse: {p.error}")
                else:
                    yield Candidate(i, apis, p.source, "llm")
                i += 1


def propose_modules(cfg: ProposeConfig, evaluator, candidates: Iterator[Candidate] | None = None,
                    dist: Distribution | None = None, validation: ValidationConfig | None = None,
                    on_progress: Callable[[ProposeReport], None] | None = None) -> ProposeReport:
    dist = dist or load_default()
    candidates = candidates or composer_candidates(cfg, dist)
    validator = Validator(evaluator, validation or ValidationConfig(target=cfg.target))
    report, seen = ProposeReport(), set()
    t0 = time.perf_counter()
    with ThreadPoolExecutor(cfg.workers) as pool:
        while len(report.accepted) < cfg.n and report.candidates < cfg.budget:
            batch: list[Candidate] = []
            while len(batch) < cfg.workers * cfg.bundle_size and report.candidates < cfg.budget:
                c = next(candidates)
                report.candidates += 1
                if c.source is None:
                    report.filtered[c.error.split(":", 1)[0]] += 1
                    continue
                h = canonical_hash(c.source) if _parses(c.source) else source_hash(c.source)
                if h in seen:
                    report.filtered["pre_duplicate"] += 1
                    continue
                seen.add(h)
                batch.append(c)
            chunks = [batch[i::cfg.workers] for i in range(cfg.workers)]
            done = list(pool.map(lambda ch: validator.validate_many(
                [(c.source, c.apis, f"cand{c.index}") for c in ch], remember=False), chunks))
            by_index = {c.index: r for ch, rs in zip(chunks, done) for c, r in zip(ch, rs)}
            results: list[ValidationResult] = [by_index[c.index] for c in batch]
            for c, res in zip(batch, results):
                if len(report.accepted) >= cfg.n:
                    break  # validated beyond the need: neither counted nor kept
                report.validated += 1
                if not res.ok:
                    report.rejections.update(set(res.codes))
                    continue
                validator.deduper.hashes.add(res.canonical_hash)
                order = c.meta.get("order", c.apis)
                report.accepted.append(Accepted(
                    name=module_name(order), source=c.source, apis=c.apis, origin=c.origin,
                    task_hash=source_hash(c.source), canonical_hash=res.canonical_hash,
                    meta=c.meta, figures=res.figures))
            report.wall_s = time.perf_counter() - t0
            if on_progress:
                on_progress(report)
    report.wall_s = time.perf_counter() - t0
    return report


def _parses(source: str) -> bool:
    try:
        compile(source, "<c>", "exec", dont_inherit=True)
        return True
    except SyntaxError:
        return False
