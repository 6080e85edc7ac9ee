"""Cost model: FLOPs and bytes of one operator call, and a roofline estimate of eager runtime.

Covers: the `Cost` record, the machine models (`TARGETS`) the composer sizes tasks for, and the
roofline time of a chain of operator calls (each call pays max(FLOPs / peak, bytes / bandwidth)
plus a launch overhead, as PyTorch eager runs one or more kernels per call).
Does not cover: measuring anything. The figures are estimates for sizing tasks, never reported as
measurements; the evaluator times the real module on the real device.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2, "float64": 8, "int64": 8, "int32": 4,
               "bool": 1}


@dataclass(frozen=True)
class Cost:
    """Work of one operator call: floating-point operations and bytes read plus written."""

    flops: float
    bytes: float

    def __add__(self, other: "Cost") -> "Cost":
        return Cost(self.flops + other.flops, self.bytes + other.bytes)


@dataclass(frozen=True)
class Target:
    """A machine model for sizing tasks.

    peak_flops: sustained fp32 FLOP/s of eager PyTorch compute-bound kernels (no TF32).
    bandwidth: sustained memory bandwidth in bytes/s of eager memory-bound kernels.
    launch_s: fixed cost of one eager operator call (kernel launch and Python dispatch), seconds.
    target_ms: (low, high) range of the estimated eager runtime a composed module aims for; the
        composer draws a target log-uniformly from it.
    memory_cap_bytes: cap on the estimated peak memory of inputs, weights and intermediates.
    max_numel: cap on the elements of any single tensor (keeps CPU tasks interpreter-sized).
    """

    name: str
    peak_flops: float
    bandwidth: float
    launch_s: float
    target_ms: tuple[float, float]
    memory_cap_bytes: float
    max_numel: int

    def __post_init__(self) -> None:
        if min(self.peak_flops, self.bandwidth) <= 0 or self.launch_s < 0:
            raise ValueError(f"Target {self.name}: peak_flops and bandwidth must be positive")
        lo, hi = self.target_ms
        if not 0 < lo <= hi:
            raise ValueError(f"Target {self.name}: target_ms must be (low, high) with 0 < low <= high")
        if self.memory_cap_bytes <= 0 or self.max_numel < 1:
            raise ValueError(f"Target {self.name}: memory_cap_bytes and max_numel must be positive")


# Vendor figures derated to what eager PyTorch sustains (about 70% of fp32 peak, 80% of bandwidth).
TARGETS: dict[str, Target] = {
    "h100": Target("h100", peak_flops=0.7 * 67e12, bandwidth=0.8 * 3.35e12, launch_s=6e-6,
                   target_ms=(1.0, 4.0), memory_cap_bytes=4 * 2**30, max_numel=2**28),
    "h200": Target("h200", peak_flops=0.7 * 67e12, bandwidth=0.8 * 4.8e12, launch_s=6e-6,
                   target_ms=(1.0, 4.0), memory_cap_bytes=4 * 2**30, max_numel=2**28),
    # Small modules for CPU runs and the Triton interpreter: a 2-core machine's eager PyTorch.
    "cpu": Target("cpu", peak_flops=10e9, bandwidth=4e9, launch_s=10e-6,
                  target_ms=(0.1, 0.5), memory_cap_bytes=8 * 2**20, max_numel=2**16),
}


def get_target(name: str) -> Target:
    try:
        return TARGETS[name]
    except KeyError:
        raise ValueError(f"unknown target {name!r}: choose one of {sorted(TARGETS)}") from None


def numel(shape) -> int:
    return math.prod(int(s) for s in shape)


def estimate_ms(costs: list[Cost], target: Target) -> float:
    """Roofline estimate of the eager runtime of a sequence of operator calls, milliseconds."""
    total = 0.0
    for c in costs:
        total += max(c.flops / target.peak_flops, c.bytes / target.bandwidth) + target.launch_s
    return total * 1e3


# ----------------------------------------------------------------------------------------------
# Per-family cost rules. Arguments are concrete shapes (tuples of ints); `b` is bytes per element.

def elementwise(in_shape, out_shape, b: int = 4, flops_per_elem: float = 1.0, extra_in=()) -> Cost:
    """Read every input once, write the output once."""
    read = numel(in_shape) + sum(numel(s) for s in extra_in)
    return Cost(flops_per_elem * numel(out_shape), b * (read + numel(out_shape)))


def reduction(in_shape, out_shape, b: int = 4, flops_per_elem: float = 1.0, passes: int = 1) -> Cost:
    """Read the input `passes` times (softmax/norm read twice), write the reduced output."""
    return Cost(flops_per_elem * numel(in_shape), b * (passes * numel(in_shape) + numel(out_shape)))


def gemm(m: int, n: int, k: int, batch: int = 1, b: int = 4) -> Cost:
    """C[batch, m, n] = A[batch, m, k] @ B[batch, k, n]: 2mnk FLOPs, each operand moved once."""
    return Cost(2.0 * batch * m * n * k, b * batch * (m * k + k * n + m * n))


def conv(in_shape, out_shape, weight_shape, b: int = 4, transposed: bool = False) -> Cost:
    """Direct convolution: 2 FLOPs per multiply-add; input, weight and output moved once.

    For a forward conv every output element sums over weight_shape[1:] (C_in/groups x kernel);
    for a transposed conv every *input* element scatters over weight_shape[1:] (C_out/groups x
    kernel), so the work scales with the input instead.
    """
    per = numel(weight_shape[1:])
    work = numel(in_shape) if transposed else numel(out_shape)
    return Cost(2.0 * work * per, b * (numel(in_shape) + numel(weight_shape) + numel(out_shape)))
