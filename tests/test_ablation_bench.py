"""bench/ablation.py's pure parts: what each arm changes in the base config, and the paired
differences its tables report."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_spec = importlib.util.spec_from_file_location("ablation", ROOT / "bench" / "ablation.py")
ablation = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ablation)

BASE = {"name": "abl", "rounds": 1, "proposer_steps": 8, "coder_steps": 40, "seed_tasks": "family:400",
        "proposer": {"kind": "family", "band": [0.0, 1.0]}, "coder": {"alpha": 0.5, "beta": 0.1}}


def test_the_proposer_arms_train_on_the_proposer_s_modules_alone_and_uniform_on_family_draws():
    frontier = ablation.arm_config(BASE, "frontier", 1, None)
    frozen = ablation.arm_config(BASE, "frozen", 1, "C")
    uniform = ablation.arm_config(BASE, "uniform", 1, None)
    assert frontier["seed_tasks"] == frozen["seed_tasks"] == "family:0"  # the pool's in-band only
    assert frontier["proposer_steps"] == frozen["proposer_steps"] == 8
    assert frozen["proposer"] == {"kind": "family", "band": [0.0, 1.0], "frozen": True}
    assert "frozen" not in frontier["proposer"]
    assert uniform["proposer_steps"] == 0 and uniform["seed_tasks"] == "family:400"
    assert frozen["coder_model"] == "C" and "coder_model" not in frontier
    assert (frontier["seed"], frontier["name"]) == (1, "abl-frontier-s1")
    for arm in ("frontier", "uniform"):  # the Coder's budget is the same in every RL arm
        assert ablation.arm_config(BASE, arm, 0, None)["coder_steps"] == 40
    assert BASE["seed_tasks"] == "family:400" and "frozen" not in BASE["proposer"]  # not mutated


def test_the_tables_pair_arms_by_task_and_say_whether_a_difference_holds():
    tasks = [f"t{i}" for i in range(40)]
    results = {"uniform": {"0": {"ood": {t: float(i % 2) for i, t in enumerate(tasks)}}},
               "frontier": {"0": {"ood": {t: 1.0 for t in tasks} | {"extra": 0.0}}}}
    figs = ablation.tables(results)
    (d,) = [x for x in figs["differences"] if (x["a"], x["b"]) == ("frontier", "uniform")]
    assert d["n_tasks"] == 40 and abs(d["delta"] - 0.5) < 1e-9 and d["lo"] > 0  # paired on common tasks
    assert figs["arms"]["frontier"]["sets"]["ood"]["n_tasks"] == 41
    md = ablation.markdown(figs, {"base": "b", "fingerprint": "f", "coder": "c", "written": "d", "machine": "m"})
    assert "| frontier - uniform | ood | +0.500 |" in md and "| yes |" in md


def test_proposer_arms_without_proposer_steps_are_refused_before_any_run(tmp_path, capsys):
    """With proposer_steps 0 the frontier and frozen arms would have no task: a clear error at
    once, not a traceback after the other arms' hour of runs."""
    import pytest
    with pytest.raises(SystemExit) as e:
        ablation.main(["--base", "ablation-cpu", "--arms", "sft,frontier", "--seeds", "0",
                       "--out", str(tmp_path / "abl"), "--work", str(tmp_path / "runs")])
    assert e.value.code == 2
    assert "proposer_steps 0" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def _run_dir(root, rows, rnd=1):
    """A finished run's files as final_outcomes reads them: summary.json and the last round's
    outcomes.jsonl of one held-out set."""
    import json
    (root / "reports" / f"round_{rnd}" / "in_family").mkdir(parents=True)
    (root / "summary.json").write_text(json.dumps({"heldout": [{"round": 0}, {"round": rnd}]}))
    (root / "reports" / f"round_{rnd}" / "in_family" / "outcomes.jsonl").write_text(
        "\n".join(json.dumps({"sampling": "greedy", **r}) for r in rows) + "\n")
    return root


def _fake_loop(monkeypatch, run) -> None:
    """bench/ablation.py runs a fake Loop whose run(self) is `run` (self.cfg, self.out set)."""
    import kernelzero.train.loop as loop

    class FakeLoop:
        def __init__(self, cfg, out, resume=False):
            self.cfg, self.out = cfg, out

    FakeLoop.run = run
    monkeypatch.setattr(loop, "Loop", FakeLoop)


def test_fast_1_counts_a_task_only_when_its_kernel_is_correct_and_strictly_faster_than_eager(tmp_path):
    rows = [{"task": "a", "correct": True, "speedup": 1.5}, {"task": "b", "correct": True, "speedup": 1.0},
            {"task": "c", "correct": False, "speedup": 3.0}, {"task": "d", "correct": True, "speedup": None},
            {"task": "e", "correct": True, "speedup": 0.4}]
    correct, fast = ablation.final_outcomes(_run_dir(tmp_path / "r", rows))
    assert correct == {"in_family": {"a": 1.0, "b": 1.0, "c": 0.0, "d": 1.0, "e": 1.0}}
    assert fast == {"in_family": {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0, "e": 0.0}}
    untimed = [{"task": "a", "correct": True, "speedup": None}]  # a CPU run: no fast_1 at all
    assert ablation.final_outcomes(_run_dir(tmp_path / "u", untimed))[1] == {}


