"""The secret seed schedule: which inputs each trial gets, derived from a secret the candidate
never sees. Seeds are disclosed to a worker one trial batch at a time, after its model is built,
so nothing can be precomputed in `__init__`.
"""
from __future__ import annotations

import hashlib
import os
import random
from dataclasses import dataclass

HARDENING_DISTS = ("normal", "scaled", "heavy")


def _derive(secret: int, *parts) -> int:
    h = hashlib.sha256(repr((secret,) + parts).encode()).digest()
    return int.from_bytes(h[:7], "little")  # < 2**56: fits torch.manual_seed


@dataclass(frozen=True)
class Trial:
    seed: int
    dist: str = "task"  # task = the reference's own get_inputs; others re-draw float inputs
    poke: int = 0       # non-zero: a few input elements changed in place (trials.poke)

    def as_dict(self) -> dict:
        d = {"seed": self.seed, "dist": self.dist}
        if self.poke:
            d["poke"] = self.poke
        return d


@dataclass
class Schedule:
    correctness: list[Trial]   # task distribution, then hardening distributions
    timing_seeds: list[int]    # one per timed call
    checked: list[int]         # indices into timing_seeds whose outputs are re-checked


def make_schedule(secret: int, task_hash: str, n_trials: int, hardening: tuple[str, ...],
                  n_timed: int, n_checked: int, check_within: int,
                  poke_trial: bool = False) -> Schedule:
    """`poke_trial`: after the second correctness trial (the first whose inputs a candidate
    gets in the buffers of the one before), the same inputs again in the same buffers with a
    few elements changed (trials.py)."""
    corr = [Trial(_derive(secret, task_hash, "c", i)) for i in range(n_trials)]
    if poke_trial:
        at = min(2, len(corr))
        corr.insert(at, Trial(corr[at - 1].seed, poke=_derive(secret, task_hash, "p") | 1))
    corr += [Trial(_derive(secret, task_hash, "h", d), d) for d in hardening]
    timing = [_derive(secret, task_hash, "t", i) for i in range(n_timed)]
    rng = random.Random(_derive(secret, task_hash, "pick"))
    pool = list(range(1, max(2, min(check_within, n_timed))))
    checked = sorted(rng.sample(pool, min(n_checked, len(pool))))
    return Schedule(corr, timing, checked)


def new_secret() -> int:
    return int.from_bytes(os.urandom(8), "little")
