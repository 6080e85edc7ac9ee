"""Training's judging pool (`reward` section): the local pool, a Ray pool and the reward service
give the training judging layer (`open_pool` + `Judge`) the same verdicts for the built-in
example candidates; the service is a real uvicorn server on 127.0.0.1. Bad settings (`--pool foo`,
an unreachable URL, conflicting flags) stop `kernelzero train` with one line, not a traceback."""
from __future__ import annotations

import socket
from pathlib import Path

import pytest

from kernelzero.eval import EvalConfig, Evaluator
from kernelzero.tasks import Candidate, Task, find_samples, load_tasks
from kernelzero.train.config import RewardConfig
from kernelzero.train.judging import Judge, PoolUnavailable, VerdictCache, open_pool

EXAMPLES = Path(__file__).resolve().parents[1] / "kernelzero" / "examples"

# One secret seed for every evaluator here, so errors measured on the same inputs match too.
CFG = EvalConfig(device="cpu", max_workers=2, correctness_trials=2, hardening_trials=False, seed=7)
NAMES = ("level_1_problem_1_sample_0_kernel",   # correct
         "level_1_problem_1_sample_1_kernel",   # incorrect
         "level_1_problem_1_sample_2_kernel",   # compile_error
         "level_1_problem_2_sample_0_kernel")   # correct (softmax)
# Per-run figures: how long judging took and what the candidate printed.
VOLATILE = ("wall_s", "phases_s", "log_tail")


def example_pairs():
    tasks = {(t.level, t.problem_id): t for t in load_tasks(EXAMPLES / "tasks")}
    by_name = {path.stem: (tasks[(lv, pid)], Candidate.from_file(path))
               for lv, pid, _, path in find_samples(EXAMPLES / "candidates")}
    return [by_name[n] for n in NAMES]


def comparable(verdicts) -> list[dict]:
    return [{k: v for k, v in verdict.to_dict().items() if k not in VOLATILE} for verdict in verdicts]


@pytest.fixture(scope="module")
def local_verdicts():
    with open_pool(RewardConfig(), CFG) as pool:
        assert isinstance(pool, Evaluator)
        verdicts = Judge(pool).judge(example_pairs())
    assert [v.status for v in verdicts] == ["correct", "incorrect", "compile_error", "correct"], \
        [v.reason for v in verdicts]
    return comparable(verdicts)


def test_reward_service_gives_training_the_local_pools_verdicts(local_verdicts, tmp_path):
    from test_serve import running  # a real uvicorn server on 127.0.0.1, free port, in a thread

    from kernelzero.serve.app import ServeConfig, create_app
    from kernelzero.serve.client import RewardClient

    pairs = example_pairs()
    with Evaluator(CFG) as served, running(create_app(served, ServeConfig(), pool_kind="local")) as url:
        with open_pool(RewardConfig(url=url), CFG) as pool:
            assert isinstance(pool, RewardClient)
            judge = Judge(pool, VerdictCache(tmp_path / "verdicts.jsonl"))
            verdicts = judge.judge(pairs + pairs[:1], context={"round": 0, "phase": "coder"})
            assert judge.last.n_judged == len(pairs)  # the repeated pair is sent once
            health = pool.health()
    assert health["judged_total"] == len(pairs)
    assert comparable(verdicts[:len(pairs)]) == local_verdicts
    assert comparable(verdicts[-1:]) == local_verdicts[:1]
    # what came over HTTP is cached like a local verdict: a resume finds it without the service
    cached = VerdictCache(tmp_path / "verdicts.jsonl")
    assert comparable([cached.get(t.hash, c.hash) for t, c in pairs]) == local_verdicts


def test_ray_pool_gives_training_the_local_pools_verdicts(local_verdicts):
    ray = pytest.importorskip("ray")
    from kernelzero.eval.pools.ray_pool import RayPool

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with open_pool(RewardConfig(pool="ray"), CFG) as pool:
            assert isinstance(pool, RayPool)
            verdicts = Judge(pool).judge(example_pairs())
    finally:
        ray.shutdown()
    assert comparable(verdicts) == local_verdicts


def _dead_url() -> str:
    with socket.socket() as s:  # bound, never listening: connection refused
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_unreachable_service_fails_fast_with_one_line(tmp_path, capsys):
    from kernelzero.cli import main

    url = _dead_url()
    with pytest.raises(PoolUnavailable, match="not usable"):
        open_pool(RewardConfig(url=url), CFG)
    rc = main(["train", "--config", "plumbing-cpu", "--out", str(tmp_path / "run"), "--reward-url", url])
    err = capsys.readouterr().err
    assert rc == 2 and "Traceback" not in err
    assert err.count("\n") == 1 and f"reward service at {url} is not usable" in err, err
    assert not (tmp_path / "run" / "models").exists()  # stopped before any model was built


def test_the_start_up_check_tries_the_token(monkeypatch):
    from test_serve import GatedPool, running

    from kernelzero.serve.app import ServeConfig, create_app
    from kernelzero.serve.client import TOKEN_ENV

    monkeypatch.delenv(TOKEN_ENV, raising=False)
    gated = GatedPool()
    gated.config = CFG  # judges "as" this run's settings (the start-up check compares them)
    with running(create_app(gated, ServeConfig(token="tok-1"))) as url:
        with pytest.raises(PoolUnavailable, match="HTTP 401"):
            open_pool(RewardConfig(url=url), CFG)
        with pytest.raises(PoolUnavailable, match="HTTP 403"):
            open_pool(RewardConfig(url=url, token="wrong"), CFG)
        monkeypatch.setenv(TOKEN_ENV, "tok-1")
        with open_pool(RewardConfig(url=url), CFG) as pool:
            task = Task.from_source("class Model: pass")  # GatedPool: 'ok' in the candidate -> correct
            verdicts = Judge(pool).judge([(task, Candidate("ok")), (task, Candidate("bad"))])
            assert [v.status for v in verdicts] == ["correct", "incorrect"]


