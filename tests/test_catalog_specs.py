"""The operator catalog: coverage, shape rules against PyTorch, cost formulas by hand."""
from __future__ import annotations

import pytest
import torch
import torch.nn as nn

from kernelzero.catalog import cost as C
from kernelzero.catalog.apimap import scan_source
from kernelzero.catalog.specs import FAMILIES, SPECS, get_spec, spec_dict


def test_at_least_sixty_apis_over_every_family():
    assert len(SPECS) >= 60
    assert {s.family for s in SPECS.values()} == set(FAMILIES)


@pytest.mark.parametrize("name", [
    "mm", "bmm", "matmul", "linear", "conv1d", "conv2d", "conv3d", "conv_transpose2d",
    "max_pool2d", "avg_pool2d", "adaptive_avg_pool2d", "batch_norm2d", "layer_norm", "group_norm",
    "instance_norm2d", "rms_norm", "relu", "leaky_relu", "gelu", "silu", "mish", "softplus",
    "hardswish", "hardtanh", "softmax", "log_softmax", "logsumexp", "sum", "mean", "amax",
    "argmax", "argmin", "cumsum", "cumprod", "add", "mul", "clamp", "mse_loss", "cross_entropy",
    "kl_div", "scaled_dot_product_attention"])
def test_issue_listed_apis_present(name):
    spec = get_spec(name)
    assert spec.call and spec.ranks and spec.shape_rule and spec.description
    assert spec_dict(spec)["name"] == name


def test_conv_variants_depthwise_grouped_dilated_are_sampled():
    p = get_spec("conv2d").params
    assert {"grouped", "depthwise"} <= set(p["groups"]) and 2 in p["dilation"]


def test_every_spelling_resolves_to_its_own_spec():
    for spec in SPECS.values():
        for sp in spec.spellings():
            if sp.startswith(".") or sp in "+-*/@":
                continue
            root = sp.split(".")[0]
            src = "import torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n" \
                  f"def f(x):\n    return {sp}(x)\n"
            use = scan_source(src)
            assert use.apis == {spec.name}, (sp, use)
            assert root in ("torch", "nn", "F")


@pytest.mark.parametrize("k,s,p,d,g", [(3, 1, 0, 1, 1), (3, 2, 1, 1, 2), (5, 1, 4, 2, 4), (1, 2, 0, 1, 8)])
def test_conv_shape_rule_matches_pytorch(k, s, p, d, g):
    x = torch.randn(2, 8, 17, 19)
    params = {"c_out": 16, "kernel": k, "stride": s, "padding": p, "dilation": d, "groups": g,
              "output_padding": 0}
    got = nn.Conv2d(8, 16, k, stride=s, padding=p, dilation=d, groups=g)(x).shape
    assert get_spec("conv2d").shape([tuple(x.shape)], params) == tuple(got)
    gotT = nn.ConvTranspose2d(8, 16, k, stride=s, padding=min(p, k - 1), groups=g)(x).shape
    paramsT = dict(params, padding=min(p, k - 1), dilation=1)
    assert get_spec("conv_transpose2d").shape([tuple(x.shape)], paramsT) == tuple(gotT)


def test_pool_and_reduction_shape_rules_match_pytorch():
    x = torch.randn(2, 3, 9, 10)
    p = {"kernel": 3, "stride": 2, "padding": 1}
    assert get_spec("max_pool2d").shape([tuple(x.shape)], p) == tuple(nn.MaxPool2d(3, 2, 1)(x).shape)
    assert get_spec("sum").shape([tuple(x.shape)], {"dims": (2, 3), "keepdim": False}) == (2, 3)
    assert get_spec("amax").shape([tuple(x.shape)], {"dims": (1,), "keepdim": True}) == (2, 1, 9, 10)
    assert get_spec("adaptive_avg_pool2d").shape([tuple(x.shape)], {"out": 4}) == (2, 3, 4, 4)


def test_cost_formulas_by_hand():
    # GEMM 64x32 @ 32x16: 2*64*16*32 FLOPs; fp32 bytes of A, B and C.
    g = get_spec("linear").cost([(64, 32)], (64, 16), {"n": 16})
    assert g.flops == 2 * 64 * 16 * 32 and g.bytes == 4 * (64 * 32 + 32 * 16 + 64 * 16)
    # conv 3x3, 8->16 channels, 10x10 output: 2 * out elems * (8*3*3)
    c = get_spec("conv2d").cost([(1, 8, 12, 12)], (1, 16, 10, 10),
                                {"c_out": 16, "kernel": 3, "groups": 1})
    assert c.flops == 2 * 16 * 100 * 8 * 9
    # elementwise relu on 1000 elements: read + write
    r = get_spec("relu").cost([(10, 100)], (10, 100), {})
    assert r.flops == 1000 and r.bytes == 8000


def test_roofline_estimate():
    t = C.Target("t", peak_flops=1e12, bandwidth=1e11, launch_s=1e-6, target_ms=(1, 2),
                 memory_cap_bytes=1e9, max_numel=10**9)
    ms = C.estimate_ms([C.Cost(1e9, 1e6), C.Cost(1e6, 1e9)], t)
    assert ms == pytest.approx((1e-3 + 1e-6) * 1e3 + (1e-2 + 1e-6) * 1e3)
    with pytest.raises(ValueError):
        C.get_target("tpu")
