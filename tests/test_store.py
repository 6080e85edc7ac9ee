"""The SQLite results store: round trips, idempotence, durability under SIGKILL, two writers."""
from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time

import pytest

from kernelzero.eval.verdict import Timing, Verdict
from kernelzero.store import SCHEMA_VERSION, Store, StoreError, verdict_key


def make_verdict(i: int = 0, status: str = "correct") -> Verdict:
    t = Timing(median_ms=1.0 + i, iqr_ms=0.1, mean_ms=1.05 + i, min_ms=0.9 + i, n=10)
    return Verdict(status=status, reason=f"sample {i}", backend="triton", device="cuda",
                   flags=["x"], trials_run=5, trials_passed=5 if status == "correct" else 2,
                   runtime_ms=t, ref_runtime_ms=t, speedup=1.5 + i if status == "correct" else None,
                   speedup_compile=0.7 if status == "correct" else None, task_hash="th",
                   candidate_hash=f"c{i}", env={"torch": "2.13"}, wall_s=0.5)


def test_verdict_key_is_stable_and_separates_parts():
    k = verdict_key("t", "c", "cuda", "env1")
    assert k == verdict_key("t", "c", "cuda", "env1") and len(k) == 32
    assert k != verdict_key("t", "c", "cpu", "env1")
    assert verdict_key("a|b", "c", "d", "e") != verdict_key("a", "b|c", "d", "e")


def test_put_get_round_trip_and_columns(tmp_path):
    with Store(tmp_path / "kz.db") as s:
        v = make_verdict(1)
        assert s.put("k1", v, run="r", task_key="L2/17_Conv2d_ReLU", sample_id=3) is True
        assert s.get("k1").to_dict() == v.to_dict()
        assert s.get("k1", run="other") is None and s.get("nope") is None
        [r] = s.records("r")
        assert r == {"task": "L2/17_Conv2d_ReLU", "correct": True, "speedup": 2.5,
                     "speedup_compile": 0.7, "status": "correct", "run": "r", "key": "k1",
                     "level": 2, "problem_id": 17, "sample_id": 3, "integrity": "ok"}
        s.put("k2", make_verdict(2, "incorrect").to_dict(), run="r", task_key="my_task")
        r2 = s.records("r")[1]
        assert (r2["correct"], r2["speedup"], r2["level"], r2["problem_id"]) == \
            (False, None, None, None)


def test_put_is_idempotent_per_run_and_replace_overwrites(tmp_path):
    with Store(tmp_path / "kz.db") as s:
        assert s.put("k", make_verdict(0), run="a", task_key="t") is True
        assert s.put("k", make_verdict(0), run="a", task_key="t") is False
        assert s.count("a") == 1
        assert s.put("k", make_verdict(0), run="b", task_key="t") is True  # another run: own row
        assert s.count() == 2 and s.count("b") == 1
        assert s.put("k", make_verdict(5, "timeout"), run="a", task_key="t", replace=True) is True
        assert s.count("a") == 1 and s.get("k", run="a").status == "timeout"
        assert s.get("k", run="b").status == "correct"
        assert s.get("k").status == "timeout"  # no run given: the latest write under that key


def test_runs_ordered_by_latest_write_and_persist_across_opens(tmp_path):
    path = tmp_path / "kz.db"
    with Store(path) as s:
        for run in ("first", "second", "first"):
            s.put(f"k-{run}-{s.count()}", make_verdict(), run=run, task_key="t")
        assert s.runs() == ["second", "first"]
    with Store(path) as s:
        assert s.runs() == ["second", "first"] and s.count() == 3
        assert s._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"


def test_ref_timing_cache(tmp_path):
    with Store(tmp_path / "kz.db") as s:
        assert s.get_ref_timing("r") is None
        s.put_ref_timing("r", {"median_ms": 1.25, "n": 100})
        s.put_ref_timing("r", {"median_ms": 1.5, "n": 100})
        assert s.get_ref_timing("r") == {"median_ms": 1.5, "n": 100}


