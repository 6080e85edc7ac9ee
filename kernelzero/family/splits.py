"""Held-out sets of family modules: by op combination and by text.

    train, test = split_holdout(modules, test_frac=0.1, seed=0)

A share of the op combinations (a module's kind and ordered ops, e.g. `elementwise:relu>mul_const`)
goes wholly to the test set, so no test module's combination was seen in training; combinations of
fewer than `min_ops` ops (single ops) stay in training, since holding one out would hide an op
altogether. Training then drops any module whose text equals a test module's. The longer-chain
set (4-6 ops) needs no split: generate it with FamilyConfig(min_ops=4, max_ops=6).
"""
from __future__ import annotations

import random

from kernelzero.family.generator import FamilyModule
from kernelzero.tasks.task import source_hash


def combo_key(meta: dict) -> str:
    return f"{meta['kind']}:" + ">".join(meta["ops"])


def split_holdout(modules: list[FamilyModule], test_frac: float = 0.1, seed: int = 0,
                  min_ops: int = 2) -> tuple[list[FamilyModule], list[FamilyModule]]:
    """(train, test): test holds whole op combinations (about `test_frac` of the modules)."""
    if not 0 < test_frac < 1:
        raise ValueError(f"test_frac={test_frac}: must be in (0, 1)")
    by_combo: dict[str, list[FamilyModule]] = {}
    for m in modules:
        by_combo.setdefault(combo_key(m.meta), []).append(m)
    eligible = sorted(k for k, ms in by_combo.items() if len(ms[0].meta["ops"]) >= min_ops)
    random.Random(f"kernelzero-holdout/{seed}").shuffle(eligible)
    want = test_frac * len(modules)
    held: set[str] = set()
    count = 0
    for k in eligible:
        if count >= want:
            break
        held.add(k)
        count += len(by_combo[k])
    test, test_hashes = [], set()
    for m in modules:
        h = source_hash(m.source)
        if combo_key(m.meta) in held and h not in test_hashes:
            test.append(m)
            test_hashes.add(h)
    train = [m for m in modules if combo_key(m.meta) not in held and source_hash(m.source) not in test_hashes]
    return train, test
