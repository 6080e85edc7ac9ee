"""How the shipped default co-occurrence distribution was made: hand-weighted by fusion family.

This is not mined from real modules. The weight of a pair of operators (a, b) is
    FAMILY_WEIGHT[family(a), family(b)] * POPULARITY[a] * POPULARITY[b]
where FAMILY_WEIGHT encodes, by our judgement, how often a producer and an epilogue are fused in
kernel benchmarks (KernelBench Level 2 is mostly GEMM or convolution followed by bias, activation,
normalisation, pooling and reduction epilogues), and POPULARITY says which member of a family is
common (conv2d over conv1d, ReLU/GELU over softsign). Counts are written as if each pair were one
mined module: unigram[a] is the sum of a's pair weights. `python -m kernelzero.catalog.default_dist`
rewrites `default_cooccurrence.json` from these tables.
"""
from __future__ import annotations

from itertools import combinations

from kernelzero.catalog.cooccurrence import DEFAULT_PATH, Distribution
from kernelzero.catalog.specs import SPECS

# Symmetric; pairs not listed weigh 0.5 (rare but possible), same-family pairs as listed.
FAMILY_WEIGHT = {
    ("gemm", "activation"): 10, ("gemm", "elementwise"): 8, ("gemm", "norm"): 5,
    ("gemm", "reduction"): 4, ("gemm", "softmax"): 4, ("gemm", "loss"): 2, ("gemm", "gemm"): 1,
    ("conv", "activation"): 10, ("conv", "norm"): 8, ("conv", "pool"): 7,
    ("conv", "elementwise"): 6, ("conv", "reduction"): 3, ("conv", "softmax"): 2,
    ("conv", "conv"): 0.5, ("conv", "gemm"): 1,
    ("norm", "activation"): 6, ("norm", "elementwise"): 3, ("norm", "pool"): 3,
    ("activation", "elementwise"): 4, ("activation", "pool"): 4, ("activation", "activation"): 2,
    ("activation", "reduction"): 3, ("activation", "softmax"): 2,
    ("pool", "reduction"): 2, ("pool", "elementwise"): 2,
    ("softmax", "reduction"): 2, ("softmax", "elementwise"): 2,
    ("reduction", "elementwise"): 3, ("cumulative", "elementwise"): 3,
    ("cumulative", "activation"): 2, ("cumulative", "reduction"): 1,
    ("loss", "activation"): 2, ("loss", "softmax"): 2, ("loss", "elementwise"): 2,
    ("attention", "elementwise"): 3, ("attention", "norm"): 3, ("attention", "activation"): 2,
    ("attention", "softmax"): 1, ("attention", "gemm"): 2,
    ("elementwise", "elementwise"): 2,
}
DEFAULT_FAMILY_WEIGHT = 0.5

POPULARITY = {
    "conv2d": 3, "conv3d": 2, "conv1d": 1, "conv_transpose2d": 1.5, "conv_transpose3d": 1.5,
    "conv_transpose1d": 0.7, "linear": 3, "matmul": 2, "bmm": 1.2, "mm": 1, "addmm": 0.7,
    "relu": 3, "gelu": 2.5, "silu": 2, "tanh": 1.5, "sigmoid": 1.5, "leaky_relu": 1.5, "mish": 1.2,
    "hardswish": 1.2, "hardtanh": 1, "softplus": 1, "relu6": 0.8, "elu": 0.8, "selu": 0.7,
    "softsign": 0.5, "hardsigmoid": 0.8, "prelu": 0.7,
    "batch_norm2d": 2.5, "batch_norm1d": 1.5, "batch_norm3d": 1.2, "layer_norm": 2.5,
    "group_norm": 2, "instance_norm2d": 1.2, "rms_norm": 1.5, "normalize": 0.8,
    "max_pool2d": 2, "avg_pool2d": 1.5, "max_pool3d": 1.2, "avg_pool3d": 1.2,
    "adaptive_avg_pool2d": 1.5, "max_pool1d": 0.7, "avg_pool1d": 0.7,
    "add": 3, "mul": 3, "sub": 1.5, "div": 1.5, "clamp": 1.5, "maximum": 0.7, "abs": 0.5,
    "square": 0.5, "sum": 2, "mean": 2, "amax": 1.5, "amin": 0.8, "argmax": 0.8, "argmin": 0.5,
    "var": 0.5, "std": 0.5, "vector_norm": 0.7, "softmax": 2, "log_softmax": 1.2, "logsumexp": 1.5,
    "cumsum": 1, "cumprod": 0.5, "scaled_dot_product_attention": 1.5,
}


def family_weight(fa: str, fb: str) -> float:
    return FAMILY_WEIGHT.get((fa, fb), FAMILY_WEIGHT.get((fb, fa), DEFAULT_FAMILY_WEIGHT))


def build() -> Distribution:
    dist = Distribution(source=(
        "hand-weighted by fusion family (kernelzero/catalog/default_dist.py); NOT mined from real "
        "modules: pair weight = family weight x popularity(a) x popularity(b)"))
    for a, b in combinations(sorted(SPECS), 2):
        w = family_weight(SPECS[a].family, SPECS[b].family) * POPULARITY.get(a, 1.0) * POPULARITY.get(b, 1.0)
        w = round(w, 4)
        dist.pairs[f"{a}|{b}"] = w
        dist.unigram[a] = round(dist.unigram.get(a, 0) + w, 4)
        dist.unigram[b] = round(dist.unigram.get(b, 0) + w, 4)
    dist.n_modules = 0  # nothing was mined
    return dist


if __name__ == "__main__":
    print(build().save(DEFAULT_PATH))
