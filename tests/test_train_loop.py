"""`kernelzero train --config plumbing-cpu` end to end, killed in the middle of a phase and resumed:
the same steps, no verdict lost, none judged twice, the same verdicts as an uninterrupted run.

Two runs go side by side (one uninterrupted, one killed with SIGKILL after the first logged step
of round 0's Coder phase, then resumed), about 3 minutes on an idle 2-core machine."""
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

def _start(out: Path, *extra):
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false"}
    cmd = [sys.executable, "-m", "kernelzero", "train", "--config", "plumbing-cpu", "--out", str(out), "--json"]
    return subprocess.Popen([*cmd, *extra], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)


def _finish(proc) -> dict:
    out, err = proc.communicate(timeout=420)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out)  # --json: stdout holds one JSON document and nothing else


def _lines(path: Path) -> list[dict]:
    out = []
    for line in path.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return out


@pytest.mark.slow
def test_tiny_cpu_kill_and_resume(tmp_path):
    full_dir, cut_dir = tmp_path / "full", tmp_path / "cut"
    full = _start(full_dir)
    cut = _start(cut_dir)
    # Kill the second run once the Coder phase of round 0 has logged its first step (mid-phase).
    steps = cut_dir / "steps.jsonl"
    deadline = time.time() + 400
    while time.time() < deadline:
        if steps.exists() and any(r["phase"] == "coder" and r["round"] == 0 for r in _lines(steps)):
            break
        assert cut.poll() is None, cut.communicate()[1][-3000:]
        time.sleep(0.2)
    else:
        pytest.fail("the run never reached the Coder phase")
    os.killpg(cut.pid, signal.SIGKILL)
    cut.wait()
    state = json.loads((cut_dir / "state.json").read_text())
    assert state["done"] == ["r0-proposer"], "the kill was meant to land inside r0-coder"
    before_keys = [r["key"] for r in _lines(cut_dir / "verdicts.jsonl")]

    resumed = _finish(_start(cut_dir, "--resume"))
    summary = _finish(full)
    assert resumed["resumed"] and not summary["resumed"]
    assert resumed["phases"] == summary["phases"] == ["r0-proposer", "r0-coder", "r1-proposer", "r1-coder"]
    assert resumed["steps"] == summary["steps"] == 8
    # the step log holds each step once, numbered 1..8, and matches the uninterrupted run's
    cut_steps, full_steps = _lines(cut_dir / "steps.jsonl"), _lines(full_dir / "steps.jsonl")
    assert [r["step"] for r in cut_steps] == [r["step"] for r in full_steps] == list(range(1, 9))
    # no verdict lost (everything judged before the kill is still there), none judged twice,
    # and the same set as the uninterrupted run
    keys = [r["key"] for r in _lines(cut_dir / "verdicts.jsonl")]
    assert len(keys) == len(set(keys))
    assert set(before_keys) <= set(keys)
    assert set(keys) == {r["key"] for r in _lines(full_dir / "verdicts.jsonl")}
    # held-out before RL (round 0) and after each round, in summary.json; reports for both
    # rounds, plots, TensorBoard events
    assert [h["round"] for h in resumed["heldout"]] == [h["round"] for h in summary["heldout"]] == [0, 1, 2]
    # the last round's change over round 0, paired by task, for every held-out set
    for s in (resumed, summary):
        assert set(s["heldout_change"]) == set(s["heldout"][0]["sets"])
        for c in s["heldout_change"].values():
            assert (c["from_round"], c["to_round"]) == (0, 2) and c["lo"] <= c["delta"] <= c["hi"]
    for d in (cut_dir, full_dir):
        assert json.loads((d / "summary.json").read_text())["heldout"][0]["round"] == 0
        assert (d / "reports" / "heldout.png").exists()
        for r in (1, 2):
            fig = json.loads((d / "reports" / f"round_{r}.json").read_text())
            assert {"proposer_valid_rate", "frontier_reward_mean", "pool_size", "pass@1", "pass@k",
                    "fast_1", "gate_open_rate", "pool_p_histogram"} <= set(fig)
        assert (d / "reports" / "rounds.png").exists()
        assert list((d / "tb").glob("events.out.tfevents.*"))
    # resuming restores what the next phase starts from: the RNG states (the resumed run samples
    # and steps exactly as the uninterrupted one: the same final weights) and the optimizer,
    # carried from phase to phase (Adam's step count after round 1's Coder phase covers both
    # rounds' steps, not one phase's)
    import torch
    from safetensors.torch import load_file
    final = [load_file(d / "ckpt" / "r1-coder" / "model" / "model.safetensors") for d in (cut_dir, full_dir)]
    assert final[0].keys() == final[1].keys()
    assert all(torch.equal(final[0][k], final[1][k]) for k in final[0]), "resumed weights differ"
    for d in (cut_dir, full_dir):
        opt = torch.load(d / "ckpt" / "r1-coder" / "optimizer.pt", weights_only=False)
        steps = {float(st["step"]) for st in opt["state"].values()}
        assert steps == {4.0}, f"{d.name}: Adam's step {steps} after 2 Coder phases of 2 steps"
    # every held-out task's outcome in every round, also those whose pair was judged in an
    # earlier round (answered from the cache: no new verdict record)
    for d in (cut_dir, full_dir):
        for h in json.loads((d / "summary.json").read_text())["heldout"]:
            for name, fig in h["sets"].items():
                path = d / "reports" / f"round_{h['round']}" / name / "outcomes.jsonl"
                recs = [json.loads(line) for line in path.read_text().splitlines()]
                greedy = {r["task"] for r in recs if r["sampling"] == "greedy"}
                assert len(greedy) == fig["n_tasks"], (d.name, h["round"], name)
    r1 = json.loads((cut_dir / "reports" / "round_2.json").read_text())
    assert r1 == {**r1, **{k: json.loads((full_dir / "reports" / "round_2.json").read_text())[k]
                           for k in ("proposer_valid_rate", "pass@1", "pool_size", "gate_open_rate")}}


