"""The composer: fusion chains are expressible, sizes follow the cost model, output is valid.

Static properties are checked on many API sets without running anything; the sandbox tests run a
few composed modules through the full validation check (evaluator on CPU).
"""
from __future__ import annotations

import math
import random

import pytest

from kernelzero.catalog.cooccurrence import load_default
from kernelzero.catalog.cost import get_target
from kernelzero.eval import EvalConfig, Evaluator
from kernelzero.propose.builder import ComposeError
from kernelzero.propose.composer import ComposeConfig, Composer, choose_order
from kernelzero.propose.validate import ValidationConfig, Validator, static_rejections

GEMM_CHAINS = [  # GEMM followed by bias, activation, normalisation and reduction epilogues
    ["linear", "add", "gelu", "layer_norm", "logsumexp"],
    ["matmul", "add", "silu", "batch_norm1d", "amax"],
    ["addmm", "relu", "rms_norm", "mean"],
    ["bmm", "mul", "tanh", "group_norm", "vector_norm"],
]
CONV_CHAINS = [  # convolution followed by normalisation, activation and pooling
    ["conv2d", "batch_norm2d", "relu", "max_pool2d"],
    ["conv3d", "group_norm", "gelu", "avg_pool3d"],
    ["conv_transpose2d", "instance_norm2d", "leaky_relu", "adaptive_avg_pool2d"],
    ["conv1d", "batch_norm1d", "hardswish", "max_pool1d"],
]


@pytest.mark.parametrize("chain", GEMM_CHAINS + CONV_CHAINS, ids=lambda c: "_".join(c))
@pytest.mark.parametrize("target", ["cpu", "h100"])
def test_fusion_chains_are_expressible(chain, target):
    comp = Composer(ComposeConfig(target=target))
    c = comp.compose(chain, random.Random(0), order=chain)
    assert c.order == chain
    assert static_rejections(c.source, chain) == []
    lo, hi = get_target(target).target_ms
    assert lo / 3 <= c.est_ms <= hi * 3


def test_random_sets_compose_and_pass_static_checks():
    dist, comp, rng = load_default(), Composer(ComposeConfig(target="cpu")), random.Random(1)
    ok = failed = 0
    for k in (2, 3) * 100:
        apis = dist.sample(rng, k)
        try:
            c = comp.compose(apis, rng)
        except ComposeError:
            failed += 1
            continue
        assert static_rejections(c.source, apis) == [], c.source
        assert c.peak_bytes <= get_target("cpu").memory_cap_bytes
        ok += 1
    assert failed <= 0.05 * (ok + failed)


def test_deterministic_for_a_seed():
    comp = Composer(ComposeConfig(target="h100"))
    a = comp.compose(["conv2d", "relu", "sum"], random.Random(7))
    b = comp.compose(["conv2d", "relu", "sum"], random.Random(7))
    assert a.source == b.source and a.manifest() == b.manifest()


def test_sizes_follow_the_target_time():
    small = Composer(ComposeConfig(target="h100", target_ms=1.0)).compose(["conv2d", "relu"], random.Random(0))
    big = Composer(ComposeConfig(target="h100", target_ms=4.0)).compose(["conv2d", "relu"], random.Random(0))
    assert big.batch_size > 2 * small.batch_size
    assert abs(math.log(small.est_ms / 1.0)) < math.log(3)


def test_known_degenerate_orders_are_avoided():
    order, _ = choose_order(["softmax", "sum"], random.Random(0))
    assert [s.name for s in order] == ["sum", "softmax"]
    with pytest.raises(ComposeError):
        choose_order(["mse_loss", "argmax"], random.Random(0))


@pytest.fixture(scope="module")
def validator():
    with Evaluator(EvalConfig(device="cpu", max_workers=2)) as ev:
        yield Validator(ev, ValidationConfig(target="cpu"))


@pytest.mark.parametrize("chain", [GEMM_CHAINS[0], CONV_CHAINS[0], ["scaled_dot_product_attention", "div"],
                                   ["cross_entropy", "linear"], ["kl_div", "softplus"]],
                         ids=lambda c: "_".join(c))
def test_composed_modules_pass_validation(validator, chain):
    c = Composer(ComposeConfig(target="cpu")).compose(chain, random.Random(2))
    res = validator.validate(c.source, chain)
    assert res.ok, (res.reasons, c.source)
    assert res.figures["output_shapes"]
