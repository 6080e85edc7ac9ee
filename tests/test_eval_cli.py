"""`kernelzero eval` as a user runs it: one JSON verdict, exit codes, batch mode, Ctrl-C, resume."""
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time

EX = os.path.join(os.path.dirname(__file__), "..", "kernelzero", "examples")
TASK = os.path.join(EX, "tasks/level1/1_ReLU.py")
GOOD = os.path.join(EX, "candidates/level_1_problem_1_sample_0_kernel.py")
WRONG = os.path.join(EX, "candidates/level_1_problem_1_sample_1_kernel.py")


def kz(*args, **kw):
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, "-m", "kernelzero", *args], capture_output=True,
                          text=True, env=env, timeout=600, **kw)


def test_json_prints_exactly_one_verdict_and_exits_zero_for_any_verdict():
    for cand, status in ((GOOD, "correct"), (WRONG, "incorrect")):
        r = kz("eval", TASK, cand, "--device", "cpu", "--json")
        assert r.returncode == 0, r.stderr
        lines = [ln for ln in r.stdout.splitlines() if ln.strip()]
        assert len(lines) == 1
        v = json.loads(lines[0])
        assert v["status"] == status and v["correct"] == (status == "correct")
        assert "Traceback" not in r.stderr


def test_usage_errors_exit_two_without_traceback(tmp_path):
    r = kz("eval", str(tmp_path / "missing.py"), GOOD)
    assert r.returncode == 2 and "no such file" in r.stderr and "Traceback" not in r.stderr
    r = kz("eval", "--tasks", EX + "/tasks")
    assert r.returncode == 2 and "--samples" in r.stderr


def _rows(db):
    with sqlite3.connect(db) as con:
        return con.execute("select key, status from verdicts").fetchall()


def test_batch_ctrl_c_keeps_finished_verdicts_and_resume_finishes(tmp_path):
    samples = tmp_path / "samples"
    samples.mkdir()
    # Six correct samples of one task (distinct sources) so the run takes a while.
    src = open(GOOD).read()
    for s in range(6):
        (samples / f"level_1_problem_1_sample_{s}_kernel.py").write_text(src + f"\n# sample {s}\n")
    db = str(tmp_path / "kz.db")
    env = dict(os.environ, TRITON_INTERPRET="1")
    proc = subprocess.Popen([sys.executable, "-m", "kernelzero", "eval", "--tasks", EX + "/tasks",
                             "--samples", str(samples), "--device", "cpu", "--db", db,
                             "--workers", "1"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline:
        time.sleep(0.5)
        if os.path.exists(db) and len(_rows(db)) >= 1:
            break
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err[-2000:]
    kept = _rows(db)
    assert 1 <= len(kept) < 6 and all(st == "correct" for _, st in kept)
    r = kz("eval", "--tasks", EX + "/tasks", "--samples", str(samples), "--device", "cpu",
           "--db", db, "--json")
    assert r.returncode == 0, r.stderr
    summary = json.loads(r.stdout)
    assert summary["already_judged"] == len(kept)
    assert summary["judged_now"] == 6 - len(kept)
    rows = _rows(db)
    assert len(rows) == 6 and len({k for k, _ in rows}) == 6
    assert all(st == "correct" for _, st in rows)
    shutil.rmtree(samples)
