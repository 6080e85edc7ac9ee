"""The results store: verdicts and reference timings in one SQLite file.

Covers: saving each verdict the moment it is final, reading verdicts back (by key, or as the flat
records `kernelzero.metrics.summarize` takes), listing runs, and a small cache of reference
timings. Does not cover: judging, metrics or reports.

Durability and concurrency, the rules:
- WAL journal, `synchronous=FULL`, and one transaction (one commit) per `put`: once `put` returns,
  that verdict survives a Ctrl-C, a SIGKILL or a crash of this process (and, with FULL, a power
  loss). A put that was interrupted leaves nothing behind, never half a row.
- Several processes may write one file at once: each opens its own `Store`; writers queue on
  SQLite's lock and wait up to `timeout_s` (busy timeout) instead of failing. One `Store` may be
  shared by threads of one process (calls are serialised by a lock). Do not share a `Store`
  across `fork`; open a new one in the child.
- The file is stamped (`kernelzero_meta`: app, schema_version). Opening a file that is not SQLite,
  or SQLite written by something else, or by a newer schema, raises `StoreError`, changing nothing.
  A version-1 file (before integrity tags) is upgraded in place; its records read as `unsigned`.

Integrity: every row (verdicts and reference timings) carries a tag, an HMAC of its contents under
the user's verdict key (kernelzero.integrity), which code under judgement cannot read. `records`
says of each record whether its tag checks out (`integrity`); `get` and `get_ref_timing` return
only records that do (anything else was edited behind the judge's back, or written without the
key, and is judged again), and `put` replaces such a record instead of keeping it.
"""
from __future__ import annotations

import hashlib
import json
import re
import sqlite3
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from kernelzero.eval.verdict import Verdict
from kernelzero.integrity import OK, OTHER_KEY, UNSIGNED, VerdictKey, load_key

