"""The task pool: provenance, pass-rate history, the exclusive band, persistence."""
from __future__ import annotations

import pytest

from kernelzero.propose.pool import TaskPool

SRC = "import torch\nclass Model: pass\ndef get_inputs(): return []\ndef get_init_inputs(): return []\n"


def test_pool_round_trip_and_band(tmp_path):
    path = tmp_path / "pool.db"
    with TaskPool(path) as pool:
        h1, added = pool.add(SRC, ["relu", "conv2d"], "a", provenance={"seed": 1})
        assert added and pool.add(SRC, ["relu"], "dup")[1] is False
        h2, _ = pool.add(SRC + "# other\n", ["gelu"], "b")
        h3, _ = pool.add(SRC + "# third\n", ["mm"], "c")
        assert pool.has_equivalent(SRC + "\n# comment only\n")
        assert pool.record(h1, 0, [1, 0, 0, 1]) == 0.5
        pool.record(h2, 0, [1, 1])
        pool.record(h2, 1, [1, 0])
        pool.record(h3, 0, [0, 0])
        with pytest.raises(KeyError):
            pool.record("nope", 0, [1])
    with TaskPool(path) as pool:  # persisted
        assert len(pool) == 3
        e = pool.get(h1)
        assert e.apis == ["conv2d", "relu"] and e.provenance == {"seed": 1} and e.latest_p == 0.5
        assert [r["p"] for r in pool.get(h2).rates] == [1.0, 0.5]
        assert {e.task_hash for e in pool.in_band()} == {h1, h2}        # latest p in (0, 1)
        assert {e.task_hash for e in pool.in_band(round_=0)} == {h1}    # p = 1 and 0 excluded
        assert pool.in_band(0.4, 0.5) == []                             # exclusive bounds
        with pytest.raises(ValueError):
            pool.in_band(0.8, 0.2)
        assert pool.get(h1).task().source == SRC