def test_the_gate_arms_get_fast_1_tables_beside_pass_at_1(tmp_path, monkeypatch):
    """With timed held-out kernels the store, the markdown and a second plot carry fast_1, and the
    gate's pairs (uniform - correct_only, speed_first - uniform) are differences in it."""
    import json

    tasks = [f"t{i}" for i in range(30)]
    work = tmp_path / "runs"
    speeds = {"uniform": 2.0, "correct_only": 0.5, "sft": 0.5}  # every kernel correct in every arm
    def fake_run(self):
        arm = self.cfg.name.split("-")[-2]
        _run_dir(Path(self.out), [{"task": t, "correct": True, "speedup": speeds[arm]} for t in tasks])
    _fake_loop(monkeypatch, fake_run)
    out = tmp_path / "gate"
    assert ablation.main(["--base", "ablation-gate-gpu", "--arms", "sft,uniform,correct_only", "--seeds", "0",
                          "--out", str(out), "--work", str(work)]) == 0
    md = out.with_suffix(".md").read_text()
    assert "## Greedy fast_1 of the final round" in md
    assert "| uniform - correct_only | in_family | +1.000 |" in md  # fast_1: 1.0 vs 0.0
    assert "| uniform - correct_only | in_family | +0.000 |" in md  # pass@1: equal
    store = json.loads(out.with_suffix(".json").read_text())
    (entry,) = store.values()
    assert entry["tables_fast_1"]["arms"]["uniform"]["sets"]["in_family"]["fast_1"] == 1.0
    assert out.with_suffix(".png").exists() and (tmp_path / "gate-fast_1.png").exists()


def test_a_new_arm_gets_round_0_held_out_verdicts_of_its_seed_and_nothing_else(tmp_path):
    """An arm's round 0 is the same Coder on the same held-out tasks as the other arms of its seed,
    so its judge answers it from copied verdicts; the copies keep their tags (the cache loads
    them), and no rollout, later round or other seed's verdict crosses over."""
    from kernelzero.eval import Verdict
    from kernelzero.integrity import VerdictKey
    from kernelzero.train.judging import VerdictCache

    key = VerdictKey(b"k" * 32)
    work = tmp_path / "fp"
    done = VerdictCache(work / "sft-s0" / "verdicts.jsonl", key=key)
    v = Verdict("correct", "judged", speedup=1.5)
    done.put_many([("t0:c0", {"round": 0, "phase": "heldout", "set": "in_family"}, v),
                   ("t1:c1", {"round": 0, "phase": "heldout", "set": "in_family"}, v),
                   ("t2:c2", {"round": 0, "phase": "coder"}, v),
                   ("t3:c3", {"round": 1, "phase": "heldout", "set": "in_family"}, v)])
    VerdictCache(work / "sft-s1" / "verdicts.jsonl", key=key).put_many(
        [("t9:c9", {"round": 0, "phase": "heldout"}, v)])
    with open(work / "sft-s0" / "verdicts.jsonl", "a") as f:
        f.write('{"key": "torn')  # a killed run's half line

    n, src = ablation.share_baseline(work, 0, work / "uniform-s0")
    assert (n, src) == (2, "sft-s0")
    got = VerdictCache(work / "uniform-s0" / "verdicts.jsonl", key=key)
    assert got.keys() == {"t0:c0", "t1:c1"} and not got.refused
    assert got.get("t0", "c0").speedup == 1.5
    assert ablation.share_baseline(work, 2, work / "uniform-s2") == (0, None)
    assert not (work / "uniform-s2").exists()


def test_a_run_stopped_by_the_limit_ends_with_a_line_and_the_tables_of_the_finished_ones(tmp_path, monkeypatch, capsys):
    """`timeout --signal=INT` cuts an arm: no traceback, the arm is not counted, and the tables of
    the arms that finished are written (before, the store was left with no tables)."""
    import json

    tasks = [f"t{i}" for i in range(10)]

    def run(self):
        if "uniform" in self.cfg.name:
            raise KeyboardInterrupt
        _run_dir(Path(self.out), [{"task": t, "correct": True, "speedup": 2.0} for t in tasks])
    _fake_loop(monkeypatch, run)
    out = tmp_path / "gate"
    rc = ablation.main(["--base", "ablation-gate-gpu", "--arms", "sft,uniform,correct_only", "--seeds", "0",
                        "--out", str(out), "--work", str(tmp_path / "runs")])
    assert rc == 130
    said = capsys.readouterr().out
    assert "uniform seed 0 stopped" in said and "Traceback" not in said
    (entry,) = json.loads(out.with_suffix(".json").read_text()).values()
    assert set(entry["results"]) == {"sft"}  # correct_only never started, uniform not counted
    assert entry["tables"]["arms"]["sft"]["sets"]["in_family"]["pass@1"] == 1.0
    assert "| sft | 1 |" in out.with_suffix(".md").read_text()


def test_a_run_finished_by_an_earlier_invocation_keeps_the_machine_it_ran_on(tmp_path, monkeypatch):
    """A second call on the same machine finds the first call's runs finished in WORK without the
    store that call wrote (the device copies the work tree afresh): the tables still say where
    those runs ran (7 Dec: the markdown named only the arm run by the last call)."""
    import json

    _fake_loop(monkeypatch, lambda self: _run_dir(Path(self.out), [{"task": "t0", "correct": True, "speedup": 2.0}]))
    monkeypatch.setattr(ablation, "_machine", lambda: "card A")
    work = tmp_path / "runs"
    args = ["--base", "ablation-gate-gpu", "--seeds", "0", "--work", str(work)]
    assert ablation.main([*args, "--arms", "sft", "--out", str(tmp_path / "first")]) == 0
    monkeypatch.setattr(ablation, "_machine", lambda: "card B")
    assert ablation.main([*args, "--arms", "sft,uniform", "--out", str(tmp_path / "second")]) == 0
    (entry,) = json.loads((tmp_path / "second.json").read_text()).values()
    assert entry["ran_on"]["sft"]["0"].startswith("card A")
    assert entry["ran_on"]["uniform"]["0"].startswith("card B")
    assert "sft s0: card A" in (tmp_path / "second.md").read_text()
