"""One reward, whichever engine asks: KernelZero's TRL trainer (EvaluatorReward + the gathered
CA-GRPO rewards), verl's batch reward manager and verl's per-sample one give the same reward for
the same verdicts (issue 25). Before, verl recomputed it: a speedup the judge could not confirm
still paid, and the speed transform was ignored."""
import math

import pytest

from kernelzero.eval.verdict import Verdict
from kernelzero.train import verl
from kernelzero.tasks import Candidate, Task
from kernelzero.train.config import CAGRPOConfig
from kernelzero.train.ca_grpo import EvaluatorReward
from kernelzero.train.rewards import ca_grpo_rewards, keyed_ca_grpo_rewards

CA = CAGRPOConfig(alpha=0.5, beta=0.1, s_max=10.0, speed_transform="log", group_size=4)


def _v(status: str, speedup=None, flags=()):
    return Verdict(status=status, reason="as judged", speedup=speedup, flags=list(flags))


# Two prompts of four samples: A three correct (its gate opens), B one (closed).
GROUPS = {
    "A": [_v("correct", 2.0), _v("correct", 0.5), _v("correct", 5.0, ["timing_unconfirmed"]),
          _v("incorrect")],
    "B": [_v("correct", 4.0), _v("incorrect"), _v("runtime_error"), _v("timeout")],
}
REFERENCE = {"A": "class Model: a = 1\n", "B": "class Model: b = 2\n"}
# By hand: S = ln(speedup) clipped at 0; an unconfirmed speedup earns nothing; B's gate is shut.
EXPECTED = {"A": [1 + 0.1 * math.log(2.0), 1.0, 1.0, 0.0], "B": [1.0, 0.0, 0.0, 0.0]}


class FixedJudge:
    """Answers each candidate with the verdict its name points at (what the evaluator said)."""

    def __init__(self):
        self.by_name = {f"{g}{i}": v for g, vs in GROUPS.items() for i, v in enumerate(vs)}

    def judge(self, pairs, context=None):
        return [self.by_name[c.name] for _, c in pairs]

    def judge_many(self, pairs, on_verdict=None):
        return [self.by_name[c.source.split("#")[1].split()[0]] for _, c in pairs]


def _completion(name: str) -> str:
    return f"```python\nclass ModelNew:  # {name}\n    pass\n```"


def trl_rewards() -> dict[str, list[float]]:
    """The trainer's path: the evaluator reward source, then the gate on whole groups."""
    tasks = {g: Task.from_source(REFERENCE[g], name=g) for g in GROUPS}
    names = [f"{g}{i}" for g in GROUPS for i in range(4)]
    source = EvaluatorReward(FixedJudge(), tasks, lambda text: Candidate(text, text), CA)
    parts = source.score(prompts=None, completions=names, task_id=[n[0] for n in names])
    rewards, _ = ca_grpo_rewards([c for c, _ in parts], [s for _, s in parts], 4, CA.alpha,
                                 CA.beta)
    return {g: rewards[4 * k:4 * k + 4] for k, g in enumerate(GROUPS)}


@pytest.fixture
def verl_env(monkeypatch):
    monkeypatch.setattr(verl, "_client", FixedJudge())
    for name, value in ((verl.BETA_ENV, CA.beta), (verl.ALPHA_ENV, CA.alpha),
                        (verl.SMAX_ENV, CA.s_max), (verl.TRANSFORM_ENV, CA.speed_transform)):
        monkeypatch.setenv(name, str(value))


def test_trl_and_verl_batch_give_the_same_rewards_in_any_order(verl_env):
    assert trl_rewards() == pytest.approx(EXPECTED)
    # verl interleaves or shuffles a batch's groups: a group is the samples of one prompt
    order = [("B", 2), ("A", 0), ("A", 3), ("B", 0), ("A", 2), ("B", 1), ("A", 1), ("B", 3)]
    out = verl.compute_score_batch(["kb"] * 8, [_completion(f"{g}{i}") for g, i in order],
                                   [REFERENCE[g] for g, _ in order])
    got = {g: [0.0] * 4 for g in GROUPS}
    for (g, i), o in zip(order, out):
        got[g][i] = o["score"]
    assert got == pytest.approx(EXPECTED)
    assert [o["correct"] for o in out[:2]] == [0.0, 1.0]


def test_verl_per_sample_is_the_trainers_reward_for_a_group_of_one(verl_env):
    for g, verdicts in GROUPS.items():
        for i, v in enumerate(verdicts):
            one = verl.compute_score("kb", _completion(f"{g}{i}"), REFERENCE[g])["score"]
            c = 1.0 if v.correct else 0.0
            speed = 0.0 if "timing_unconfirmed" in v.flags or not v.correct else \
                max(math.log(v.speedup), 0.0)
            alone, _ = ca_grpo_rewards([c], [speed], 1, CA.alpha, CA.beta)
            assert one == pytest.approx(alone[0]), (g, i)


def test_verl_settings_are_checked_before_judging(monkeypatch):
    class NoJudging:
        def judge_many(self, pairs, on_verdict=None):
            raise AssertionError("judged with a bad setting")
    monkeypatch.setattr(verl, "_client", NoJudging())
    monkeypatch.setenv(verl.TRANSFORM_ENV, "square")
    with pytest.raises(ValueError, match="clip, log, excess"):
        verl.compute_score("kb", _completion("A0"), REFERENCE["A"])
    monkeypatch.setenv(verl.TRANSFORM_ENV, "clip")
    monkeypatch.setenv(verl.BETA_ENV, "lots")
    with pytest.raises(ValueError, match="KERNELZERO_REWARD_BETA='lots'"):
        verl.compute_score("kb", _completion("A0"), REFERENCE["A"])


def test_keyed_groups_match_consecutive_groups():
    c, s = [1, 1, 0, 0, 1, 0, 0, 0], [2.0, 3.0, 0, 0, 5.0, 0, 0, 0]
    whole, _ = ca_grpo_rewards(c, s, 4, 0.5, 0.1)
    keys = ["x"] * 4 + ["y"] * 4
    perm = [5, 0, 7, 2, 1, 4, 6, 3]
    keyed = keyed_ca_grpo_rewards([c[i] for i in perm], [s[i] for i in perm],
                                  [keys[i] for i in perm], 0.5, 0.1)
    assert keyed == pytest.approx([whole[i] for i in perm])
    with pytest.raises(ValueError, match="keys"):
        keyed_ca_grpo_rewards([1], [0.0], [], 0.5, 0.1)
