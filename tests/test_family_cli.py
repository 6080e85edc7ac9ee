"""`kernelzero propose --family`, and what became of every candidate in a validated propose run."""
from __future__ import annotations

import json
from collections import Counter

from kernelzero.cli import main
from kernelzero.tasks import load_tasks


def test_propose_family_writes_modules_and_a_manifest(tmp_path, capsys):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / name
        assert main(["propose", "--family", "--n", "12", "--out", str(out), "--seed", "4",
                     "--kinds", "elementwise,rowwise", "--max-ops", "2", "--json"]) == 0
        summary = json.loads(capsys.readouterr().out)
        assert summary["accepted"] == 12 and summary["outcomes"]["kept"] == 12
        assert summary["outcomes"]["candidates"] == 12 + summary["outcomes"]["duplicates"]
        outs.append(out)
    files = sorted(p.name for p in outs[0].glob("*.py"))
    assert files == sorted(p.name for p in outs[1].glob("*.py")) and len(files) == 12
    assert all((outs[0] / f).read_text() == (outs[1] / f).read_text() for f in files)
    rows = [json.loads(line) for line in (outs[0] / "manifest.jsonl").read_text().splitlines()]
    assert {r["family"]["kind"] for r in rows} <= {"elementwise", "rowwise"}
    assert all(1 <= r["family"]["chain_length"] <= 2 and r["origin"] == "family" for r in rows)
    assert len(load_tasks(outs[0])) == 12


def test_propose_family_counts_duplicates_and_refuses_bad_options(tmp_path, capsys):
    out = tmp_path / "one_op"
    # relu alone, on few shapes: texts repeat, and repeats are skipped and counted
    assert main(["propose", "--family", "--n", "30", "--out", str(out), "--kinds", "elementwise",
                 "--max-ops", "1"]) in (0, 1)
    text = capsys.readouterr().out
    assert "duplicates of an earlier module skipped" in text
    assert main(["propose", "--family", "--n", "2", "--out", str(tmp_path / "x"), "--kinds", "conv"]) == 2
    assert main(["propose", "--family", "--n", "2", "--out", str(tmp_path / "y"), "--min-ops", "3",
                 "--max-ops", "2"]) == 2


def test_every_validated_candidate_is_accounted_for(tmp_path, monkeypatch, capsys):
    """16 candidates for 10 modules: the summary says what became of each of the 16."""
    import kernelzero.propose.pipeline as loop
    from kernelzero.propose.pipeline import Accepted, ProposeReport

    def fake_propose(cfg, ev, candidates, dist, on_progress=None):
        rep = ProposeReport(candidates=16, validated=13,
                            filtered=Counter({"pre_duplicate": 1}),
                            rejections=Counter({"degenerate_output": 2, "too_fast": 2}))
        rep.accepted = [Accepted(name=f"M{i}", source=f"# module {i}\n", apis=["torch.relu"],
                                 origin="composer", task_hash=f"h{i}", canonical_hash=f"c{i}",
                                 meta={}, figures={}) for i in range(10)]
        return rep

    monkeypatch.setattr(loop, "propose_modules", fake_propose)
    assert main(["propose", "--n", "10", "--out", str(tmp_path / "o"), "--json"]) == 0
    o = json.loads(capsys.readouterr().out)["outcomes"]
    assert o == {"candidates": 16, "kept": 10, "rejected_by_validation": 3,
                 "filtered_before_validation": 1, "validated_beyond_need": 2}
    assert main(["propose", "--n", "10", "--out", str(tmp_path / "p")]) == 0
    text = capsys.readouterr().out
    assert ("of 16 candidates: 10 kept, 3 rejected by validation, 1 filtered before validation, "
            "2 validated beyond the 10 needed") in text
