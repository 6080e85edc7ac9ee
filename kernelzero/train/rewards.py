"""CA-GRPO rewards as plain functions: the speed score and the correctness-gated group reward.

Covers (architecture §2): for Coder sample i of group G,

    r_i = c_i * (1 + T(G) * beta * S_i),   T(G) = 1 iff mean_j c_j >= alpha, else 0,

with c_i in {0, 1} and S_i the speed score of the sample. The gate is a property of a WHOLE group,
so `ca_grpo_rewards` must be called on the rewards of every process gathered together (the TRL
adapter in `ca_grpo.py` does this after TRL's cross-process gather); calling it on a slice that
cuts a group in two is a bug and is refused when the length is not a multiple of the group size.

Does not cover: group-relative advantages (the engine computes them from these rewards), the
Proposer's frontier reward (`kernelzero.propose.reward`), or how correctness is judged (the
evaluator). No torch, no TRL: lists of floats in, lists of floats out.
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Literal, Sequence

SpeedTransform = Literal["clip", "log", "excess"]
SPEED_TRANSFORMS: tuple[str, ...] = ("clip", "log", "excess")
# A group's correct rate counts as reaching alpha when it is within this of it: 0.3 * 10 is not
# exactly 3.0 in binary floating point, and a tie at exactly alpha must open the gate.
GATE_TOLERANCE = 1e-9


def speed_score(speedup: float | None, s_max: float = 10.0, transform: SpeedTransform = "clip") -> float:
    """The speed score S of one sample from its measured speedup over PyTorch eager.

    - `clip` (the paper's default): speedup clipped to [0, s_max];
    - `log`: ln(speedup) clipped to [0, ln(s_max)], so only beating eager pays, with diminishing returns;
    - `excess`: (speedup - 1) clipped to [0, s_max - 1], so only beating eager pays, linearly.
    No measurement (None: a CPU run, a failed candidate) or NaN scores 0; +inf scores the cap.
    """
    if transform not in SPEED_TRANSFORMS:
        raise ValueError(f"speed transform {transform!r}: choose one of {SPEED_TRANSFORMS}")
    if s_max <= 0:
        raise ValueError(f"s_max must be positive, got {s_max}")
    if speedup is None or math.isnan(speedup) or speedup <= 0:
        return 0.0
    if transform == "clip":
        return min(float(speedup), s_max)
    if transform == "log":
        return min(max(math.log(speedup), 0.0), math.log(s_max)) if s_max > 1 else 0.0
    return min(max(float(speedup) - 1.0, 0.0), max(s_max - 1.0, 0.0))


def verdict_reward_parts(verdict, s_max: float = 10.0,
                         transform: SpeedTransform = "clip") -> tuple[float, float]:
    """(c_i, S_i) of one judged sample, the same for every engine (TRL here, verl in
    `kernelzero.train.verl`): c = 1 for a correct verdict, else 0; S its speed score, and 0 for a
    wrong kernel or a speedup the judge could not confirm against its own clock
    (`timing_unconfirmed`). Reads `correct`, `speedup` and `flags` (a Verdict or its like)."""
    correct = bool(verdict.correct)
    confirmed = "timing_unconfirmed" not in (verdict.flags or [])
    speed = speed_score(verdict.speedup, s_max, transform) if correct and confirmed else 0.0
    return (1.0 if correct else 0.0), speed


def keyed_ca_grpo_rewards(correct: Sequence[float], speed: Sequence[float], keys: Sequence,
                          alpha: float = 0.5, beta: float = 0.1) -> list[float]:
    """CA-GRPO rewards where a group is every sample sharing a key (the same prompt), in any
    order: for engines that hand over a batch without saying where its groups start (verl). A
    sample alone in its group is gated by itself: a correct one gets 1 + beta * S."""
    if not len(correct) == len(speed) == len(keys):
        raise ValueError(f"{len(correct)} correctness values, {len(speed)} speed scores and "
                         f"{len(keys)} keys")
    groups: dict = {}
    for i, k in enumerate(keys):
        groups.setdefault(k, []).append(i)
    rewards = [0.0] * len(keys)
    for members in groups.values():
        group, _ = ca_grpo_rewards([correct[i] for i in members], [speed[i] for i in members],
                                   len(members), alpha, beta)
        for i, r in zip(members, group):
            rewards[i] = r
    return rewards


@dataclass
class RewardComponents:
    """What one batch of CA-GRPO rewards was made of (logged every step).

    correct_rate: share of samples that were correct.
    gate_open_rate: share of groups whose correct rate reached alpha (T(G) = 1).
    mean_speed_score: mean S over the correct samples (None when no sample was correct).
    mean_reward: mean r over all samples.
    n_samples / n_groups: sizes of the batch.
    mixed_group_rate: share of groups whose rewards are not all equal: only those give GRPO a
        non-zero advantage, so this is the share of the batch that teaches anything.
    """

    correct_rate: float
    gate_open_rate: float
    mean_speed_score: float | None
    mean_reward: float
    n_samples: int
    n_groups: int
    mixed_group_rate: float = 0.0

    def to_dict(self) -> dict:
        return asdict(self)


def group_gates(correct: Sequence[float], group_size: int, alpha: float = 0.5) -> list[bool]:
    """T(G) for each consecutive group of `group_size` samples: mean correctness >= alpha."""
    _check_groups(len(correct), group_size)
    gates = []
    for start in range(0, len(correct), group_size):
        rate = sum(correct[start:start + group_size]) / group_size
        gates.append(rate >= alpha - GATE_TOLERANCE)
    return gates


def ca_grpo_rewards(correct: Sequence[float], speed: Sequence[float], group_size: int,
                    alpha: float = 0.5, beta: float = 0.1) -> tuple[list[float], RewardComponents]:
    """CA-GRPO rewards for a batch made of whole groups, consecutive samples of one prompt each.

    `correct[i]` is c_i (0 or 1; bools accepted), `speed[i]` is S_i (already a speed score, see
    `speed_score`). Returns the rewards in input order and their components.
    """
    if len(correct) != len(speed):
        raise ValueError(f"{len(correct)} correctness values but {len(speed)} speed scores")
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha is a correct rate and must lie in [0, 1], got {alpha}")
    if beta < 0:
        raise ValueError(f"beta must be >= 0, got {beta}")
    cs = [float(c) for c in correct]
    bad = [c for c in cs if c not in (0.0, 1.0)]
    if bad:
        raise ValueError(f"correctness must be 0 or 1, got {bad[:3]}")
    ss = [float(s) for s in speed]
    if any(math.isnan(s) or s < 0 for s in ss):
        raise ValueError("speed scores must be finite and >= 0 (use speed_score to make them)")
    gates = group_gates(cs, group_size, alpha)
    rewards = [c * (1.0 + (1.0 if gates[i // group_size] else 0.0) * beta * s)
               for i, (c, s) in enumerate(zip(cs, ss))]
    correct_speeds = [s for c, s in zip(cs, ss) if c == 1.0]
    n = len(cs)
    groups = [rewards[i:i + group_size] for i in range(0, n, group_size)]
    mixed = sum(max(g) - min(g) > 1e-12 for g in groups)
    comps = RewardComponents(
        correct_rate=sum(cs) / n if n else 0.0,
        gate_open_rate=sum(gates) / len(gates) if gates else 0.0,
        mean_speed_score=sum(correct_speeds) / len(correct_speeds) if correct_speeds else None,
        mean_reward=sum(rewards) / n if n else 0.0,
        n_samples=n, n_groups=len(gates), mixed_group_rate=mixed / len(groups) if groups else 0.0)
    return rewards, comps


def _check_groups(n: int, group_size: int) -> None:
    if group_size < 1:
        raise ValueError(f"group_size must be >= 1, got {group_size}")
    if n % group_size:
        raise ValueError(f"{n} samples do not split into whole groups of {group_size}: the gate "
                         "needs every sample of a group (gather across processes first)")
