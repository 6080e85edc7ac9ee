"""Integrity tags on stored records: an edit made behind the judge's back is found, never used.

The store tags every verdict and reference timing with an HMAC under the verdict key
(kernelzero.integrity); these tests edit rows with plain SQLite, as code that found the file would.
"""
from __future__ import annotations

import sqlite3

import pytest

from kernelzero.eval.verdict import Verdict
from kernelzero.integrity import VerdictKey, load_key
from kernelzero.store import _VERDICT_FIELDS, Store


def _verdict(status="incorrect", speedup=None) -> Verdict:
    return Verdict(status=status, reason="r", speedup=speedup, task_hash="t", candidate_hash="c")


def _edit(path, sql, *args) -> None:
    con = sqlite3.connect(path)
    con.execute(sql, args)
    con.commit()
    con.close()


def test_an_edited_verdict_is_found_and_never_served(tmp_path):
    db = tmp_path / "kz.db"
    with Store(db) as s:
        s.put("k", _verdict(), run="r", task_key="L1/1_X", sample_id=0)
        s.put("k2", _verdict(), run="r", task_key="L1/1_X", sample_id=1)
    # what the forging candidate of issue 27 did: flip the judge's verdict to a pass
    forged = _verdict("correct", speedup=100.0).to_json()
    _edit(db, "UPDATE verdicts SET status = 'correct', correct = 1, speedup = 100, "
              "verdict_json = ? WHERE key = 'k'", forged)
    with Store(db) as s:
        assert [r["integrity"] for r in s.records("r")] == ["tampered", "ok"]
        assert s.get("k", run="r") is None and s.get("k") is None  # judged again on resume
        assert s.get("k2", run="r").status == "incorrect"
        # the new verdict replaces the forged row (a plain put would keep the existing one)
        assert s.put("k", _verdict(), run="r", task_key="L1/1_X", sample_id=0) is True
        assert [r["integrity"] for r in s.records("r")] == ["ok", "ok"]
        assert s.get("k", run="r").status == "incorrect"
        assert s.put("k", _verdict(), run="r", task_key="L1/1_X", sample_id=0) is False


@pytest.mark.parametrize("column", _VERDICT_FIELDS)
def test_the_tag_covers_every_column(tmp_path, column):
    db = tmp_path / "kz.db"
    with Store(db) as s:
        s.put("k", _verdict("correct", 1.5), run="r", task_key="L1/1_X", sample_id=0)
    value = {"level": 7, "problem_id": 7, "sample_id": 7, "correct": 0, "speedup": 9.5,
             "speedup_compile": 9.5}.get(column, "edited")
    _edit(db, f"UPDATE verdicts SET {column} = ?", value)
    with Store(db) as s:
        assert [r["integrity"] for r in s.records()] == ["tampered"]


def test_a_copied_tag_does_not_vouch_for_another_row(tmp_path):
    db = tmp_path / "kz.db"
    with Store(db) as s:
        s.put("pass", _verdict("correct", 2.0), run="r", task_key="L1/1_X", sample_id=0)
        s.put("fail", _verdict(), run="r", task_key="L1/1_X", sample_id=1)
    con = sqlite3.connect(db)
    good = con.execute("SELECT status, correct, speedup, verdict_json, tag FROM verdicts "
                       "WHERE key = 'pass'").fetchone()
    con.execute("UPDATE verdicts SET status = ?, correct = ?, speedup = ?, verdict_json = ?, "
                "tag = ? WHERE key = 'fail'", good)
    con.commit()
    con.close()
    with Store(db) as s:
        assert {r["key"]: r["integrity"] for r in s.records()} == {"pass": "ok", "fail": "tampered"}


