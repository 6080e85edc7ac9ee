"""Shape rules of the operator catalog: each maps an op's input shapes `s` and parameters `p`
to its output shape (`OpSpec.shape` in specs.py), with the convolution size formulas they use.
The parameter keys are those specs.py documents.
"""
from __future__ import annotations


def same(s, p):
    return s[0]


def reduce_dims(s, p):
    dims = p["dims"] if "dims" in p else (p["dim"],)
    x = s[0]
    if p.get("keepdim"):
        return tuple(1 if i in dims else d for i, d in enumerate(x))
    return tuple(d for i, d in enumerate(x) if i not in dims)


def conv_out(n: int, k: int, stride: int, pad: int, dil: int) -> int:
    return (n + 2 * pad - dil * (k - 1) - 1) // stride + 1


def convT_out(n: int, k: int, stride: int, pad: int, dil: int, out_pad: int) -> int:
    return (n - 1) * stride - 2 * pad + dil * (k - 1) + out_pad + 1


def conv_shape(s, p):
    x = s[0]
    sp = [conv_out(n, p["kernel"], p["stride"], p["padding"], p["dilation"]) for n in x[2:]]
    return (x[0], p["c_out"], *sp)


def convT_shape(s, p):
    x = s[0]
    sp = [convT_out(n, p["kernel"], p["stride"], p["padding"], p["dilation"], p["output_padding"])
          for n in x[2:]]
    return (x[0], p["c_out"], *sp)


def pool_shape(s, p):
    x = s[0]
    sp = [conv_out(n, p["kernel"], p["stride"], p["padding"], 1) for n in x[2:]]
    return (x[0], x[1], *sp)


def adaptive_shape(s, p):
    x = s[0]
    return (x[0], x[1], *([p["out"]] * (len(x) - 2)))


def matmul_shape(s, p):
    return (*s[0][:-1], s[1][-1])


def loss_shape(s, p):
    return () if p.get("reduction", "mean") != "none" else s[0]


def cosine_shape(s, p):
    return tuple(d for i, d in enumerate(s[0]) if i != 1)


def sdpa_shape(s, p):
    return (*s[0][:-1], s[2][-1])