def test_a_service_judging_with_other_settings_is_refused(monkeypatch):
    """A service whose tolerance (or policy, trials, ...) differs would pay rewards that do not
    mean what the run configured: refused at start-up, naming the fields."""
    import dataclasses

    from test_serve import GatedPool, running

    from kernelzero.serve.app import ServeConfig, create_app

    gated = GatedPool()
    gated.config = dataclasses.replace(CFG, tolerance="strict" if CFG.tolerance == "paper" else "paper",
                                       correctness_trials=CFG.correctness_trials + 1)
    with running(create_app(gated, ServeConfig())) as url:
        with pytest.raises(PoolUnavailable, match=r"other settings.*tolerance.*correctness_trials"):
            open_pool(RewardConfig(url=url), CFG)
        gated.config = CFG
        with open_pool(RewardConfig(url=url), CFG):
            pass


def test_serve_takes_the_judging_settings_of_a_training_config(tmp_path):
    import argparse

    from kernelzero.commands.serve_cmd import _eval_fields
    from kernelzero.eval import EvalConfig
    from kernelzero.train.config_file import PRESET_DIR

    args = argparse.Namespace(eval_config="single-h200", device=None, workers=3, policy=None,
                              tolerance=None)
    cfg = EvalConfig(**_eval_fields(args))
    assert (cfg.device, cfg.tolerance, cfg.max_workers) == ("cuda", "paper", 3)
    args.device, args.tolerance = "cpu", "strict"
    cfg = EvalConfig(**_eval_fields(args))
    assert (cfg.device, cfg.tolerance) == ("cpu", "strict")
    args.eval_config = str(PRESET_DIR / "single-h200.yaml")  # a file path works the same
    assert EvalConfig(**_eval_fields(args)).tolerance == "strict"
    args.eval_config = str(tmp_path / "missing.yaml")
    with pytest.raises(ValueError, match="--eval-config"):
        _eval_fields(args)


@pytest.mark.parametrize("argv, message", [
    (["--reward-url", "ftp://example.org"], "must start with http"),
    (["--reward-url", "http://127.0.0.1:9", "--pool", "ray"], "--reward-url judges on the service"),
    (["--ray-address", "auto"], "--ray-address needs --pool ray"),
    (["--pool", "ray", "--ray-address", "auto", "--config", "plumbing-cpu"], None),  # accepted (not run)
])
def test_train_judging_flags(argv, message, tmp_path, capsys, monkeypatch):
    from kernelzero.cli import main
    from kernelzero.train import loop

    started = []
    monkeypatch.setattr(loop.Loop, "run", lambda self: started.append(self.cfg.reward) or
                        {"steps": 0, "phases": [], "verdicts": 0, "pool": 0, "wall_s": 0.0})
    argv = ["train", "--config", "plumbing-cpu", "--out", str(tmp_path / "run"), *argv]
    rc = main(argv)
    err = capsys.readouterr().err
    if message is None:
        assert rc == 0 and started[0] == RewardConfig(pool="ray", ray_address="auto")
        return
    assert rc == 2 and message in err and err.count("\n") == 1, err
    assert not started


def test_train_pool_foo_is_refused_by_the_parser(capsys):
    from kernelzero.cli import main

    code = main(["train", "--config", "plumbing-cpu", "--pool", "foo"])
    err = capsys.readouterr().err
    assert code == 2 and "invalid choice: 'foo'" in err and "Traceback" not in err


def test_a_batch_killed_halfway_keeps_the_verdicts_it_reached(tmp_path, monkeypatch):
    """Each verdict reaches the cache file as it comes in: a held-out evaluation cut by a step
    limit lost every verdict of its batch, and its resumed run started the batch again."""
    from kernelzero.eval import Verdict
    import kernelzero.train.judging as J

    class DiesAfterTwo:
        def __init__(self):
            self.asked = []

        def judge_many(self, pairs, on_verdict=None):
            self.asked.append(len(pairs))
            for i, _ in enumerate(pairs):
                if len(self.asked) == 1 and i == 2:
                    raise KeyboardInterrupt  # the step limit
                on_verdict(i, Verdict(status="correct", backend="triton", reason="ok"))
            return [Verdict(status="correct", backend="triton", reason="ok") for _ in pairs]

    pairs = example_pairs()
    pool, lines = DiesAfterTwo(), []
    monkeypatch.setattr(J, "PROGRESS_EVERY_S", 0.0)
    with pytest.raises(KeyboardInterrupt):
        Judge(pool, VerdictCache(tmp_path / "v.jsonl"), log=lines.append).judge(pairs)
    assert len(VerdictCache(tmp_path / "v.jsonl")) == 2 and lines == ["    judged 1/4 (" + lines[0].split("(")[1],
                                                                       "    judged 2/4 (" + lines[1].split("(")[1]]
    out = Judge(pool, VerdictCache(tmp_path / "v.jsonl")).judge(pairs)
    assert pool.asked == [4, 2] and [v.status for v in out] == ["correct"] * 4
    assert len(VerdictCache(tmp_path / "v.jsonl")) == 4