def test_untagged_other_key_and_float_columns(tmp_path):
    db = tmp_path / "kz.db"
    with Store(db) as s:
        s.put("k", _verdict("correct", 2), run="r", task_key="t")  # an int speedup reads back 2.0
        s.put("u", _verdict(), run="r", task_key="t")
        assert s.records()[0]["integrity"] == "ok" and s.get("k").speedup == 2
    _edit(db, "UPDATE verdicts SET tag = NULL WHERE key = 'u'")
    with Store(db) as s:
        assert [r["integrity"] for r in s.records()] == ["ok", "unsigned"]
    with Store(db, key=VerdictKey(b"another user's key, 32 bytes..!")) as s:
        assert [r["integrity"] for r in s.records()] == ["other_key", "unsigned"]
        assert s.get("k") is None


def test_a_forged_reference_timing_is_not_used(tmp_path):
    """A larger reference time would inflate every speedup measured against it."""
    db = tmp_path / "kz.db"
    with Store(db) as s:
        s.put_ref_timing("ref:1", {"median_ms": 1.0})
        assert s.get_ref_timing("ref:1") == {"median_ms": 1.0}
    _edit(db, "UPDATE ref_timings SET value_json = '{\"median_ms\": 50.0}'")
    with Store(db) as s:
        assert s.get_ref_timing("ref:1") is None
        s.put_ref_timing("ref:1", {"median_ms": 1.0})
        assert s.get_ref_timing("ref:1") == {"median_ms": 1.0}


def test_a_version_1_store_is_upgraded_and_its_records_read_unsigned(tmp_path):
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.executescript("""
        CREATE TABLE kernelzero_meta (name TEXT PRIMARY KEY, value TEXT NOT NULL);
        INSERT INTO kernelzero_meta VALUES ('app', 'kernelzero'), ('schema_version', '1');
        CREATE TABLE verdicts (id INTEGER PRIMARY KEY AUTOINCREMENT, run TEXT NOT NULL,
            key TEXT NOT NULL, task_key TEXT NOT NULL, level INTEGER, problem_id INTEGER,
            sample_id INTEGER, status TEXT NOT NULL, correct INTEGER NOT NULL, speedup REAL,
            speedup_compile REAL, verdict_json TEXT NOT NULL, created_at TEXT NOT NULL,
            UNIQUE (run, key));
        CREATE TABLE ref_timings (key TEXT PRIMARY KEY, value_json TEXT NOT NULL,
            created_at TEXT NOT NULL);
    """)
    con.execute("INSERT INTO verdicts (run, key, task_key, status, correct, verdict_json, "
                "created_at) VALUES ('r', 'old', 't', 'correct', 1, ?, 'then')",
                (_verdict("correct").to_json(),))
    con.commit()
    con.close()
    with Store(db) as s:
        s.put("new", _verdict(), run="r", task_key="t")
        assert [r["integrity"] for r in s.records()] == ["unsigned", "ok"]
    with Store(db) as s:  # upgraded once, opened again as version 2
        assert s._db.execute("SELECT value FROM kernelzero_meta WHERE name = 'schema_version'"
                             ).fetchone()[0] == "2"


def test_the_key_file_is_private_and_made_once(tmp_path, monkeypatch):
    path = tmp_path / "cfg" / "kernelzero" / "verdict.key"
    monkeypatch.setenv("KZ_VERDICT_KEY_FILE", str(path))
    key = load_key()
    assert path.stat().st_mode & 0o777 == 0o600 and len(path.read_bytes()) == 32
    assert path.parent.stat().st_mode & 0o077 == 0
    assert load_key().id == key.id
    record = {"a": 1, "b": [1.5, None]}
    tag = key.tag(record)
    assert key.check(record, tag) == "ok"
    assert key.check({"a": 2, "b": [1.5, None]}, tag) == "tampered"
    assert key.check(record, "hmac-sha256:" + key.id + ":00") == "tampered"
    assert key.check(record, "garbage") == "tampered"
    assert key.check(record, None) == "unsigned"
    assert key.check(record, VerdictKey(b"x" * 32).tag(record)) == "other_key"