MODULE = """import torch
import torch.nn as nn
N = {n}
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * N
def get_inputs():
    return [torch.randn(N)]
def get_init_inputs():
    return []
"""


def test_coder_phase_records_pool_pass_rates_and_the_band_follows_them(tmp_path, monkeypatch):
    """Issue 6: the Coder phase's samples of pool tasks update the pool's p (its latest group per
    task), so a module the Coder now always (or never) solves is not trained on next round.
    TRL is stubbed: the trainer's gathered reward history is what the loop reads."""
    from types import SimpleNamespace

    from kernelzero.train import ca_grpo
    from kernelzero.train.config_file import load_config
    from kernelzero.train.loop import Loop

    loop = Loop(load_config("plumbing-cpu"), tmp_path / "run")
    loop.judge = None  # run() opens the judging pool; the stubbed phase judges nothing
    solved, half, lost, unsampled = hashes = [
        loop.pool.add(MODULE.format(n=n), ["relu"], f"m{n}", origin="test")[0] for n in (1, 2, 3, 4)]
    for h in hashes:
        loop.pool.record(h, 0, [1, 0, 1, 0])  # the Proposer phase measured p = 0.5: all in band
    seed = loop._seed_tasks()[0].hash
    # two steps of G = 4 samples per task, as CAGRPOTrainer gathers them (task_ids align with c)
    steps = [{solved: [0, 0, 0, 0], lost: [0, 0, 0, 0], seed: [1, 1, 1, 1]},
             {solved: [1, 1, 1, 1], half: [0, 1, 1, 0], seed: [0, 0, 0, 0]}]
    calls = []

    def fake_run_coder_phase(cfg, model, tasks, judge, out_dir, seed_, callbacks, opt, context, world):
        calls.append({t.hash for t in tasks})
        history = [{"task_ids": [t for t, c in step.items() for _ in c],
                    "correct": [float(x) for c in step.values() for x in c],
                    "components": {"gate_open_rate": 0.0, "correct_rate": 0.5}} for step in steps]
        return SimpleNamespace(reward_history=history, state=SimpleNamespace(global_step=len(steps)))

    monkeypatch.setattr(ca_grpo, "run_coder_phase", fake_run_coder_phase)
    _, info = loop._coder_phase(0, tmp_path / "ckpt", 0, None, {"round": 0, "phase": "coder"})
    assert set(hashes) <= calls[0] and seed in calls[0]
    latest = {h: loop.pool.get(h).rates[-1] for h in hashes}
    # the latest group of each task counts, not the phase's mean (solved: 0/4 then 4/4 -> 1.0)
    assert latest[solved] == {"round": 0, "phase": "coder", "n": 4, "correct": 4, "p": 1.0}
    assert (latest[half]["phase"], latest[half]["p"]) == ("coder", 0.5)
    assert (latest[lost]["phase"], latest[lost]["p"]) == ("coder", 0.0)
    assert latest[unsampled]["phase"] == "proposer"  # not sampled: its p stays the Proposer's
    assert [r["phase"] for r in loop.pool.get(solved).rates] == ["proposer", "coder"]
    assert info["pool_measured"] == 3 and info["pool_in_band_after"] == 2

    # the next Coder phase trains on what is still in band
    loop._coder_phase(1, tmp_path / "ckpt", 0, None, {"round": 1, "phase": "coder"})
    assert {half, unsampled} <= calls[1] and not {solved, lost} & calls[1]
