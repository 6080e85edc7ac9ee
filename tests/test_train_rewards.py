"""CA-GRPO reward and speed score: hand-computed cases, the gate below / at / above alpha."""
import math

import pytest

from kernelzero.train.rewards import ca_grpo_rewards, group_gates, speed_score


def test_gate_below_alpha_gives_plain_correctness():
    # one group of 4, 1 correct: rate 0.25 < 0.5, the speed term is off
    r, comps = ca_grpo_rewards([1, 0, 0, 0], [5.0, 9.0, 9.0, 9.0], group_size=4)
    assert r == [1.0, 0.0, 0.0, 0.0]
    assert comps.gate_open_rate == 0.0 and comps.correct_rate == 0.25
    assert comps.mean_speed_score == 5.0


def test_gate_above_alpha_adds_speed_for_correct_samples_only():
    r, comps = ca_grpo_rewards([1, 1, 1, 0], [2.0, 0.0, 10.0, 7.0], group_size=4, alpha=0.5, beta=0.1)
    assert r == pytest.approx([1.2, 1.0, 2.0, 0.0])
    assert comps.gate_open_rate == 1.0
    assert comps.mean_speed_score == pytest.approx(4.0)
    assert comps.mean_reward == pytest.approx((1.2 + 1.0 + 2.0) / 4)


def test_tie_at_exactly_alpha_opens_the_gate():
    r, _ = ca_grpo_rewards([1, 1, 0, 0], [3.0, 1.0, 0.0, 0.0], group_size=4, alpha=0.5, beta=0.1)
    assert r == pytest.approx([1.3, 1.1, 0.0, 0.0])
    # 3 of 10 at alpha = 0.3: 0.3 * 10 is not exactly 3 in binary, the tie still opens the gate
    assert group_gates([1] * 3 + [0] * 7, 10, alpha=0.3) == [True]
    assert group_gates([1] * 2 + [0] * 8, 10, alpha=0.3) == [False]


def test_all_wrong_group_gets_zero_whatever_the_speed():
    r, comps = ca_grpo_rewards([0, 0, 0, 0], [10.0] * 4, group_size=4, alpha=0.0, beta=1.0)
    assert r == [0.0] * 4
    assert comps.mean_speed_score is None and comps.correct_rate == 0.0
    assert comps.gate_open_rate == 1.0  # alpha = 0: every group reaches it, yet c_i = 0 zeroes r_i


def test_gates_are_per_group_in_a_batch():
    correct = [1, 1, 1, 1, 1, 0, 0, 0]
    r, comps = ca_grpo_rewards(correct, [1.0] * 8, group_size=4, beta=0.5)
    assert r == pytest.approx([1.5] * 4 + [1.0, 0.0, 0.0, 0.0])
    assert comps.gate_open_rate == 0.5 and comps.n_groups == 2


def test_partial_groups_are_refused():
    with pytest.raises(ValueError, match="whole groups"):
        ca_grpo_rewards([1, 0, 1], [0.0] * 3, group_size=2)
    with pytest.raises(ValueError, match="0 or 1"):
        ca_grpo_rewards([0.5, 1], [0.0, 0.0], group_size=2)
    with pytest.raises(ValueError):
        ca_grpo_rewards([1, 1], [0.0, -1.0], group_size=2)


def test_speed_score_transforms():
    assert speed_score(None) == 0.0
    assert speed_score(float("nan")) == 0.0
    assert speed_score(-3.0) == 0.0
    assert speed_score(2.5, s_max=10) == 2.5
    assert speed_score(50.0, s_max=10) == 10.0
    assert speed_score(float("inf"), s_max=4) == 4.0
    assert speed_score(0.5, transform="log") == 0.0
    assert speed_score(math.e, s_max=10, transform="log") == pytest.approx(1.0)
    assert speed_score(1e6, s_max=10, transform="log") == pytest.approx(math.log(10))
    assert speed_score(0.8, transform="excess") == 0.0
    assert speed_score(3.0, s_max=10, transform="excess") == pytest.approx(2.0)
    with pytest.raises(ValueError):
        speed_score(1.0, transform="square")
