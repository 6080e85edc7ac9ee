"""The task pool: provenance, pass-rate history, the exclusive band, persistence."""
from __future__ import annotations

import pytest

from kernelzero.propose.task_pool import TaskPool

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


def test_a_round_measures_twice_and_the_coder_phase_is_latest(tmp_path):
    with TaskPool(tmp_path / "pool.db") as pool:
        h, _ = pool.add(SRC, ["relu"], "a")
        pool.record(h, 0, [1, 1, 0, 0], phase="coder")      # written out of order on purpose
        pool.record(h, 0, [1, 0, 0, 0])                      # the Proposer phase's G attempts
        pool.record(h, 0, [1, 1, 1, 1], phase="coder")      # a re-run Coder phase replaces its row
        assert [(r["round"], r["phase"], r["p"]) for r in pool.get(h).rates] == [
            (0, "proposer", 0.25), (0, "coder", 1.0)]
        assert pool.in_band() == [] and pool.in_band(round_=0) == []  # latest p = 1: out of band
        pool.record(h, 1, [0, 1])
        assert pool.get(h).latest_p == 0.5 and [e.task_hash for e in pool.in_band()] == [h]
        with pytest.raises(ValueError, match="phase"):
            pool.record(h, 1, [1], phase="heldout")


def test_a_pool_file_without_phases_is_migrated(tmp_path):
    import sqlite3

    path = tmp_path / "pool.db"
    with TaskPool(path) as pool:
        h, _ = pool.add(SRC, ["relu"], "a")
    db = sqlite3.connect(path)  # the layout before phases were kept: one row per (task, round)
    db.executescript("""
        DROP TABLE rates;
        CREATE TABLE rates (task_hash TEXT NOT NULL REFERENCES tasks(task_hash), round INTEGER NOT NULL,
            n INTEGER NOT NULL, correct INTEGER NOT NULL, p REAL NOT NULL, recorded REAL NOT NULL,
            PRIMARY KEY (task_hash, round));""")
    db.execute("INSERT INTO rates VALUES (?, 0, 4, 2, 0.5, 0)", (h,))
    db.commit()
    db.close()
    with TaskPool(path) as pool:
        assert pool.get(h).rates == [{"round": 0, "phase": "proposer", "n": 4, "correct": 2, "p": 0.5}]
        pool.record(h, 0, [1, 1], phase="coder")
        assert pool.get(h).latest_p == 1.0
    with TaskPool(path) as pool:  # opening a migrated file again changes nothing
        assert [r["phase"] for r in pool.get(h).rates] == ["proposer", "coder"]
