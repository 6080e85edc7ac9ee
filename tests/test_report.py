"""Report files (markdown, JSON, PNG plots), the text table, and `kernelzero report`."""
from __future__ import annotations

import argparse
import importlib
import json
import sys

import pytest

from kernelzero.cli import COMMANDS, UsageError
from kernelzero.commands import report_cmd
from kernelzero.eval.verdict import Verdict
from kernelzero.metrics import summarize
from kernelzero.report import render_table, write_report
from kernelzero.store import Store

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def records():
    out = []
    for t in range(6):
        for s in range(3):
            ok = (t + s) % 3 != 0
            sp = 0.5 + 0.4 * t + 0.1 * s if ok else None
            out.append({"task": f"L1/{t}_Op", "correct": ok, "speedup": sp,
                        "speedup_compile": sp * 0.8 if sp else None,
                        "status": "correct" if ok else "incorrect"})
    return out


def assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    width, height = int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")
    assert width > 200 and height > 200
    pytest.importorskip("matplotlib")
    import matplotlib.image
    img = matplotlib.image.imread(path)  # decodes the whole file, so a truncated PNG fails here
    assert img.shape[:2] == (height, width) and img.std() > 0  # not a blank canvas


def test_write_report_files(tmp_path):
    pytest.importorskip("matplotlib")
    summary = summarize(records(), n_boot=200)
    files = write_report(summary, tmp_path / "out", title="Test run")
    assert set(files) == {"report.md", "summary.json", "speedup_hist.png", "pass_at_k.png"}
    assert all(p.parent == tmp_path / "out" and p.is_file() for p in files.values())
    assert json.loads(files["summary.json"].read_text()) == json.loads(json.dumps(summary))
    md = files["report.md"].read_text()
    assert md.startswith("# Test run")
    for heading in ("## pass@k", "## fast_p", "## geomean speedup", "## statuses"):
        assert heading in md
    p1 = summary["pass_at_k"]["1"]
    assert f"| 1 | {100 * p1['value']:.1f}% [{100 * p1['lo']:.1f}, {100 * p1['hi']:.1f}] |" in md
    assert "vs torch.compile" in md and "![pass_at_k.png](pass_at_k.png)" in md
    assert "| incorrect | 6 | 33.3% |" in md
    assert_png(files["speedup_hist.png"])
    assert_png(files["pass_at_k.png"])


def test_without_matplotlib_writes_markdown_and_json_and_says_so(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)  # makes the import fail
    files = write_report(summarize(records(), n_boot=0), tmp_path)
    assert set(files) == {"report.md", "summary.json"}
    assert not list(tmp_path.glob("*.png"))
    assert "Plots skipped: matplotlib is not installed" in files["report.md"].read_text()


def test_untimed_summary_skips_the_speedup_plot_with_a_reason(tmp_path):
    pytest.importorskip("matplotlib")
    recs = [{"task": f"t{i}", "correct": i % 2 == 0, "speedup": None} for i in range(4)]
    files = write_report(summarize(recs, n_boot=50), tmp_path)
    assert "speedup_hist.png" not in files and "pass_at_k.png" in files
    md = files["report.md"].read_text()
    assert "speedup_hist.png not drawn: no correct sample has a speedup" in md
    assert "| eager | n/a | 0 |" in md
    assert "| any | not measured | not measured |" in md


def test_render_table_plain_text():
    summary = summarize(records(), n_boot=0)
    text = render_table(summary)
    assert text.startswith("6 tasks, 18 samples (3 per task), 12 correct")
    assert f"{100 * summary['pass_at_k']['1']['value']:.1f}%" in text
    assert "torch.compile" in text and "\x1b" not in text  # no colour codes
    assert "no CI" in text


# -- the command ---------------------------------------------------------------------------------

def fill_db(path, runs=("old", "new")):
    with Store(path) as s:
        for run in runs:
            for i, r in enumerate(records()):
                v = Verdict(status=r["status"], reason="", speedup=r["speedup"],
                            speedup_compile=r["speedup_compile"])
                s.put(f"{run}-{i}", v, run=run, task_key=r["task"], sample_id=i % 3)


