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
