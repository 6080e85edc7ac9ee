"""The operator catalog: PyTorch operator APIs as data, for composing and checking tasks.

Each `OpSpec` says how the API is written in source (`call`, plus the other spellings that mean
the same operator in `aliases`), which input ranks and dtypes it accepts, its shape rule (as text
for people and prompts, and as a function for the composer), the parameter ranges the composer
samples, whether it owns weights, and its cost (FLOPs and bytes) for sizing tasks.

Parameter conventions (the keys the shape and cost functions read from `p`):
    dim / dims: reduced or normalised dimension(s) (non-negative ints); keepdim: bool
    c_out, kernel, stride, padding, dilation, groups, output_padding: convolution / pooling
    out_features / n: output width of a matrix product; out: adaptive pooling output size
    norm_dims: how many trailing dims a LayerNorm/RMSNorm normalises
Not covered here: emitting code (kernelzero/propose/emit.py) or recognising calls in source
(kernelzero/catalog/apimap.py).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from kernelzero.catalog import cost as C
from kernelzero.catalog.shapes import (adaptive_shape, conv_shape, convT_shape, cosine_shape,
                                       loss_shape, matmul_shape, pool_shape, reduce_dims, same,
                                       sdpa_shape)

FLOAT = ("float32", "float16", "bfloat16")
FAMILIES = ("gemm", "conv", "pool", "norm", "activation", "softmax", "reduction", "cumulative",
            "elementwise", "loss", "attention")

Shape = tuple


@dataclass(frozen=True)
class OpSpec:
    """One operator API.

    name: catalog key (`conv2d`); call: the spelling in source (`nn.Conv2d`, `F.gelu`).
    family: one of FAMILIES. ranks: accepted ranks of the first tensor input.
    arity: tensors consumed (the chain's tensor plus operands such as a matmul's right side).
    has_weights: whether the op owns learnable parameters (an `nn` layer with weights).
    params: parameter name -> choices the composer samples from.
    shape_rule: the shape rule in words. shape: (input shapes, params) -> output shape.
    flops_per_elem: FLOPs per output element for elementwise/reduction costs (ignored when
        `cost` is given). cost: (input shapes, output shape, params) -> Cost, when not generic.
    terminal: its output cannot feed another op of a chain (losses, arg-reductions).
    out_dtype: dtype of the output when it is not the input's (`int64` for arg-reductions).
    """

    name: str
    call: str
    family: str
    description: str
    ranks: tuple[int, ...]
    shape_rule: str
    shape: Callable[[list, dict], Shape]
    dtypes: tuple[str, ...] = FLOAT
    arity: int = 1
    has_weights: bool = False
    params: dict = field(default_factory=dict)
    aliases: tuple[str, ...] = ()
    flops_per_elem: float = 1.0
    cost_fn: Callable | None = None
    terminal: bool = False
    out_dtype: str | None = None

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"OpSpec {self.name}: family {self.family!r} not in {FAMILIES}")
        if not self.ranks or self.arity < 1:
            raise ValueError(f"OpSpec {self.name}: needs ranks and arity >= 1")

    def cost(self, in_shapes: list, out_shape: Shape, p: dict, b: int = 4) -> C.Cost:
        if self.cost_fn is not None:
            return self.cost_fn(in_shapes, out_shape, p, b)
        if self.family in ("reduction", "softmax", "norm") or out_shape != in_shapes[0]:
            passes = 2 if self.family in ("softmax", "norm") else 1
            return C.reduction(in_shapes[0], out_shape, b, self.flops_per_elem, passes)
        return C.elementwise(in_shapes[0], out_shape, b, self.flops_per_elem, in_shapes[1:])

    def spellings(self) -> tuple[str, ...]:
        return (self.call,) + self.aliases


# ---------------------------------------------------------------------------------------------
# Costs that are not a plain elementwise pass or reduction

def _conv_cost(transposed):
    def f(s, out, p, b):
        w = (p["c_out"] if not transposed else s[0][1],
             (s[0][1] if not transposed else p["c_out"]) // p["groups"],
             *([p["kernel"]] * (len(s[0]) - 2)))
        return C.conv(s[0], out, w, b, transposed)
    return f


def _linear_cost(s, out, p, b):
    m = C.numel(s[0][:-1])
    return C.gemm(m, out[-1], s[0][-1], 1, b)


def _matmul_cost(s, out, p, b):
    batch = C.numel(out[:-2]) if len(out) > 2 else 1
    return C.gemm(out[-2] if len(out) > 1 else 1, out[-1], s[0][-1], batch, b)


def _pool_cost(s, out, p, b):
    k = p.get("kernel") or max(1, s[0][-1] // max(1, p.get("out", 1)))
    window = k ** (len(s[0]) - 2)
    return C.Cost(C.numel(out) * window, b * (C.numel(s[0]) + C.numel(out)))


def _sdpa_cost(s, out, p, b):
    bh = C.numel(s[0][:-2])
    lq, d, lk = s[0][-2], s[0][-1], s[1][-2]
    flops = 4.0 * bh * lq * lk * d + 5.0 * bh * lq * lk
    return C.Cost(flops, b * (sum(C.numel(x) for x in s) + C.numel(out)))


def _loss_cost(s, out, p, b):
    return C.Cost(3.0 * C.numel(s[0]), b * (C.numel(s[0]) + C.numel(s[1])) + b)


# ---------------------------------------------------------------------------------------------
# The catalog

ANY = (2, 3, 4, 5)
_specs: list[OpSpec] = []


def _add(**kw) -> None:
    _specs.append(OpSpec(**kw))


def _fn_aliases(name: str, module_too: str | None = None, method: bool = True) -> tuple[str, ...]:
    out = [f"torch.{name}", f"F.{name}", f"torch.nn.functional.{name}"]
    if method:
        out.append(f".{name}")
    if module_too:
        out += [f"nn.{module_too}", f"torch.nn.{module_too}"]
    return tuple(out)


# Matrix products --------------------------------------------------------------------------------
_add(name="matmul", call="torch.matmul", family="gemm", arity=2, ranks=(2, 3, 4),
     description="Matrix product with broadcasting over leading dims: x[..., M, K] @ w[K, N].",
     shape_rule="(..., M, K) @ (K, N) -> (..., M, N)", shape=matmul_shape,
     aliases=(".matmul", "@"), params={"n": (64, 128, 256, 512)}, cost_fn=_matmul_cost)
_add(name="mm", call="torch.mm", family="gemm", arity=2, ranks=(2,),
     description="2-D matrix product a[M, K] @ b[K, N].", shape_rule="(M, K) @ (K, N) -> (M, N)",
     shape=matmul_shape, aliases=(".mm",), params={"n": (64, 128, 256, 512)}, cost_fn=_matmul_cost)
_add(name="bmm", call="torch.bmm", family="gemm", arity=2, ranks=(3,),
     description="Batched matrix product a[B, M, K] @ b[B, K, N].",
     shape_rule="(B, M, K) @ (B, K, N) -> (B, M, N)", shape=matmul_shape, aliases=(".bmm",),
     params={"n": (32, 64, 128, 256)}, cost_fn=_matmul_cost)
_add(name="linear", call="nn.Linear", family="gemm", has_weights=True, ranks=(2, 3, 4),
     description="Affine map on the last dim: x @ W.T + b (nn.Linear).",
     shape_rule="(..., in_features) -> (..., out_features)", shape=lambda s, p: (*s[0][:-1], p["n"]),
     aliases=("torch.nn.Linear", "F.linear", "torch.nn.functional.linear"),
     params={"n": (64, 128, 256, 512, 1024)}, cost_fn=_linear_cost)
_add(name="addmm", call="torch.addmm", family="gemm", arity=3, ranks=(2,),
     description="bias + a[M, K] @ b[K, N] in one call (torch.addmm(bias, a, b)).",
     shape_rule="(N,) + (M, K) @ (K, N) -> (M, N)", shape=lambda s, p: (s[0][0], p["n"]),
     aliases=(".addmm",), params={"n": (64, 128, 256, 512)},
     cost_fn=lambda s, out, p, b: C.gemm(s[0][0], out[-1], s[0][-1], 1, b))

# Convolutions -------------------------------------------------------------------------------------
for _d in (1, 2, 3):
    _conv_params = {"c_out": (8, 16, 32, 64), "kernel": (1, 3, 3, 5), "stride": (1, 1, 2),
                    "dilation": (1, 1, 2), "groups": ("1", "1", "grouped", "depthwise"),
                    "padding": ("none", "half")}
    _add(name=f"conv{_d}d", call=f"nn.Conv{_d}d", family="conv", has_weights=True, ranks=(_d + 2,),
         description=f"{_d}-D convolution (standard, grouped, depthwise or dilated) with bias.",
         shape_rule=f"(N, C_in, *S{_d}) -> (N, C_out, *floor((S + 2p - d(k-1) - 1)/s) + 1)",
         shape=conv_shape, params=_conv_params, cost_fn=_conv_cost(False),
         aliases=(f"torch.nn.Conv{_d}d", f"F.conv{_d}d", f"torch.nn.functional.conv{_d}d"))
    _add(name=f"conv_transpose{_d}d", call=f"nn.ConvTranspose{_d}d", family="conv",
         has_weights=True, ranks=(_d + 2,),
         description=f"{_d}-D transposed convolution (upsampling) with bias.",
         shape_rule=f"(N, C_in, *S{_d}) -> (N, C_out, (S-1)s - 2p + d(k-1) + op + 1)",
         shape=convT_shape, cost_fn=_conv_cost(True),
         params={"c_out": (8, 16, 32, 64), "kernel": (2, 3, 4), "stride": (1, 2, 2),
                 "dilation": (1,), "groups": ("1", "1", "grouped"), "padding": ("none", "half")},
         aliases=(f"torch.nn.ConvTranspose{_d}d", f"F.conv_transpose{_d}d",
                  f"torch.nn.functional.conv_transpose{_d}d"))

# Pooling ------------------------------------------------------------------------------------------
for _d in (1, 2, 3):
    for _kind, _Kind in (("max", "Max"), ("avg", "Avg")):
        _add(name=f"{_kind}_pool{_d}d", call=f"nn.{_Kind}Pool{_d}d", family="pool", ranks=(_d + 2,),
             description=f"{_d}-D {_kind} pooling over a sliding window.",
             shape_rule=f"(N, C, *S{_d}) -> (N, C, floor((S + 2p - k)/s) + 1)", shape=pool_shape,
             params={"kernel": (2, 2, 3), "stride": ("kernel", 1, 2), "padding": (0, 0, 1)},
             cost_fn=_pool_cost,
             aliases=(f"torch.nn.{_Kind}Pool{_d}d", f"F.{_kind}_pool{_d}d",
                      f"torch.nn.functional.{_kind}_pool{_d}d"))
for _d in (1, 2, 3):
    _add(name=f"adaptive_avg_pool{_d}d", call=f"nn.AdaptiveAvgPool{_d}d", family="pool",
         ranks=(_d + 2,), description=f"{_d}-D adaptive average pooling to a fixed output size.",
         shape_rule="(N, C, *S) -> (N, C, *out)", shape=adaptive_shape, cost_fn=_pool_cost,
         params={"out": (1, 1, 2, 4)},
         aliases=(f"torch.nn.AdaptiveAvgPool{_d}d", f"F.adaptive_avg_pool{_d}d",
                  f"torch.nn.functional.adaptive_avg_pool{_d}d"))
_add(name="adaptive_max_pool2d", call="nn.AdaptiveMaxPool2d", family="pool", ranks=(4,),
     description="2-D adaptive max pooling to a fixed output size.",
     shape_rule="(N, C, H, W) -> (N, C, out, out)", shape=adaptive_shape, cost_fn=_pool_cost,
     params={"out": (1, 2, 4)},
     aliases=("torch.nn.AdaptiveMaxPool2d", "F.adaptive_max_pool2d",
              "torch.nn.functional.adaptive_max_pool2d"))

# Normalisations -----------------------------------------------------------------------------------
for _d, _ranks in ((1, (2, 3)), (2, (4,)), (3, (5,))):
    _add(name=f"batch_norm{_d}d", call=f"nn.BatchNorm{_d}d", family="norm", has_weights=True,
         ranks=_ranks, description=f"Batch normalisation over channel dim 1 ({_d}-D layout), "
         "batch statistics in training mode.", shape_rule="same shape", shape=same,
         flops_per_elem=5, aliases=(f"torch.nn.BatchNorm{_d}d",))
_add(name="layer_norm", call="nn.LayerNorm", family="norm", has_weights=True, ranks=ANY,
     description="Layer normalisation over the trailing dims with affine weight and bias.",
     shape_rule="same shape", shape=same, flops_per_elem=5, params={"norm_dims": (1, 1, 2)},
     aliases=("torch.nn.LayerNorm", "F.layer_norm", "torch.nn.functional.layer_norm"))
_add(name="group_norm", call="nn.GroupNorm", family="norm", has_weights=True, ranks=(3, 4, 5),
     description="Group normalisation: channels split into groups, each normalised.",
     shape_rule="same shape", shape=same, flops_per_elem=5, params={"groups": (2, 4, 8)},
     aliases=("torch.nn.GroupNorm", "F.group_norm", "torch.nn.functional.group_norm"))
_add(name="instance_norm2d", call="nn.InstanceNorm2d", family="norm", ranks=(4,),
     description="Instance normalisation per sample and channel over H, W.",
     shape_rule="same shape", shape=same, flops_per_elem=5,
     aliases=("torch.nn.InstanceNorm2d", "F.instance_norm", "torch.nn.functional.instance_norm"))
_add(name="rms_norm", call="nn.RMSNorm", family="norm", has_weights=True, ranks=ANY,
     description="RMS normalisation over the trailing dims with a learned scale.",
     shape_rule="same shape", shape=same, flops_per_elem=4, params={"norm_dims": (1,)},
     aliases=("torch.nn.RMSNorm", "F.rms_norm", "torch.nn.functional.rms_norm"))
_add(name="normalize", call="F.normalize", family="norm", ranks=ANY,
     description="Lp normalisation (p=2) along a dim: x / max(||x||, eps).",
     shape_rule="same shape", shape=same, flops_per_elem=3, params={"dim": ("last", 1)},
     aliases=("torch.nn.functional.normalize",))

# Activations --------------------------------------------------------------------------------------
_ACTS = [
    # name, call, module form, description, params, flops/elem
    ("relu", "torch.relu", "ReLU", "max(x, 0)", {}, 1),
    ("leaky_relu", "F.leaky_relu", "LeakyReLU", "x if x > 0 else slope * x",
     {"negative_slope": (0.01, 0.1, 0.2)}, 2),
    ("relu6", "F.relu6", "ReLU6", "min(max(x, 0), 6)", {}, 2),
    ("elu", "F.elu", "ELU", "x if x > 0 else alpha * (exp(x) - 1)", {"alpha": (1.0, 0.5)}, 4),
    ("selu", "torch.selu", "SELU", "scale * elu(x, alpha) with fixed constants", {}, 5),
    ("gelu", "F.gelu", "GELU", "x * Phi(x) (erf form)", {}, 8),
    ("silu", "F.silu", "SiLU", "x * sigmoid(x) (swish)", {}, 4),
    ("mish", "F.mish", "Mish", "x * tanh(softplus(x))", {}, 8),
    ("softplus", "F.softplus", "Softplus", "log(1 + exp(beta x)) / beta", {}, 4),
    ("hardtanh", "F.hardtanh", "Hardtanh", "clamp(x, min_val, max_val)",
     {"min_val": (-1.0, -0.5), "max_val": (1.0, 0.5)}, 2),
    ("hardswish", "F.hardswish", "Hardswish", "x * relu6(x + 3) / 6", {}, 4),
    ("hardsigmoid", "F.hardsigmoid", "Hardsigmoid", "relu6(x + 3) / 6", {}, 3),
    ("sigmoid", "torch.sigmoid", "Sigmoid", "1 / (1 + exp(-x))", {}, 4),
    ("tanh", "torch.tanh", "Tanh", "hyperbolic tangent", {}, 4),
    ("softsign", "F.softsign", "Softsign", "x / (1 + |x|)", {}, 3),
]
for _n, _call, _mod, _desc, _params, _fl in _ACTS:
    _aliases = tuple(a for a in _fn_aliases(_n, _mod) if a != _call)
    _add(name=_n, call=_call, family="activation", ranks=ANY, description=f"Elementwise {_desc}.",
         shape_rule="same shape", shape=same, params=_params, flops_per_elem=_fl, aliases=_aliases)
_add(name="prelu", call="nn.PReLU", family="activation", has_weights=True, ranks=ANY,
     description="Parametric ReLU with one learned slope per channel (dim 1).",
     shape_rule="same shape", shape=same, flops_per_elem=2,
     aliases=("torch.nn.PReLU", "F.prelu", "torch.nn.functional.prelu", "torch.prelu"))

# Softmax family -----------------------------------------------------------------------------------
_add(name="softmax", call="torch.softmax", family="softmax", ranks=ANY,
     description="Softmax along a dim.", shape_rule="same shape", shape=same, flops_per_elem=5,
     params={"dim": ("last", 1)}, aliases=_fn_aliases("softmax", "Softmax")[1:])
_add(name="log_softmax", call="torch.log_softmax", family="softmax", ranks=ANY,
     description="Log-softmax along a dim.", shape_rule="same shape", shape=same, flops_per_elem=5,
     params={"dim": ("last", 1)}, aliases=_fn_aliases("log_softmax", "LogSoftmax")[1:])
_add(name="logsumexp", call="torch.logsumexp", family="softmax", ranks=ANY,
     description="log(sum(exp(x))) along a dim, computed stably.",
     shape_rule="reduced dim removed (or kept with keepdim)", shape=reduce_dims, flops_per_elem=4,
     params={"dim": ("last", 1), "keepdim": (False, True)}, aliases=(".logsumexp",))

# Reductions ---------------------------------------------------------------------------------------
for _n, _desc in (("sum", "Sum"), ("mean", "Mean"), ("amax", "Maximum"), ("amin", "Minimum"),
                  ("var", "Variance (unbiased)"), ("std", "Standard deviation (unbiased)")):
    _add(name=_n, call=f"torch.{_n}", family="reduction", ranks=ANY,
         description=f"{_desc} over one or more dims.",
         shape_rule="reduced dims removed (or kept with keepdim)", shape=reduce_dims,
         flops_per_elem=2 if _n in ("var", "std") else 1,
         params={"dim": ("last", 1, "spatial"), "keepdim": (False, True)}, aliases=(f".{_n}",))
for _n in ("argmax", "argmin"):
    _add(name=_n, call=f"torch.{_n}", family="reduction", ranks=ANY, terminal=True,
         out_dtype="int64", description=f"Index of the {_n[3:]}imum along a dim (int64 output).",
         shape_rule="reduced dim removed", shape=reduce_dims, params={"dim": ("last", 1)},
         aliases=(f".{_n}",))
_add(name="vector_norm", call="torch.linalg.vector_norm", family="reduction", ranks=ANY,
     description="L2 norm over a dim.", shape_rule="reduced dim removed (or kept)",
     shape=reduce_dims, flops_per_elem=2, params={"dim": ("last", 1), "keepdim": (False, True)},
     aliases=("torch.norm", ".norm", "torch.linalg.norm"))

# Cumulative ---------------------------------------------------------------------------------------
for _n, _desc in (("cumsum", "Running sum"), ("cumprod", "Running product")):
    _add(name=_n, call=f"torch.{_n}", family="cumulative", ranks=ANY,
         description=f"{_desc} along a dim.", shape_rule="same shape", shape=same,
         params={"dim": ("last", 1)}, aliases=(f".{_n}",))

# Elementwise arithmetic and clamps --------------------------------------------------------------------
for _n, _sym, _desc in (("add", "+", "Addition"), ("sub", "-", "Subtraction"),
                        ("mul", "*", "Multiplication"), ("div", "/", "Division")):
    _add(name=_n, call=f"torch.{_n}", family="elementwise", ranks=ANY, arity=2,
         description=f"{_desc} with a tensor, a broadcast learned parameter or a scalar.",
         shape_rule="broadcast of the operands", shape=same, aliases=(_sym, f".{_n}"),
         params={"operand": ("param", "param", "input", "scalar")})
_add(name="maximum", call="torch.maximum", family="elementwise", ranks=ANY, arity=2,
     description="Elementwise maximum of two tensors.", shape_rule="broadcast of the operands",
     shape=same, aliases=(".maximum",), params={"operand": ("param", "input")})
_add(name="clamp", call="torch.clamp", family="elementwise", ranks=ANY,
     description="Clamp into [min, max].", shape_rule="same shape", shape=same,
     aliases=(".clamp", "torch.clip", ".clip"), params={"min": (-1.0, -0.5, 0.0), "max": (0.5, 1.0)},
     flops_per_elem=2)
_add(name="abs", call="torch.abs", family="elementwise", ranks=ANY, description="Absolute value.",
     shape_rule="same shape", shape=same, aliases=(".abs",))
_add(name="square", call="torch.square", family="elementwise", ranks=ANY,
     description="x * x.", shape_rule="same shape", shape=same, aliases=(".square",))

# Losses -------------------------------------------------------------------------------------------
for _n, _desc, _mod in (("mse_loss", "Mean squared error", "MSELoss"),
                        ("l1_loss", "Mean absolute error", "L1Loss"),
                        ("smooth_l1_loss", "Smooth L1 (Huber with beta)", "SmoothL1Loss"),
                        ("huber_loss", "Huber loss", "HuberLoss"),
                        ("binary_cross_entropy_with_logits", "BCE on logits", "BCEWithLogitsLoss"),
                        ("kl_div", "KL divergence (input in log-space, target probabilities)",
                         "KLDivLoss")):
    _add(name=_n, call=f"F.{_n}", family="loss", ranks=ANY, arity=2, terminal=True,
         description=f"{_desc} between the chain's tensor and a target input, reduced to a scalar.",
         shape_rule="() (scalar, reduction='mean' or 'batchmean')", shape=loss_shape,
         cost_fn=_loss_cost, aliases=(f"torch.nn.functional.{_n}", f"nn.{_mod}",
                                      f"torch.nn.{_mod}"))
_add(name="cross_entropy", call="F.cross_entropy", family="loss", ranks=(2, 3, 4), arity=2,
     terminal=True, description="Cross entropy of logits (class dim 1) against int64 targets.",
     shape_rule="() scalar", shape=loss_shape, cost_fn=_loss_cost,
     aliases=("torch.nn.functional.cross_entropy", "nn.CrossEntropyLoss",
              "torch.nn.CrossEntropyLoss"))
_add(name="cosine_similarity", call="F.cosine_similarity", family="loss", ranks=(2, 3, 4), arity=2,
     description="Cosine similarity along dim 1 with a second tensor.",
     shape_rule="dim 1 removed", shape=cosine_shape, cost_fn=_loss_cost, terminal=False,
     aliases=("torch.nn.functional.cosine_similarity", "torch.cosine_similarity",
              "nn.CosineSimilarity", "torch.nn.CosineSimilarity"))

# Attention ----------------------------------------------------------------------------------------
_add(name="scaled_dot_product_attention", call="F.scaled_dot_product_attention",
     family="attention", ranks=(4,), arity=3,
     description="softmax(q k^T / sqrt(d)) v over (batch, heads, seq, head_dim), optional causal.",
     shape_rule="q (B, H, L, D), k/v (B, H, S, D) -> (B, H, L, D)", shape=sdpa_shape,
     params={"causal": (False, True)}, cost_fn=_sdpa_cost,
     aliases=("torch.nn.functional.scaled_dot_product_attention",))


SPECS: dict[str, OpSpec] = {s.name: s for s in _specs}
if len(SPECS) != len(_specs):
    raise RuntimeError("duplicate operator names in the catalog")


def get_spec(name: str) -> OpSpec:
    try:
        return SPECS[name]
    except KeyError:
        raise KeyError(f"unknown operator API {name!r}; `kernelzero catalog list` shows them") from None


def describe(spec: OpSpec) -> str:
    """One line for prompts and `catalog list`."""
    return f"{spec.call} [{spec.family}]: {spec.description} Shape: {spec.shape_rule}."


def spec_dict(spec: OpSpec) -> dict:
    """The spec as JSON-ready data (functions left out)."""
    return {"name": spec.name, "call": spec.call, "family": spec.family,
            "description": spec.description, "ranks": list(spec.ranks), "dtypes": list(spec.dtypes),
            "arity": spec.arity, "has_weights": spec.has_weights, "shape_rule": spec.shape_rule,
            "params": {k: list(v) for k, v in spec.params.items()}, "aliases": list(spec.aliases),
            "terminal": spec.terminal, "out_dtype": spec.out_dtype}

