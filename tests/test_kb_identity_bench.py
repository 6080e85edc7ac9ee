"""bench/kernelbench_identity.py judge, on the CPU: each problem's reference judged as its own
candidate through `kernelzero eval`, a slice at a time, resumed through the store, the results
file holding every problem's row and the totals."""
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
EX = ROOT / "kernelzero" / "examples" / "tasks"


def _judge(kb, work, out, *extra):
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    return subprocess.run(
        [sys.executable, str(ROOT / "bench" / "kernelbench_identity.py"), "judge", "--kb", str(kb),
         "--levels", "1", "2", "--work", str(work), "--out", str(out), *extra,
         "--eval-args", "--device", "cpu", "--workers", "1"],
        capture_output=True, text=True, timeout=900, env=env, cwd=ROOT)


@pytest.mark.slow
def test_identity_judging_in_slices_resumes_and_reports(tmp_path):
    kb = tmp_path / "kb"
    for level, name in ((1, "1_ReLU.py"), (2, "1_Linear_Bias_ReLU.py")):
        (kb / f"level{level}").mkdir(parents=True)
        shutil.copy(EX / f"level{level}" / name, kb / f"level{level}" / name)
    out, work = tmp_path / "results.json", tmp_path / "work"
    first = _judge(kb, work, out, "--limit", "1")
    assert first.returncode == 0, first.stderr[-2000:]
    data = json.loads(out.read_text())["identity"]
    assert [s["problems"] for s in data["slices"]] == [1, 1]  # two slices of one
    assert data["totals"]["correct"] == 2 and data["totals"]["invalid_task"] == 0
    row = data["problems"]["L1/1_ReLU"]
    assert row["status"] == "correct" and row["wall_s"] > 0 and "footprint" in row
    again = _judge(kb, work, out)
    assert again.returncode == 0 and "problem(s), " not in again.stdout  # nothing left to judge
    data = json.loads(out.read_text())["identity"]
    assert data["totals"]["judged"] == 2 and len(data["slices"]) == 2


def test_a_folder_without_kernelbench_s_levels_is_refused_not_scanned(tmp_path):
    """An empty or wrong --kb once loaded every task under "." (the package's examples among
    KernelBench's problems, under the same level and number): refused, with what to give."""
    for kb in ("", str(tmp_path)):
        res = _judge(kb, tmp_path / "work", tmp_path / "results.json")
        assert res.returncode == 2 and "no level1/ there" in res.stderr, res.stderr[-500:]
        assert not (tmp_path / "results.json").exists()
