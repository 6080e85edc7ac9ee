"""The family's ops and the ways people write each of them in PyTorch.

A phrasing is a template over:
- `{v}`: the operand expression, `{m}`: the same as a method receiver (parenthesised if needed);
- `{c0}`, `{c1}`: the op's constants, as the module places them (a literal, `self.scale`, a
  module global, or a constructor argument);
- `{d}`, `{kd}`: a reduction's dim and `, keepdim=True` (or nothing);
- `{p}`: a broadcast parameter (`self.bias`), `{y}`: a second forward input, `{r}`: an earlier
  value (a residual).
Prefixes: `layer:` registers an nn layer in `__init__` (`self.act = nn.ReLU()`) and calls it;
`name:` needs its operand bound to a variable (it is used more than once); `inplace:` updates its
operand in place, so it is never applied to a forward input itself (the reference would change
its input, which a kernel then has to repeat).

Constants are drawn with 2-3 significant digits over a range of magnitudes (`ConstSpec`), so a
model has to copy them rather than recall typical ones.
"""
from __future__ import annotations

import math
import random
from dataclasses import dataclass


@dataclass(frozen=True)
class ConstSpec:
    """A constant of an op: its role (names it: `self.slope`), magnitude range, its sign (`+`,
    `-`, or `any`: negative a third of the time). `above` makes it larger than the op's previous
    constant (clamp's max)."""

    role: str
    lo: float
    hi: float
    sign: str = "+"
    above: bool = False


@dataclass(frozen=True)
class FamilyOp:
    """name: the op's name in metadata. kind: `unary`, `const`, `input`, `param`, `residual`,
    `reduce` (output reduced, keepdim varies), `rowwise` (full-size output over a row), `norm`
    (over the last dim) or `matmul`. bounded: its output stays within a few units (so `exp`
    after it cannot overflow). needs_bounded: only applied to a bounded value."""

    name: str
    kind: str
    phrasings: tuple[str, ...]
    consts: tuple[ConstSpec, ...] = ()
    bounded: bool = False
    needs_bounded: bool = False


def _op(name, kind, *phrasings, consts=(), bounded=False, needs_bounded=False) -> FamilyOp:
    return FamilyOp(name, kind, tuple(phrasings), tuple(consts), bounded, needs_bounded)


