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

    def as_dict(self) -> dict:
        return {"seed": self.seed, "dist": self.dist}


@dataclass
class Schedule:
    correctness: list[Trial]   # task distribution, then hardening distributions
    timing_seeds: list[int]    # one per timed call
    checked: list[int]         # indices into timing_seeds whose outputs are re-checked


def make_schedule(secret: int, task_hash: str, n_trials: int, hardening: tuple[str, ...],
                  n_timed: int, n_checked: int, check_within: int) -> Schedule:
    corr = [Trial(_derive(secret, task_hash, "c", i)) for i in range(n_trials)]
    corr += [Trial(_derive(secret, task_hash, "h", d), d) for d in hardening]
    timing = [_derive(secret, task_hash, "t", i) for i in range(n_timed)]
    rng = random.Random(_derive(secret, task_hash, "pick"))
    pool = list(range(1, max(2, min(check_within, n_timed))))
    checked = sorted(rng.sample(pool, min(n_checked, len(pool))))
    return Schedule(corr, timing, checked)


def new_secret() -> int:
    return int.from_bytes(os.urandom(8), "little")