# ------------------------------------------------------------------------------- kernelzero report
def _report(argv):
    import argparse

    from kernelzero.commands import report_cmd
    parser = argparse.ArgumentParser(prog="kernelzero")
    report_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", *argv])
    return args.func(args)


def _run_of_ten(db) -> None:
    with Store(db) as s:
        for i in range(10):
            s.put(f"k{i}", _verdict(), run="r", task_key=f"L1/{i}_X", sample_id=0)


def test_report_refuses_a_run_with_an_edited_record(tmp_path, capsys):
    import json

    from kernelzero.cli import UsageError
    db = tmp_path / "kz.db"
    _run_of_ten(db)
    assert _report(["--db", str(db), "--json", "--boot", "0", "--out", str(tmp_path / "a")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["integrity"] == {"verified": 10, "tampered": [], "unsigned": [], "other_key": []}
    assert doc["pass_at_k"]["1"]["value"] == 0.0
    _edit(db, "UPDATE verdicts SET status = 'correct', correct = 1 WHERE key = 'k3'")
    with pytest.raises(UsageError, match=r"integrity check \(1 edited after the judge wrote them"
                                         r"; e\.g\. k3\)"):
        _report(["--db", str(db), "--boot", "0", "--out", str(tmp_path / "b")])
    assert not (tmp_path / "b").exists()
    assert _report(["--db", str(db), "--json", "--boot", "0", "--unverified", "skip",
                    "--out", str(tmp_path / "c")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["n_records"] == 9 and doc["n_correct"] == 0 and doc["integrity"]["tampered"] == ["k3"]
    assert any("left out" in n for n in doc["notes"])
    assert _report(["--db", str(db), "--boot", "0", "--unverified", "include",
                    "--out", str(tmp_path / "d")]) == 0
    out = capsys.readouterr().out
    assert "1 correct; integrity: 9 records verified, 1 NOT VERIFIED" in out
    assert "INCLUDED, unverified" in (tmp_path / "d" / "report.md").read_text()


# ------------------------------------------------------------------------ the training verdict cache
def test_a_forged_cached_verdict_never_becomes_a_reward(tmp_path):
    import json

    from kernelzero.tasks import Candidate, Task
    from kernelzero.train.judging import Judge, VerdictCache, load_verdict_records
    from tests.test_train_proposer import FakeEvaluator as _Pool  # 'OK' in the source: correct
    path = tmp_path / "verdicts.jsonl"
    t = Task.from_source("import torch\nclass Model(torch.nn.Module):\n    pass\n")
    bad, good = Candidate("bad kernel"), Candidate("good OK kernel")
    Judge(_Pool(), VerdictCache(path)).judge([(t, bad), (t, good)], context={"round": 0})
    lines = [json.loads(x) for x in path.read_text().splitlines()]
    assert all(rec["tag"].startswith("hmac-sha256:") for rec in lines)
    # the forger rewrites the failing verdict as a pass (keeping, or dropping, the old tag)
    lines[0]["verdict"]["status"] = "correct"
    unsigned = {k: v for k, v in lines[0].items() if k != "tag"}
    unsigned["key"] = "another:pair"
    path.write_text("".join(json.dumps(r) + "\n" for r in [*lines, unsigned]))
    cache = VerdictCache(path)
    assert cache.refused == {"tampered": 1, "unsigned": 1} and len(cache) == 1
    pool = _Pool()
    verdicts = Judge(pool, cache).judge([(t, bad), (t, good)])
    assert [v.status for v in verdicts] == ["incorrect", "correct"]  # judged again, honestly
    assert pool.judged == [(t, bad)]
    assert [r["integrity"] for r in load_verdict_records(tmp_path)] == \
        ["tampered", "ok", "unsigned", "ok"]
    other = VerdictCache(path, key=VerdictKey(b"someone else's key, 32 bytes !!"))
    assert other.refused == {"other_key": 3, "unsigned": 1} and len(other) == 0