ELEMENTWISE = [
    _op("relu", "unary", "torch.relu({v})", "F.relu({v})", "{m}.relu()", "layer:nn.ReLU()",
        "torch.clamp({v}, min=0)", "torch.clamp_min({v}, 0.0)", "name:torch.where({v} > 0, {v}, 0.0)",
        "inplace:F.relu({v}, inplace=True)", "inplace:layer:nn.ReLU(inplace=True)"),
    _op("gelu", "unary", "F.gelu({v})", "torch.nn.functional.gelu({v})", "layer:nn.GELU()",
        "F.gelu({v}, approximate='none')"),
    _op("gelu_tanh", "unary", "F.gelu({v}, approximate='tanh')", "layer:nn.GELU(approximate='tanh')",
        "name:0.5 * {v} * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * ({v} + 0.044715 * torch.pow({v}, 3.0))))"),
    _op("silu", "unary", "F.silu({v})", "layer:nn.SiLU()", "name:{v} * torch.sigmoid({v})"),
    _op("sigmoid", "unary", "torch.sigmoid({v})", "{m}.sigmoid()", "layer:nn.Sigmoid()",
        "F.sigmoid({v})", bounded=True),
    _op("tanh", "unary", "torch.tanh({v})", "{m}.tanh()", "layer:nn.Tanh()", "F.tanh({v})", bounded=True),
    _op("softplus", "unary", "F.softplus({v})", "layer:nn.Softplus()"),
    _op("selu", "unary", "F.selu({v})", "torch.selu({v})", "layer:nn.SELU()"),
    _op("hardsigmoid", "unary", "F.hardsigmoid({v})", "layer:nn.Hardsigmoid()", bounded=True),
    _op("hardswish", "unary", "F.hardswish({v})", "layer:nn.Hardswish()"),
    _op("relu6", "unary", "F.relu6({v})", "layer:nn.ReLU6()", "torch.clamp({v}, 0.0, 6.0)", bounded=True),
    _op("softsign", "unary", "F.softsign({v})", "layer:nn.Softsign()", "name:{v} / (1 + torch.abs({v}))",
        bounded=True),
    _op("mish", "unary", "F.mish({v})", "layer:nn.Mish()", "name:{v} * torch.tanh(F.softplus({v}))"),
    _op("abs", "unary", "torch.abs({v})", "{m}.abs()"),
    _op("exp", "unary", "torch.exp({v})", "{m}.exp()", needs_bounded=True),
    _op("square", "unary", "torch.square({v})", "{m} ** 2", "{m}.pow(2)", "torch.pow({v}, 2)",
        "name:{v} * {v}"),
    _op("sqrt_abs", "unary", "torch.sqrt(torch.abs({v}))", "{m}.abs().sqrt()", "torch.abs({v}).sqrt()"),
    _op("leaky_relu", "const", "F.leaky_relu({v}, {c0})", "F.leaky_relu({v}, negative_slope={c0})",
        "layer:nn.LeakyReLU({c0})", "layer:nn.LeakyReLU(negative_slope={c0})",
        "name:torch.where({v} > 0, {v}, {v} * {c0})",
        consts=[ConstSpec("slope", 0.01, 0.5)]),
    _op("elu", "const", "F.elu({v}, alpha={c0})", "F.elu({v}, {c0})", "layer:nn.ELU(alpha={c0})",
        consts=[ConstSpec("alpha", 0.1, 3.0)]),
    _op("hardtanh", "const", "F.hardtanh({v}, {c0}, {c1})", "F.hardtanh({v}, min_val={c0}, max_val={c1})",
        "layer:nn.Hardtanh({c0}, {c1})",
        consts=[ConstSpec("min_val", 0.1, 3.0, sign="-"), ConstSpec("max_val", 0.1, 3.0)], bounded=True),
    _op("clamp", "const", "torch.clamp({v}, {c0}, {c1})", "torch.clamp({v}, min={c0}, max={c1})",
        "{m}.clamp({c0}, {c1})", "torch.clip({v}, {c0}, {c1})", "{m}.clamp(min={c0}, max={c1})",
        consts=[ConstSpec("lo", 0.05, 2.0, sign="any"), ConstSpec("hi", 0.5, 4.0, above=True)],
        bounded=True),
    _op("softplus_beta", "const", "F.softplus({v}, beta={c0})", "layer:nn.Softplus(beta={c0})",
        consts=[ConstSpec("beta", 0.5, 4.0)]),
    _op("add_const", "const", "{v} + {c0}", "{c0} + {v}", "torch.add({v}, {c0})",
        consts=[ConstSpec("shift", 0.01, 10.0)]),
    _op("sub_const", "const", "{v} - {c0}", "torch.sub({v}, {c0})", consts=[ConstSpec("shift", 0.01, 10.0)]),
    _op("rsub_const", "const", "{c0} - {v}", consts=[ConstSpec("offset", 0.01, 10.0)]),
    _op("mul_const", "const", "{v} * {c0}", "{c0} * {v}", "torch.mul({v}, {c0})", "{m}.mul({c0})",
        consts=[ConstSpec("scale", 0.05, 5.0, sign="any")]),
    _op("div_const", "const", "{v} / {c0}", "torch.div({v}, {c0})", "{m}.div({c0})",
        consts=[ConstSpec("divisor", 0.2, 8.0, sign="any")]),
    _op("add_input", "input", "{v} + {y}", "torch.add({v}, {y})", "{m}.add({y})"),
    _op("sub_input", "input", "{v} - {y}", "torch.sub({v}, {y})"),
    _op("mul_input", "input", "{v} * {y}", "torch.mul({v}, {y})", "{m}.mul({y})"),
    _op("add_bias", "param", "{v} + {p}", "torch.add({v}, {p})", "{p} + {v}"),
    _op("mul_scale", "param", "{v} * {p}", "{m}.mul({p})", "{p} * {v}"),
    _op("add_residual", "residual", "{v} + {r}", "{r} + {v}", "torch.add({v}, {r})"),
]