def run_report(argv):
    parser = argparse.ArgumentParser(prog="kernelzero")
    report_cmd.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["report", *argv])
    return args.func(args)


def test_report_json_parses_and_writes_into_runs_dir(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    fill_db(tmp_path / "kernelzero.db")
    assert run_report(["--json", "--boot", "100"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["run"] == "new" and doc["n_records"] == 18 and doc["ci"]["n_boot"] == 100
    assert doc["statuses"] == {"correct": 12, "incorrect": 6}
    assert set(doc["files"]) >= {"report.md", "summary.json"}
    assert (tmp_path / "runs" / "new" / "report.md").is_file()


def test_report_text_with_run_and_out(tmp_path, capsys):
    db = tmp_path / "x.db"
    fill_db(db)
    assert run_report(["--db", str(db), "--run", "old", "--out", str(tmp_path / "o"),
                       "--boot", "0"]) == 0
    out = capsys.readouterr().out
    assert "run 'old'" in out and "pass@k" in out and f"report written to {tmp_path / 'o'}" in out
    assert (tmp_path / "o" / "summary.json").is_file()


def test_report_usage_errors(tmp_path):
    with pytest.raises(UsageError, match="no results database"):
        run_report(["--db", str(tmp_path / "missing.db")])
    junk = tmp_path / "junk.db"
    junk.write_text("not sqlite at all\n" * 50)
    with pytest.raises(UsageError, match="not a KernelZero"):
        run_report(["--db", str(junk)])
    db = tmp_path / "kz.db"
    Store(db).close()
    with pytest.raises(UsageError, match="no verdicts"):
        run_report(["--db", str(db)])
    fill_db(db, runs=("a",))
    with pytest.raises(UsageError, match="no run named 'zzz'.*runs: a"):
        run_report(["--db", str(db), "--run", "zzz"])


def test_report_is_registered_in_the_cli(tmp_path, monkeypatch, capsys):
    assert "report" in COMMANDS
    for name in COMMANDS:  # the full CLI needs every sub-command module; some land later
        try:
            importlib.import_module(f"kernelzero.commands.{name}_cmd")
        except ModuleNotFoundError as e:
            if e.name != f"kernelzero.commands.{name}_cmd":
                raise
            pytest.skip(f"kernelzero.commands.{name}_cmd not written yet")
    from kernelzero.cli import main
    monkeypatch.chdir(tmp_path)
    fill_db(tmp_path / "kernelzero.db", runs=("only",))
    assert main(["report", "--json", "--boot", "10"]) == 0
    assert json.loads(capsys.readouterr().out)["run"] == "only"
    assert main(["report", "--db", "nope.db"]) == 2


def test_training_run_change_since_round_0_is_paired_and_printed(tmp_path):
    """summary.json's heldout_change: the last round's greedy outcomes minus round 0's, task by
    task, read from each round's outcomes.jsonl; sampled outcomes and other rounds do not count."""
    from kernelzero.report import render_heldout_change
    from kernelzero.train.heldout import change_since_start

    def write(r, correct, sampled=()):
        d = tmp_path / f"round_{r}" / "in_family"
        d.mkdir(parents=True)
        rows = [{"sampling": "greedy", "task": f"t{i}", "correct": c} for i, c in enumerate(correct)]
        rows += [{"sampling": "sampled", "task": f"t{i}", "correct": c} for i, c in enumerate(sampled)]
        (d / "outcomes.jsonl").write_text("".join(json.dumps(x) + "\n" for x in rows))

    write(0, [False] * 8 + [True] * 2, sampled=[True] * 10)
    write(1, [False] * 10)
    write(2, [True] * 3 + [False] * 5 + [True, False])
    assert change_since_start(tmp_path, 0) == {}
    c = change_since_start(tmp_path, 2)["in_family"]
    assert (c["from_round"], c["to_round"], c["n_tasks"], c["gained"], c["lost"]) == (0, 2, 10, 3, 1)
    assert c["delta"] == pytest.approx(0.2)
    line = render_heldout_change({"in_family": c})
    assert line.startswith("in_family: round 2 - round 0 = +20.0 points [")
    assert "paired by task" in line and "3 tasks gained, 1 lost of 10" in line
