"""The Proposer's frontier reward, as plain functions (no engine, no tensors).

r_P = 1 - 2 |p - 0.5| for a valid module, where p is the Coder's mean correctness over its G
samples of that module; an invalid module gets `rho` (default -1). r_P is 1 at p = 0.5 and 0 at
p in {0, 1}: the Proposer is paid for tasks on the edge of what the Coder can do.
"""
from __future__ import annotations

from collections.abc import Sequence


def pass_rate(correct_flags: Sequence[bool | int | float]) -> float:
    """p: the mean of the Coder's correctness flags (each 0/1 or bool)."""
    if len(correct_flags) == 0:
        raise ValueError("pass_rate needs at least one Coder sample (G >= 1)")
    vals = [float(f) for f in correct_flags]
    if any(v not in (0.0, 1.0) for v in vals):
        raise ValueError(f"correctness flags must be 0/1 or booleans, got {correct_flags!r}")
    return sum(vals) / len(vals)


def frontier_reward(correct_flags: Sequence[bool | int | float], rho: float = -1.0,
                    valid: bool = True) -> float:
    """1 - 2|p - 0.5| for a valid module (p = mean of `correct_flags`), `rho` for an invalid one."""
    if not valid:
        return float(rho)
    return 1.0 - 2.0 * abs(pass_rate(correct_flags) - 0.5)


def frontier_rewards(groups: Sequence[Sequence[bool | int | float]], valid: Sequence[bool] | None = None,
                     rho: float = -1.0) -> list[float]:
    """frontier_reward for a batch of modules: one flag group (and validity) per module."""
    valid = [True] * len(groups) if valid is None else list(valid)
    if len(valid) != len(groups):
        raise ValueError("frontier_rewards: one validity flag per group is required")
    return [frontier_reward(g, rho, v) if v else float(rho) for g, v in zip(groups, valid)]
