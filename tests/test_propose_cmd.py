"""`kernelzero propose`: writes N validated modules and a manifest, the same for the same seed."""
from __future__ import annotations

import json

from kernelzero.cli import main
from kernelzero.tasks import load_tasks


def test_propose_is_deterministic_and_writes_a_manifest(tmp_path, capsys):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(["propose", "--n", "3", "--out", str(out), "--target", "cpu", "--seed", "5",
                     "--apis", "3", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["accepted"] == 3 and summary["validation_pass_rate"] > 0
        outs.append(out)
    files = sorted(p.name for p in outs[0].glob("*.py"))
    assert files == sorted(p.name for p in outs[1].glob("*.py")) and len(files) == 3
    for f in files:
        assert (outs[0] / f).read_text() == (outs[1] / f).read_text()
    rows = [json.loads(line) for line in (outs[0] / "manifest.jsonl").read_text().splitlines()]
    assert [r["file"] for r in rows] == sorted(files, key=lambda f: int(f.split("_")[0]))
    for r in rows:
        assert len(r["apis"]) == 3 and r["task_hash"] and r["canonical_hash"]
        assert r["cost"]["est_ms"] > 0 and "output_shapes" in r["validation"]
    assert len(load_tasks(outs[0])) == 3


def test_propose_refuses_a_used_directory(tmp_path):
    (tmp_path / "1_x.py").write_text("x = 1\n")
    assert main(["propose", "--n", "1", "--out", str(tmp_path)]) == 2


def test_an_interrupted_propose_keeps_the_modules_already_accepted(tmp_path, monkeypatch, capsys):
    """Ctrl-C mid-run: every module accepted before it is on disk, with its manifest line."""
    import kernelzero.propose.pipeline as loop
    from kernelzero.propose.pipeline import Accepted, ProposeReport

    def fake_propose(cfg, ev, candidates, dist, on_progress=None):
        rep = ProposeReport()
        for i in range(2):
            rep.accepted.append(Accepted(name=f"M{i}", source=f"# module {i}\n", apis=["torch.relu"],
                                         origin="composer", task_hash=f"h{i}", canonical_hash=f"c{i}",
                                         meta={}, figures={}))
            on_progress(rep)
        raise KeyboardInterrupt

    monkeypatch.setattr(loop, "propose_modules", fake_propose)
    out = tmp_path / "out"
    assert main(["propose", "--n", "5", "--out", str(out), "--target", "cpu"]) == 130
    assert sorted(p.name for p in out.glob("*.py")) == ["1_M0.py", "2_M1.py"]
    rows = [json.loads(line) for line in (out / "manifest.jsonl").read_text().splitlines()]
    assert [r["file"] for r in rows] == ["1_M0.py", "2_M1.py"]
