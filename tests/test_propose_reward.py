"""Frontier reward: hand-computed cases, rho for invalid modules, input checks."""
from __future__ import annotations

import pytest

from kernelzero.propose.reward import frontier_reward, frontier_rewards, pass_rate


@pytest.mark.parametrize("flags,expected", [
    ([1, 0], 1.0),                      # p = 0.5: the frontier
    ([True, False, True, False], 1.0),
    ([1, 1, 1, 1], 0.0),                # always solved
    ([0, 0, 0, 0], 0.0),                # never solved
    ([1, 0, 0, 0], 0.5),                # p = 0.25 -> 1 - 2 * 0.25
    ([1, 1, 1, 0], 0.5),                # p = 0.75
    ([1, 1, 1, 0, 0, 0, 0, 0], 0.75),   # p = 3/8 -> 1 - 2 * 1/8
    ([1], 0.0),
])
def test_hand_computed(flags, expected):
    assert frontier_reward(flags) == pytest.approx(expected)


def test_rho_for_invalid_modules():
    assert frontier_reward([1, 0], valid=False) == -1.0
    assert frontier_reward([], rho=-0.5, valid=False) == -0.5
    assert frontier_rewards([[1, 0], [1, 1], []], valid=[True, True, False], rho=-2.0) == [1.0, 0.0, -2.0]


def test_bad_inputs_raise():
    with pytest.raises(ValueError):
        frontier_reward([])
    with pytest.raises(ValueError):
        pass_rate([0.5, 1])
    with pytest.raises(ValueError):
        frontier_rewards([[1]], valid=[True, False])