def test_refuses_files_that_are_not_kernelzero_databases(tmp_path):
    text = tmp_path / "notes.db"
    text.write_text("this is not a database\n" * 100)
    with pytest.raises(StoreError, match="not a KernelZero"):
        Store(text)
    assert text.read_text().startswith("this is not a database")  # untouched
    other = tmp_path / "other.db"
    con = sqlite3.connect(other)
    con.execute("CREATE TABLE users (name TEXT)")
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="not a KernelZero"):
        Store(other)
    newer = tmp_path / "newer.db"
    Store(newer).close()
    con = sqlite3.connect(newer)
    con.execute("UPDATE kernelzero_meta SET value = ? WHERE name = 'schema_version'",
                (str(SCHEMA_VERSION + 1),))
    con.commit()
    con.close()
    with pytest.raises(StoreError, match="newer"):
        Store(newer)


WRITER = textwrap.dedent("""
    import os, sys, time
    from kernelzero.eval.verdict import Verdict
    from kernelzero.store import Store
    path, name = sys.argv[1], sys.argv[2]
    n, shared, pause = int(sys.argv[3]), int(sys.argv[4]), float(sys.argv[5])
    s = Store(path)
    print("ready", flush=True)
    while not os.path.exists(path + ".go"):
        time.sleep(0.01)
    for i in range(n):
        key = f"shared-{i}" if i < shared else f"{name}-{i}"
        s.put(key, Verdict(status="correct", reason=name, speedup=1.0 + i), run="r",
              task_key=f"L1/{i}_X", sample_id=i)
        print(i, flush=True)
        time.sleep(pause)  # stands in for judging the next candidate
""")


def start_writer(tmp_path, name, n, shared=0, pause=0.0):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this checkout's package
    return subprocess.Popen([sys.executable, str(script), str(tmp_path / "kz.db"), name, str(n),
                             str(shared), str(pause)], env={**os.environ, "PYTHONPATH": root},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_sigkill_mid_loop_loses_no_committed_verdict(tmp_path):
    proc = start_writer(tmp_path, "w", 10**6)
    assert proc.stdout.readline().strip() == "ready"
    (tmp_path / "kz.db.go").touch()
    last = -1
    deadline = time.monotonic() + 60
    while last < 60 and time.monotonic() < deadline:
        last = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)  # between or inside puts: whatever it was doing
    proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL and last >= 60
    with Store(tmp_path / "kz.db") as s:
        n = s.count("r")
        assert last + 1 <= n <= last + 2  # every reported put, plus at most the one in flight
        for i in range(last + 1):
            assert s.get(f"w-{i}", run="r").speedup == 1.0 + i


def test_two_processes_write_one_file_concurrently(tmp_path):
    # both open a fresh file at once (schema creation race), then write together; 20 keys overlap
    procs = [start_writer(tmp_path, name, 120, shared=20, pause=0.003) for name in ("a", "b")]
    for p in procs:
        assert p.stdout.readline().strip() == "ready", p.stderr.read()
    (tmp_path / "kz.db.go").touch()
    for p in procs:
        out, err = p.communicate(timeout=90)
        assert p.returncode == 0, err
    with Store(tmp_path / "kz.db") as s:
        assert s.count("r") == 20 + 2 * 100
        keys = [r["key"] for r in s.records("r")]
        assert len(keys) == len(set(keys))
        writers = [k[0] for k in keys if not k.startswith("shared")]
        switches = sum(a != b for a, b in zip(writers, writers[1:]))
        assert switches >= 10, "the two writers did not actually interleave"
        assert {f"a-{i}" for i in range(20, 120)} <= set(keys)
        assert {f"b-{i}" for i in range(20, 120)} <= set(keys)


def test_timing_method_separates_stored_results():
    """Timings measured another way are not comparable: the verdict key and the cached reference
    timing key both change with the timing method (on cuda; CPU verdicts carry no timing)."""
    from kernelzero.eval import EvalConfig
    from kernelzero.eval import environment as envmod

    cuda = EvalConfig(device="cuda")
    env = {"torch": "2", "triton": "3", "device": "cuda", "gpu": "H200", "policy": "strict",
           "tolerance": "strict", "timing_method": envmod.TIMING_METHOD}
    other = {**env, "timing_method": "something-else"}
    assert envmod.env_key(env) != envmod.env_key(other)
    before = envmod.ref_timing_key("t", env, cuda)
    old, envmod.TIMING_METHOD = envmod.TIMING_METHOD, "something-else"
    try:
        assert envmod.ref_timing_key("t", env, cuda) != before
    finally:
        envmod.TIMING_METHOD = old