ROWWISE = [
    _op("sum", "reduce", "torch.sum({v}, dim={d}{kd})", "{m}.sum({d}{kd})", "{m}.sum(dim={d}{kd})"),
    _op("mean", "reduce", "torch.mean({v}, dim={d}{kd})", "{m}.mean({d}{kd})", "{m}.mean(dim={d}{kd})"),
    _op("amax", "reduce", "torch.amax({v}, dim={d}{kd})", "{m}.amax({d}{kd})",
        "torch.max({v}, dim={d}{kd})[0]", "{m}.max(dim={d}{kd}).values"),
    _op("amin", "reduce", "torch.amin({v}, dim={d}{kd})", "{m}.amin(dim={d}{kd})",
        "torch.min({v}, dim={d}{kd})[0]", "{m}.min({d}{kd}).values"),
    _op("logsumexp", "reduce", "torch.logsumexp({v}, dim={d}{kd})", "{m}.logsumexp({d}{kd})"),
    _op("softmax", "rowwise", "torch.softmax({v}, dim={d})", "F.softmax({v}, dim={d})",
        "{m}.softmax({d})", "layer:nn.Softmax(dim={d})", bounded=True),
    _op("log_softmax", "rowwise", "torch.log_softmax({v}, dim={d})", "F.log_softmax({v}, dim={d})",
        "{m}.log_softmax(dim={d})", "layer:nn.LogSoftmax(dim={d})"),
    _op("l2_normalize", "rowwise", "F.normalize({v}, dim={d})", "F.normalize({v}, p=2.0, dim={d})",
        "name:{v} / {v}.norm(dim={d}, keepdim=True)", "name:{v} / torch.norm({v}, dim={d}, keepdim=True)",
        bounded=True),
    _op("center", "rowwise", "name:{v} - {v}.mean(dim={d}, keepdim=True)",
        "name:{v} - torch.mean({v}, {d}, keepdim=True)"),
    _op("sub_max", "rowwise", "name:{v} - {v}.amax(dim={d}, keepdim=True)",
        "name:{v} - torch.max({v}, dim={d}, keepdim=True)[0]"),
    _op("layer_norm", "norm", "layer:nn.LayerNorm({f}{eps})", "flayer_norm", "hand_layer_norm"),
    _op("rms_norm", "norm", "layer:nn.RMSNorm({f}{eps})", "frms_norm", "hand_rms_norm"),
]

MATMUL = [
    _op("linear", "matmul", "layer:nn.Linear", "F.linear", "matmul_t", "matmul", "addmm"),
    _op("matmul", "matmul", "layer:nn.Linear", "F.linear", "matmul_t", "matmul", "mm"),
]

BY_NAME = {op.name: op for op in ELEMENTWISE + ROWWISE + MATMUL}

LAYER_ATTR = {"ReLU": "relu", "GELU": "gelu", "SiLU": "silu", "Sigmoid": "sigmoid", "Tanh": "tanh",
              "Softplus": "softplus", "SELU": "selu", "Hardsigmoid": "hardsigmoid",
              "Hardswish": "hardswish", "ReLU6": "relu6", "Softsign": "softsign", "Mish": "mish",
              "LeakyReLU": "leaky_relu", "ELU": "elu", "Hardtanh": "hardtanh", "Softmax": "softmax",
              "LogSoftmax": "log_softmax", "LayerNorm": "norm", "RMSNorm": "norm", "Linear": "fc"}


def draw_constant(rng: random.Random, spec: ConstSpec, previous: float | None = None) -> tuple[float, str]:
    """A value with 2 or 3 significant digits, log-uniform in the spec's range: (value, text)."""
    lo, hi = spec.lo, spec.hi
    mag = math.exp(rng.uniform(math.log(lo), math.log(hi)))
    digits = rng.choice((2, 2, 3))
    text = f"{mag:.{digits}g}"
    if "e" in text:
        text = repr(float(text))
    if "." not in text and "e" not in text:
        text += ".0"
    value = float(text)
    if spec.sign == "-" or spec.sign == "any" and rng.random() < 0.35:
        value, text = -value, "-" + text
    if spec.above and previous is not None and value <= previous:
        value = previous + float(text.lstrip("-"))
        text = f"{value:.{digits + 1}g}"
        text = text if "." in text or "e" in text else text + ".0"
        value = float(text)
    return value, text
