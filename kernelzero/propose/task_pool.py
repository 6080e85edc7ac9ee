"""The task pool: every validated module with its provenance and its history of Coder pass rates.

Stored in SQLite (one file, WAL journal, a commit per write), two tables:
    tasks(task_hash PK, canonical_hash, name, source, apis JSON, origin, provenance JSON, created)
    rates(task_hash, round, phase, n, correct, p, recorded)   one row per (task, round, phase)
`task_hash` is `kernelzero.tasks.source_hash(source)`; `canonical_hash` is dedup.py's, so the
pool also answers "have we seen an equivalent module". A round can measure a task twice: its
Proposer phase (the G attempts that score a new module) and its Coder phase (the Coder's
samples while it trains on the pool), in that order (PHASES); the latest measurement is the last
in (round, phase) order. `in_band(lo, hi)` returns the tasks whose latest pass rate p satisfies
lo < p < hi (exclusive; default 0 < p < 1: neither always nor never solved), which is what Coder
training draws from. A pool.db written before phases were kept is migrated on open (its rows
were all Proposer-phase ones).
Not covered: choosing tasks for the Proposer's prompts (llm.py summarises failures from here).
"""
from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelzero.propose.dedup import canonical_hash
from kernelzero.tasks.task import Task, source_hash

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    task_hash TEXT PRIMARY KEY, canonical_hash TEXT NOT NULL, name TEXT NOT NULL,
    source TEXT NOT NULL, apis TEXT NOT NULL, origin TEXT NOT NULL, provenance TEXT NOT NULL,
    created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS tasks_canonical ON tasks(canonical_hash);
"""
_RATES = """CREATE TABLE IF NOT EXISTS rates (
    task_hash TEXT NOT NULL REFERENCES tasks(task_hash), round INTEGER NOT NULL,
    phase TEXT NOT NULL DEFAULT 'proposer',
    n INTEGER NOT NULL, correct INTEGER NOT NULL, p REAL NOT NULL, recorded REAL NOT NULL,
    PRIMARY KEY (task_hash, round, phase))"""
# The phases of a round that measure p, in the order they run (kernelzero.train.checkpoint.PHASES).
PHASES = ("proposer", "coder")
_PHASE_ORDER = "CASE phase " + " ".join(f"WHEN '{p}' THEN {i}" for i, p in enumerate(PHASES)) + " END"


@dataclass
class PoolEntry:
    task_hash: str
    canonical_hash: str
    name: str
    source: str
    apis: list[str]
    origin: str                      # composer | llm:<model> | import
    provenance: dict = field(default_factory=dict)
    rates: list[dict] = field(default_factory=list)   # [{"round", "phase", "n", "correct", "p"}], in order

    @property
    def latest_p(self) -> float | None:
        return self.rates[-1]["p"] if self.rates else None

    def task(self) -> Task:
        return Task(source=self.source, name=self.name,
                    meta={"apis": self.apis, "origin": self.origin, "pool_hash": self.task_hash})


class TaskPool:
    def __init__(self, path: str | Path = "task_pool.db"):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(str(self.path))
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.executescript(_SCHEMA + _RATES + ";")
        self._db.commit()
        self._migrate()

    def _migrate(self) -> None:
        """Give a rates table of the old layout (no phase; key (task, round)) the phase column."""
        if "phase" in {r[1] for r in self._db.execute("PRAGMA table_info(rates)")}:
            return
        # One process migrates; another one opening the file at the same time waits, then sees it done.
        self._db.execute("BEGIN IMMEDIATE")
        try:
            if "phase" not in {r[1] for r in self._db.execute("PRAGMA table_info(rates)")}:
                self._db.execute("ALTER TABLE rates RENAME TO rates_old")
                self._db.execute(_RATES)
                self._db.execute("INSERT INTO rates SELECT task_hash, round, 'proposer', n, correct, p, "
                                 "recorded FROM rates_old")
                self._db.execute("DROP TABLE rates_old")
            self._db.commit()
        except BaseException:
            self._db.rollback()
            raise

    def close(self) -> None:
        self._db.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- writing ----------------------------------------------------------------------------------
    def add(self, source: str, apis: list[str], name: str, origin: str = "composer",
            provenance: dict | None = None) -> tuple[str, bool]:
        """(task_hash, added); `added` is False when this exact source was already there."""
        h = source_hash(source)
        cur = self._db.execute(
            "INSERT OR IGNORE INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            (h, canonical_hash(source), name, source, json.dumps(sorted(apis)), origin,
             json.dumps(provenance or {}, sort_keys=True), time.time()))
        self._db.commit()
        return h, cur.rowcount == 1

    def record(self, task_hash: str, round_: int, correct_flags, phase: str = "proposer") -> float:
        """Store the Coder's correctness flags for a task, measured in `phase` of a round; returns p.
        Recording the same (task, round, phase) again replaces the row (a re-run phase)."""
        flags = [bool(f) for f in correct_flags]
        if not flags:
            raise ValueError("record needs at least one correctness flag")
        if phase not in PHASES:
            raise ValueError(f"phase={phase!r}: choose one of {PHASES}")
        if self.get(task_hash) is None:
            raise KeyError(f"no task {task_hash} in the pool")
        p = sum(flags) / len(flags)
        self._db.execute("INSERT OR REPLACE INTO rates VALUES (?, ?, ?, ?, ?, ?, ?)",
                         (task_hash, int(round_), phase, len(flags), sum(flags), p, time.time()))
        self._db.commit()
        return p

    # -- reading ----------------------------------------------------------------------------------
    def _entry(self, row) -> PoolEntry:
        rates = [{"round": r, "phase": ph, "n": n, "correct": c, "p": p}
                 for r, ph, n, c, p in self._db.execute(
                     f"SELECT round, phase, n, correct, p FROM rates WHERE task_hash = ? "
                     f"ORDER BY round, {_PHASE_ORDER}", (row[0],))]
        return PoolEntry(task_hash=row[0], canonical_hash=row[1], name=row[2], source=row[3],
                         apis=json.loads(row[4]), origin=row[5], provenance=json.loads(row[6]),
                         rates=rates)

    def get(self, task_hash: str) -> PoolEntry | None:
        row = self._db.execute("SELECT * FROM tasks WHERE task_hash = ?", (task_hash,)).fetchone()
        return self._entry(row) if row else None

    def has_equivalent(self, source: str) -> bool:
        return self._db.execute("SELECT 1 FROM tasks WHERE canonical_hash = ? LIMIT 1",
                                (canonical_hash(source),)).fetchone() is not None

    def canonical_hashes(self) -> set[str]:
        return {r[0] for r in self._db.execute("SELECT canonical_hash FROM tasks")}

    def entries(self) -> list[PoolEntry]:
        return [self._entry(r) for r in self._db.execute("SELECT * FROM tasks ORDER BY created, task_hash")]

    def __len__(self) -> int:
        return self._db.execute("SELECT COUNT(*) FROM tasks").fetchone()[0]

    def in_band(self, lo: float = 0.0, hi: float = 1.0, round_: int | None = None) -> list[PoolEntry]:
        """Tasks whose pass rate (latest, or latest in `round_`) lies strictly between lo and hi."""
        if not 0.0 <= lo < hi <= 1.0:
            raise ValueError("in_band needs 0 <= lo < hi <= 1")
        out = []
        for e in self.entries():
            rates = [r for r in e.rates if round_ is None or r["round"] == round_]
            if rates and lo < rates[-1]["p"] < hi:
                out.append(e)
        return out
