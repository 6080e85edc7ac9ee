"""The Proposer's reward source: frontier reward on hand-computed cases, rho for invalid
modules, every valid module recorded with its flags, the band; and the verdict cache."""
import json

import pytest

from kernelzero.eval import Verdict
from kernelzero.propose.reward import frontier_reward
from kernelzero.tasks import Candidate, Task
from kernelzero.train.config import TrainConfig
from kernelzero.train.judging import Judge, VerdictCache
from kernelzero.train.proposer_grpo import FrontierRewardSource, ProposerTools

MODULE = """import torch
import torch.nn as nn
N = {n}
class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)
def get_inputs():
    return [torch.randn(N)]
def get_init_inputs():
    return []
"""


class FakeEvaluator:
    """Verdicts from the candidate text: 'OK' in it means correct. Counts what it was asked."""

    def __init__(self):
        self.judged = []

    def judge_many(self, pairs, on_verdict=None):
        self.judged += pairs
        return [Verdict(status="correct" if "OK" in c.source else "incorrect", reason="fake",
                        task_hash=t.hash, candidate_hash=c.hash) for t, c in pairs]


def _tools(attempts_by_n):
    """Module N=n: the Coder's attempts at it are attempts_by_n[n] (True = correct)."""
    def generate(prompts, n):
        out = []
        for p in prompts:
            size = int(p[0]["content"].split("N = ")[1].split("\n")[0])
            out.append([f"attempt {i} {'OK' if ok else 'bad'}" for i, ok in enumerate(attempts_by_n[size])])
        return out

    return ProposerTools(
        prompt=lambda apis, weak: [{"role": "user", "content": "write"}],
        parse=lambda text: MODULE.format(n=int(text.split()[1])) if text.startswith("module") else None,
        validate=lambda task, apis: ("N = 13" not in task.source, "N=13 fails the check"),
        reward=frontier_reward, coder_generate=generate,
        coder_prompt=lambda task: [{"role": "user", "content": task.source}],
        to_candidate=lambda text: Candidate(source=text))


def test_frontier_reward_rho_and_band():
    cfg = TrainConfig(proposer={"coder_attempts": 4, "rho": -0.7, "band": [0.0, 1.0]})
    attempts = {1: [True, False, False, False], 2: [True, True, False, False],
                3: [True, True, True, True], 4: [False] * 4}
    ev = FakeEvaluator()
    src = FrontierRewardSource(cfg, _tools(attempts), Judge(ev), context=dict)
    completions = ["module 1", "module 2", "module 3", "module 4", "no module here", "module 13"]
    rewards = src(prompts=[[]] * 6, completions=completions, api_set=["relu"] * 6)
    # p = 1/4 -> 1 - 2|0.25 - 0.5| = 0.5; p = 1/2 -> 1; p = 1 -> 0; p = 0 -> 0; invalid -> rho
    assert rewards == pytest.approx([0.5, 1.0, 0.0, 0.0, -0.7, -0.7])
    assert [r["valid"] for r in src.last] == [True, True, True, True, False, False]
    assert [r.get("in_band") for r in src.last[:4]] == [True, True, False, False]
    assert src.last[5]["reason"] == "N=13 fails the check"
    assert [flags for _, _, flags in src.valid_modules] == [attempts[n] for n in (1, 2, 3, 4)]
    assert len(ev.judged) == 16  # 4 valid modules x 4 attempts, in one batch


def test_the_proposer_s_feedback_names_the_ops_the_coder_fails_and_is_slow_on(tmp_path):
    """The loop's feedback path end to end: a valid module's timed attempts are kept by source
    hash, its flags go to a real task pool, and the feedback line built from the pool names the
    op of the module the Coder fails most and the op whose correct kernels are slower than eager."""
    from kernelzero.propose.task_pool import TaskPool
    from kernelzero.train.family_proposer import pool_feedback

    class TimedEvaluator(FakeEvaluator):
        def judge_many(self, pairs, on_verdict=None):  # correct kernels of module N=2 run at half eager's speed
            vs = super().judge_many(pairs)
            for (t, _), v in zip(pairs, vs):
                v.speedup = (0.5 if "N = 2" in t.source else 3.0) if v.correct else None
            return vs

    cfg = TrainConfig(proposer={"coder_attempts": 4})
    attempts = {1: [True, False, False, False], 2: [True, True, True, False]}
    src = FrontierRewardSource(cfg, _tools(attempts), Judge(TimedEvaluator()), context=dict)
    src(prompts=[[]] * 2, completions=["module 1", "module 2"], api_set=["tanh", "exp"])
    with TaskPool(tmp_path / "pool.db") as pool:
        for task, apis, flags in src.valid_modules:
            h, _ = pool.add(task.source, apis, task.name)
            pool.record(h, 0, flags)
        text = pool_feedback(pool.entries(), src.speedups)
    assert sorted(src.speedups.values()) == [[0.5, 0.5, 0.5], [3.0]]
    assert text == "fails on tanh (25%), exp (75%); slow on exp (100%)"


