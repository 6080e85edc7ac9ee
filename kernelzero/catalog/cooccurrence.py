"""Co-occurrence distribution of operator APIs, and sampling API sets from it.

`mine(dir)` walks every `*.py` file under a directory, takes the set of catalog operators used in
each `forward` (layers built in `__init__` resolved, see apimap.py) and counts how often each
operator and each pair of operators appear together in one `forward`. The result saves to and
loads from JSON. `Distribution.sample(rng, k)` draws a set of k distinct operators: the first in
proportion to its count, each next one in proportion to its summed pair counts with those already
drawn, plus `smoothing` times its own count (so operators never seen together can still meet).

The distribution shipped with the package (`default_cooccurrence.json`) is NOT mined from real
modules: no corpus of real Torch modules is available offline here. It is hand-weighted by fusion
family (see default_dist.py, which rebuilds it exactly) and says so in its `source` field. Mine a
real corpus (e.g. KernelBench's levels or a model zoo) with `kernelzero catalog mine DIR --out F`
and pass it with `--dist F` to replace it.
"""
from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from kernelzero.catalog.apimap import forward_api_sets
from kernelzero.catalog.specs import SPECS

DEFAULT_PATH = Path(__file__).with_name("default_cooccurrence.json")


def _pair_key(a: str, b: str) -> str:
    return "|".join(sorted((a, b)))


@dataclass
class Distribution:
    """Counts of operators and operator pairs appearing in one `forward`.

    unigram: operator -> number of forwards using it. pairs: "a|b" (sorted) -> number of forwards
    using both. n_modules: forwards counted. source: how the counts were made, in words.
    smoothing: weight of an operator's own count when it has no pair count with the drawn set.
    """

    unigram: dict[str, float] = field(default_factory=dict)
    pairs: dict[str, float] = field(default_factory=dict)
    n_modules: int = 0
    source: str = ""
    smoothing: float = 0.05

    def __post_init__(self) -> None:
        unknown = [a for a in self.unigram if a not in SPECS]
        if unknown:
            raise ValueError(f"distribution names operators not in the catalog: {unknown[:5]}")
        if self.smoothing < 0:
            raise ValueError("Distribution.smoothing must be >= 0")

    # -- building ---------------------------------------------------------------------------------
    def add_set(self, apis: set[str], weight: float = 1.0) -> None:
        apis = {a for a in apis if a in SPECS}
        if not apis:
            return
        self.n_modules += 1
        for a in apis:
            self.unigram[a] = self.unigram.get(a, 0) + weight
        for a, b in combinations(sorted(apis), 2):
            k = _pair_key(a, b)
            self.pairs[k] = self.pairs.get(k, 0) + weight

    def pair(self, a: str, b: str) -> float:
        return self.pairs.get(_pair_key(a, b), 0.0)

    # -- sampling ---------------------------------------------------------------------------------
    def sample(self, rng: random.Random, k: int = 2, allowed: set[str] | None = None) -> list[str]:
        """k distinct operators (sorted by name), drawn as the module docstring describes."""
        pool = sorted(a for a, c in self.unigram.items() if c > 0 and (allowed is None or a in allowed))
        if k < 1 or k > len(pool):
            raise ValueError(f"cannot draw {k} operators from a distribution of {len(pool)}")
        chosen = [_weighted(rng, pool, [self.unigram[a] for a in pool])]
        while len(chosen) < k:
            rest = [a for a in pool if a not in chosen]
            w = [sum(self.pair(a, c) for c in chosen) + self.smoothing * self.unigram[a] for a in rest]
            chosen.append(_weighted(rng, rest, w))
        return sorted(chosen)

    # -- persistence ------------------------------------------------------------------------------
    def to_dict(self) -> dict:
        return {"source": self.source, "n_modules": self.n_modules, "smoothing": self.smoothing,
                "unigram": dict(sorted(self.unigram.items())),
                "pairs": dict(sorted(self.pairs.items()))}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, d: dict) -> "Distribution":
        return cls(unigram=dict(d["unigram"]), pairs=dict(d["pairs"]), n_modules=int(d["n_modules"]),
                   source=d.get("source", ""), smoothing=float(d.get("smoothing", 0.05)))

    @classmethod
    def load(cls, path: str | Path) -> "Distribution":
        return cls.from_dict(json.loads(Path(path).read_text()))


def _weighted(rng: random.Random, items: list[str], weights: list[float]) -> str:
    total = sum(weights)
    if total <= 0:
        return items[rng.randrange(len(items))]
    x = rng.random() * total
    for item, w in zip(items, weights):
        x -= w
        if x < 0:
            return item
    return items[-1]


def mine(directory: str | Path) -> Distribution:
    """Count operator co-occurrence over every `forward` in the `*.py` files under a directory."""
    directory = Path(directory)
    if not directory.is_dir():
        raise FileNotFoundError(f"no directory at {directory}")
    files = sorted(directory.rglob("*.py"))
    dist = Distribution(source=f"mined from {len(files)} files under {directory}")
    for f in files:
        for apis in forward_api_sets(f.read_text(encoding="utf-8", errors="replace")):
            dist.add_set(apis)
    dist.source += f" ({dist.n_modules} forward methods with catalog operators)"
    return dist


def load_default() -> Distribution:
    return Distribution.load(DEFAULT_PATH)