SCHEMA_VERSION = 2
APP = "kernelzero"
_TASK_KEY_RE = re.compile(r"^L(?P<level>\d+)/(?P<id>\d+)_")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kernelzero_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS verdicts (
    id              INTEGER PRIMARY KEY AUTOINCREMENT,
    run             TEXT    NOT NULL,
    key             TEXT    NOT NULL,
    task_key        TEXT    NOT NULL,
    level           INTEGER,
    problem_id      INTEGER,
    sample_id       INTEGER,
    status          TEXT    NOT NULL,
    correct         INTEGER NOT NULL,
    speedup         REAL,
    speedup_compile REAL,
    verdict_json    TEXT    NOT NULL,
    created_at      TEXT    NOT NULL,  -- ISO-8601 UTC, e.g. 2026-11-29T17:30:00.123456+00:00
    tag             TEXT,              -- kernelzero.integrity tag over the row (_VERDICT_FIELDS)
    UNIQUE (run, key)
);
CREATE INDEX IF NOT EXISTS verdicts_key ON verdicts (key);
CREATE TABLE IF NOT EXISTS ref_timings (
    key        TEXT PRIMARY KEY,
    value_json TEXT NOT NULL,
    created_at TEXT NOT NULL,
    tag        TEXT
);
"""
_VERDICT_FIELDS = ("run", "key", "task_key", "level", "problem_id", "sample_id", "status",
                   "correct", "speedup", "speedup_compile", "verdict_json", "created_at")
_UPGRADE_FROM_1 = ("ALTER TABLE verdicts ADD COLUMN tag TEXT",
                   "ALTER TABLE ref_timings ADD COLUMN tag TEXT",
                   "UPDATE kernelzero_meta SET value = '2' WHERE name = 'schema_version'")


class StoreError(Exception):
    """The file cannot be used as a KernelZero results store (with the reason)."""


def verdict_key(task_hash: str, candidate_hash: str, device: str, env_key: str) -> str:
    """Identity of a judgement: same task, same candidate, same device kind, same environment.

    A hash (32 hex chars) of the four parts; the parts are JSON-encoded first, so no choice of
    separator can make two different tuples collide.
    """
    parts = [str(task_hash), str(candidate_hash), str(device), str(env_key)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:32]


def _int(x):
    return None if x is None else int(x)


def _float(x):
    return None if x is None else float(x)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="microseconds")


class Store:
    """A KernelZero results database (see the module docstring for the durability rules)."""

    def __init__(self, path: str | Path = "kernelzero.db", timeout_s: float = 60.0,
                 key: VerdictKey | None = None):
        """key: the verdict key that tags and checks records (default: the user's, made on
        first use; where it cannot be made, records are written untagged: `unsigned`)."""
        self.path = Path(path)
        self._lock = threading.Lock()
        if key is None:
            try:
                key = load_key()
            except (OSError, ValueError):
                key = None
        self.key = key
        try:
            self._db = sqlite3.connect(str(self.path), timeout=timeout_s, isolation_level=None,
                                       check_same_thread=False)
        except sqlite3.Error as e:
            raise StoreError(f"cannot open {self.path}: {e}") from e
        try:
            self._db.execute(f"PRAGMA busy_timeout = {int(timeout_s * 1000)}")
            self._check_or_create()
            self._use_wal(timeout_s)
            self._db.execute("PRAGMA synchronous = FULL")
        except sqlite3.DatabaseError as e:
            self._db.close()
            raise StoreError(f"{self.path} is not a KernelZero results database ({e})") from e
        except BaseException:
            self._db.close()
            raise

    def _use_wal(self, timeout_s: float) -> None:
        """WAL mode (persistent in the file once set). Switching needs the database to itself,
        and SQLite answers "locked" at once, without its busy handler, while another process is
        opening it: retry until the timeout."""
        deadline = time.monotonic() + timeout_s
        delay = 0.01
        while True:
            try:
                if self._db.execute("PRAGMA journal_mode").fetchone()[0].lower() != "wal":
                    self._db.execute("PRAGMA journal_mode = WAL")
                return
            except sqlite3.OperationalError as e:
                if "locked" not in str(e) and "busy" not in str(e) or time.monotonic() > deadline:
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.5)

    def _check_or_create(self) -> None:
        tables = {r[0] for r in
                  self._db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
        if not tables:
            self._db.execute("BEGIN IMMEDIATE")  # another process may be creating it right now
            try:
                for statement in _SCHEMA.split(";\n"):  # executescript would commit early
                    if statement.strip():
                        self._db.execute(statement)
                self._db.execute("INSERT OR IGNORE INTO kernelzero_meta VALUES ('app', ?)", (APP,))
                self._db.execute("INSERT OR IGNORE INTO kernelzero_meta "
                                 "VALUES ('schema_version', ?)", (str(SCHEMA_VERSION),))
                self._db.execute("COMMIT")
            except BaseException:
                if self._db.in_transaction:
                    self._db.execute("ROLLBACK")
                raise
            tables = {"kernelzero_meta"}
        if "kernelzero_meta" not in tables:
            raise StoreError(f"{self.path} is an SQLite database but not a KernelZero one "
                             f"(tables: {', '.join(sorted(tables))}); pass another --db path")
        meta = dict(self._db.execute("SELECT name, value FROM kernelzero_meta"))
        if meta.get("app") != APP:
            raise StoreError(f"{self.path} is not a KernelZero results database "
                             f"(app={meta.get('app')!r})")
        version = int(meta.get("schema_version", "0"))
        if version > SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}, newer than this "
                             f"KernelZero understands ({SCHEMA_VERSION}); upgrade KernelZero")
        if version == 1:
            self._upgrade_from_1()
        elif version < SCHEMA_VERSION:
            raise StoreError(f"{self.path} has schema version {version}; expected {SCHEMA_VERSION}")

    def _upgrade_from_1(self) -> None:
        """Add the tag columns (one transaction; another process may be upgrading it too)."""
        self._db.execute("BEGIN IMMEDIATE")
        try:
            meta = dict(self._db.execute("SELECT name, value FROM kernelzero_meta"))
            if meta.get("schema_version") == "1":
                for statement in _UPGRADE_FROM_1:
                    self._db.execute(statement)
            self._db.execute("COMMIT")
        except BaseException:
            if self._db.in_transaction:
                self._db.execute("ROLLBACK")
            raise

    # -- integrity --------------------------------------------------------------------------------

    def _tag(self, record: dict) -> str | None:
        return self.key.tag(record) if self.key is not None else None

    def _check(self, record: dict, tag: str | None) -> str:
        if self.key is None:
            return UNSIGNED if not tag else OTHER_KEY
        return self.key.check(record, tag)

    # -- verdicts ---------------------------------------------------------------------------------

    def put(self, key: str, verdict: Verdict | dict, run: str = "default", task_key: str = "",
            sample_id: int | None = None, level: int | None = None,
            problem_id: int | None = None, replace: bool = False) -> bool:
        """Save one verdict in its own committed transaction. Returns True when a row was written.

        A re-put of an existing (run, key) writes nothing and returns False, unless `replace`.
        `level` and `problem_id` default to what `task_key` says when it looks like
        `L{level}/{id}_{Name}`.
        """
        if isinstance(verdict, dict):
            verdict = Verdict.from_dict(verdict)
        m = _TASK_KEY_RE.match(task_key or "")
        if m:
            level = int(m["level"]) if level is None else level
            problem_id = int(m["id"]) if problem_id is None else problem_id
        row = (str(run), str(key), str(task_key or ""), _int(level), _int(problem_id),
               _int(sample_id), verdict.status, int(verdict.correct), _float(verdict.speedup),
               _float(verdict.speedup_compile), verdict.to_json(), _now())  # as SQLite reads back
        row += (self._tag(dict(zip(_VERDICT_FIELDS, row))),)
        columns = ", ".join(_VERDICT_FIELDS + ("tag",))
        with self._lock:
            verb = "INSERT OR REPLACE" if replace or self._spoilt(run, key) else "INSERT OR IGNORE"
            cur = self._db.execute(f"{verb} INTO verdicts ({columns}) VALUES "
                                   f"({', '.join('?' * len(row))})", row)  # autocommit: one commit
            return cur.rowcount > 0

    def _spoilt(self, run: str, key: str) -> bool:
        """Whether (run, key) holds a row whose tag does not check out (then `put` replaces it)."""
        row = self._db.execute(f"SELECT {', '.join(_VERDICT_FIELDS)}, tag FROM verdicts "
                               "WHERE run = ? AND key = ?", (run, key)).fetchone()
        return row is not None and self._check(dict(zip(_VERDICT_FIELDS, row)), row[-1]) != OK

    def get(self, key: str, run: str | None = None) -> Verdict | None:
        """The verdict stored under `key` (in `run`, or the latest in any run) whose integrity tag
        checks out, or None (none stored, or one edited behind the judge's back: judge it again)."""
        sql = f"SELECT {', '.join(_VERDICT_FIELDS)}, tag FROM verdicts WHERE key = ?"
        args: list = [key]
        if run is not None:
            sql, args = sql + " AND run = ?", args + [run]
        with self._lock:
            row = self._db.execute(sql + " ORDER BY id DESC LIMIT 1", args).fetchone()
        if row is None or self._check(dict(zip(_VERDICT_FIELDS, row)), row[-1]) != OK:
            return None
        return Verdict.from_dict(json.loads(row[_VERDICT_FIELDS.index("verdict_json")]))

    def records(self, run: str | None = None) -> list[dict]:
        """Flat per-sample records for `kernelzero.metrics.summarize`, in insertion order.

        Keys: task, correct, speedup, speedup_compile, status, run, key, level, problem_id,
        sample_id, and integrity: `ok` (its tag checks out), `tampered` (edited after the judge
        wrote it), `unsigned` (no tag: written before tags, or without a key), `other_key` (tagged
        with a key this user does not have). `run=None` returns every run's records.
        """
        sql = f"SELECT {', '.join(_VERDICT_FIELDS)}, tag FROM verdicts"
        args: tuple = ()
        if run is not None:
            sql, args = sql + " WHERE run = ?", (run,)
        with self._lock:
            rows = self._db.execute(sql + " ORDER BY id", args).fetchall()
        out = []
        for r in rows:
            row = dict(zip(_VERDICT_FIELDS, r))
            out.append({"task": row["task_key"], "correct": bool(row["correct"]),
                        **{k: row[k] for k in ("speedup", "speedup_compile", "status", "run", "key",
                                               "level", "problem_id", "sample_id")},
                        "integrity": self._check(row, r[-1])})
        return out

    def runs(self) -> list[str]:
        """Run names ordered by their latest write (insertion order): the last is the newest."""
        with self._lock:
            rows = self._db.execute("SELECT run FROM verdicts GROUP BY run "
                                    "ORDER BY MAX(id)").fetchall()
        return [r[0] for r in rows]

    def count(self, run: str | None = None) -> int:
        """Number of verdicts in `run` (all runs when None)."""
        sql, args = "SELECT COUNT(*) FROM verdicts", ()
        if run is not None:
            sql, args = sql + " WHERE run = ?", (run,)
        with self._lock:
            return int(self._db.execute(sql, args).fetchone()[0])

    # -- reference timings ------------------------------------------------------------------------

    def get_ref_timing(self, key: str) -> dict | None:
        """The cached reference timing (any JSON object) under `key` whose tag checks out, or
        None (a forged reference time would change every speedup against it)."""
        with self._lock:
            row = self._db.execute("SELECT value_json, tag FROM ref_timings WHERE key = ?",
                                   (key,)).fetchone()
        if row is None or self._check({"key": key, "value_json": row[0]}, row[1]) != OK:
            return None
        return json.loads(row[0])

    def put_ref_timing(self, key: str, value: dict) -> None:
        """Save (or overwrite) the reference timing under `key`; committed on return."""
        text = json.dumps(value, allow_nan=False)
        tag = self._tag({"key": key, "value_json": text})
        with self._lock:
            self._db.execute("INSERT OR REPLACE INTO ref_timings (key, value_json, created_at, tag) "
                             "VALUES (?, ?, ?, ?)", (key, text, _now(), tag))

    # -- lifetime ---------------------------------------------------------------------------------

    def close(self) -> None:
        with self._lock:
            self._db.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