def test_frontier_reward_function_hand_computed():
    assert frontier_reward([1, 0, 1, 0]) == 1.0
    assert frontier_reward([1, 1, 1, 0]) == pytest.approx(0.5)
    assert frontier_reward([0, 0]) == 0.0 and frontier_reward([1]) == 0.0
    assert frontier_reward([], rho=-1.0, valid=False) == -1.0


def test_verdict_cache_judges_each_pair_once_and_survives_a_torn_line(tmp_path):
    path = tmp_path / "verdicts.jsonl"
    ev = FakeEvaluator()
    judge = Judge(ev, VerdictCache(path))
    t = Task.from_source(MODULE.format(n=1))
    a, b = Candidate("x OK"), Candidate("y")
    vs = judge.judge([(t, a), (t, b), (t, a)], context={"round": 0})
    assert [v.correct for v in vs] == [True, False, True]
    assert judge.last.n_judged == 2 and judge.last.n_unique == 2
    judge.judge([(t, a)])
    assert judge.last.n_judged == 0 and judge.last.n_cached == 1 and len(ev.judged) == 2
    with path.open("a") as f:
        f.write('{"key": "torn')          # a kill in the middle of a write
    again = Judge(FakeEvaluator(), VerdictCache(path))
    assert len(again.cache) == 2
    again.judge([(t, a), (t, b), (t, Candidate("z OK"))])
    assert again.last.n_judged == 1
    assert len(VerdictCache(path)) == 3  # the new verdict was not glued onto the torn line
    keys = []
    for line in path.read_text().splitlines():
        try:
            keys.append(json.loads(line)["key"])
        except json.JSONDecodeError:
            pass
    assert len(keys) == len(set(keys)) == 3


def test_a_proposer_step_moves_toward_frontier_modules(tmp_path):
    """One GRPO step of the Proposer on the frontier reward: the completions whose modules sat at
    the Coder's frontier (p = 0.5, reward 1) gained log-probability against those the Coder
    always solves (p = 1, reward 0). Fails with the reward negated before TRL sees it."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kernelzero.models.tiny import build_tiny_model
    from kernelzero.train.ca_grpo import completion_text
    from kernelzero.train.proposer_grpo import run_proposer_phase
    from tests.test_train_ca_grpo import _completion_logprob

    model = build_tiny_model(tmp_path / "proposer", hidden_size=32, num_layers=2)
    torch.manual_seed(0)
    # Any completion is a module; its length decides where it sits: even -> p = 0.5, odd -> p = 1.
    tools = ProposerTools(
        prompt=lambda apis, weak: [{"role": "user", "content": f"write {','.join(apis)}"}],
        parse=lambda text: MODULE.format(n=4 + len(text) % 2),
        validate=lambda task, apis: (True, ""),
        reward=frontier_reward,
        coder_generate=lambda prompts, n: [
            [f"{'OK' if (i % 2 or 'N = 5' in p[0]['content']) else 'bad'} {i}" for i in range(n)]
            for p in prompts],
        coder_prompt=lambda task: [{"role": "user", "content": task.source}],
        to_candidate=lambda text: Candidate(source=text))
    cfg = TrainConfig(proposer_steps=1, proposer={"group_size": 8, "prompts_per_step": 2,
                                                 "learning_rate": 3e-3, "max_completion_tokens": 12,
                                                 "coder_attempts": 4, "rho": -1.0})
    class Recording(FrontierRewardSource):
        seen: list = []

        def __call__(self, prompts, completions, **kw):
            out = super().__call__(prompts, completions, **kw)
            self.seen += [(p[-1]["content"], completion_text(c)) for p, c in zip(prompts, completions)]
            return out

    reward = Recording(cfg, tools, Judge(FakeEvaluator()), context=dict)
    rows = [{"prompt": [{"role": "user", "content": f"write api{i}"}], "api_set": f"api{i}"}
            for i in range(2)]
    tok = AutoTokenizer.from_pretrained(model)
    before = AutoModelForCausalLM.from_pretrained(model).eval()
    trainer = run_proposer_phase(cfg, str(model), rows, reward, tmp_path / "out", seed=0,
                                 callbacks=[], optimizer_in=None)
    after = trainer.model.eval()
    gains = {"frontier": [], "solved": []}
    for prompt, text in reward.seen:
        kind = "frontier" if len(text) % 2 == 0 else "solved"
        gains[kind].append(_completion_logprob(after, tok, prompt, text)
                           - _completion_logprob(before, tok, prompt, text))
    assert gains["frontier"] and gains["solved"], "no batch held both kinds: pick another seed"
    mean = {k: sum(g) / len(g) for k, g in gains.items()}
    assert mean["frontier"] - mean["solved"] > 0.05, mean
