"""The fixed held-out rule of the learning experiments: which family modules a Coder may train on
and which measure it, decided by a hash of the module's op sequence, never by a draw.

Because the rule is a function of the module alone, a training set of any size and the held-out
sets can be generated independently, by different seeds and at different times, and still never
overlap; the cold start, the RL rounds, the held-out reports and the ablation bench all call it.

    role(meta) -> "train" | "heldout" | "ood_pair"
    - ood_pair: the module has an adjacent op pair (a, b) from the held-out pairs (~5% of the
      ordered pairs): no training module ever shows a directly followed by b;
    - heldout: its whole op combination (kind and ordered ops, 2 ops or more) is held out (~10% of
      the combinations); single ops always train, or the op itself would be unseen;
    - train: everything else.

Sets (each a list of FamilyModule, deterministic for a seed):
    training_modules(n, seed, config)   role train, at the config's lengths
    heldout_modules(n, seed, config)    role heldout, at the trained lengths: in-family held-out
    ood_long_modules(n, seed)           4-6 op chains of every kind: longer than trained
    ood_pair_modules(n, seed, config)   role ood_pair: unseen op pairs
Any held-out module's text is also never a training text (held-out roles never train), and every
set holds distinct texts.
"""
from __future__ import annotations

import dataclasses
import hashlib

from kernelzero.family.generator import FamilyConfig, FamilyModule, generate
from kernelzero.family.splits import combo_key
from kernelzero.tasks.task import source_hash

SALT = "kernelzero-holdout-v1"
COMBO_FRACTION = 0.10
PAIR_FRACTION = 0.05
ROLES = ("train", "heldout", "ood_pair")


def _unit(key: str) -> float:
    """A stable number in [0, 1) for `key`."""
    return int.from_bytes(hashlib.sha256(f"{SALT}/{key}".encode()).digest()[:8], "big") / 2**64


def held_pairs(ops: list[str]) -> list[tuple[str, str]]:
    """The adjacent op pairs of `ops` that no training module may contain."""
    return [(a, b) for a, b in zip(ops, ops[1:]) if _unit(f"pair:{a}>{b}") < PAIR_FRACTION]


def role(meta: dict) -> str:
    if held_pairs(meta["ops"]):
        return "ood_pair"
    if len(meta["ops"]) >= 2 and _unit("combo:" + combo_key(meta)) < COMBO_FRACTION:
        return "heldout"
    return "train"


def _collect(config: FamilyConfig, n: int, seed: int, want: str | None, max_draws: int) -> list[FamilyModule]:
    out, seen, start = [], set(), 0
    while len(out) < n and start < max_draws:
        batch = generate(config, n=min(4096, max_draws - start), seed=seed, start=start)
        start += len(batch)
        for m in batch:
            h = source_hash(m.source)
            if (want is None or role(m.meta) == want) and h not in seen:
                seen.add(h)
                out.append(m)
                if len(out) == n:
                    break
    if len(out) < n:
        raise ValueError(f"only {len(out)} of {n} modules with role {want!r} in {max_draws} draws "
                         f"(seed {seed}); widen the family config")
    return out


def training_modules(n: int, seed: int, config: FamilyConfig | None = None) -> list[FamilyModule]:
    return _collect(config or FamilyConfig(), n, seed, "train", max_draws=4 * n + 1000)


def heldout_modules(n: int, seed: int, config: FamilyConfig | None = None) -> list[FamilyModule]:
    return _collect(config or FamilyConfig(), n, seed, "heldout", max_draws=100 * n + 10_000)


def ood_pair_modules(n: int, seed: int, config: FamilyConfig | None = None) -> list[FamilyModule]:
    cfg = config or FamilyConfig(min_ops=2)
    return _collect(cfg, n, seed, "ood_pair", max_draws=200 * n + 10_000)


def ood_long_modules(n: int, seed: int, config: FamilyConfig | None = None) -> list[FamilyModule]:
    cfg = config or FamilyConfig()
    cfg = dataclasses.replace(cfg, min_ops=4, max_ops=6)
    return _collect(cfg, n, seed, None, max_draws=4 * n + 1000)
