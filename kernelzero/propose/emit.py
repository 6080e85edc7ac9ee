"""Emitters: the code, output shape and cost of one catalog operator inside a composed module.

One emitter per operator family, each writing its operator into a `Builder` (builder.py):
drawing its parameters, adding the layers, parameters and extra inputs it needs, and the call.
`EMITTERS` maps each family to its emitter.

Not covered: choosing the operator order or the batch size (composer.py), rendering (render.py).
"""
from __future__ import annotations

from kernelzero.catalog import cost as C
from kernelzero.catalog.specs import OpSpec
from kernelzero.propose.builder import Builder, ComposeError


def _need_extent(b: Builder, dims, what: str) -> None:
    """Normalising, softmax or arg-reducing over a dim of size 1 gives a constant: refuse it."""
    dims = dims if isinstance(dims, tuple) else (dims,)
    if C.numel(b.shape[d] for d in dims) < 2:
        raise ComposeError(f"{what} over a dim of size 1 would be constant (shape {b.shape})")


def _dim_choice(b: Builder, choice, rank: int) -> int | tuple:
    if choice == "last":
        return rank - 1
    if choice == "spatial":
        return tuple(range(2, rank)) if rank > 2 else rank - 1
    return min(int(choice), rank - 1)


# ---------------------------------------------------------------------------------------------
# Emitters, one per family

def emit_gemm(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    k = b.shape[-1]
    n = b.draw("n", spec.params["n"])
    x = b.var
    if spec.name == "linear":
        fin = b.const("in_features", k, init=True)
        fout = b.const("out_features", n, init=True)
        lay = b.layer("linear", f"nn.Linear({fin}, {fout})")
        b.weights(k * n + n)
        out = spec.shape([b.shape], {"n": n})
        b.line(f"{lay}({x})", out, spec, p={"n": n})
    elif spec.name == "addmm":
        w = b.parameter("weight", (k, n))
        bias = b.parameter("bias", (n,))
        out = (b.shape[0], n)
        b.line(f"torch.addmm({bias}, {x}, {w})", out, spec, p={"n": n})
    else:
        w_shape = (b.shape[0], k, n) if spec.name == "bmm" else (k, n)
        w = b.new_input("w", w_shape, batched=spec.name == "bmm")
        out = spec.shape([b.shape, w_shape], {"n": n})
        form = b.draw("form", ("call", "call", "op")) if spec.name == "matmul" else "call"
        expr = f"{x} @ {w}" if form == "op" else f"{spec.call}({x}, {w})"
        b.line(expr, out, spec, in_shapes=[b.shape, w_shape], p={"n": n})


def emit_conv(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    c_in, spatial = b.shape[1], b.shape[2:]
    transposed = "transpose" in spec.name
    c_out = b.draw("c_out", spec.params["c_out"])
    k = min(b.draw("kernel", spec.params["kernel"]), min(spatial))
    stride = b.draw("stride", spec.params["stride"])
    dil = b.draw("dilation", spec.params["dilation"])
    mode = b.draw("groups", spec.params["groups"])
    groups = 1
    if mode == "grouped":
        groups = next((g for g in (4, 2) if c_in % g == 0 and c_out % g == 0), 1)
    elif mode == "depthwise" and not transposed:
        groups, c_out = c_in, c_in * b.draw("mult", (1, 2))
    pad = dil * (k - 1) // 2 if b.draw("padding", spec.params["padding"]) == "half" else 0
    p = {"c_out": c_out, "kernel": k, "stride": stride, "padding": pad, "dilation": dil,
         "groups": groups, "output_padding": 0}
    out = spec.shape([b.shape], p)
    if any(d < 1 for d in out[2:]):
        raise ComposeError(f"{spec.name} leaves no output for input {b.shape}")
    cin = b.const("in_channels", c_in, init=True)
    cout = b.const("out_channels", c_out, init=True)
    ks = b.const("kernel_size", k, init=True)
    kw = "".join(f", {name}={v}" for name, v, d in (("stride", stride, 1), ("padding", pad, 0),
                 ("dilation", dil, 1), ("groups", groups, 1)) if v != d)
    lay = b.layer("conv_t" if transposed else "conv", f"{spec.call}({cin}, {cout}, {ks}{kw})")
    b.weights(c_out * (c_in // groups) * k ** len(spatial) + c_out)
    b.line(f"{lay}({b.var})", out, spec, p=p)


def emit_pool(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    spatial = b.shape[2:]
    if spec.name.startswith("adaptive"):
        o = min(b.draw("out", spec.params["out"]), min(spatial))
        lay = b.layer("pool", f"{spec.call}({o})")
        p = {"out": o}
    else:
        k = min(b.draw("kernel", spec.params["kernel"]), min(spatial))
        s = b.draw("stride", spec.params["stride"])
        s = k if s == "kernel" else s
        pad = min(b.draw("padding", spec.params["padding"]), k // 2)
        p = {"kernel": k, "stride": s, "padding": pad}
        kw = f"kernel_size={k}" + (f", stride={s}" if s != k else "") + (f", padding={pad}" if pad else "")
        lay = b.layer("pool", f"{spec.call}({kw})")
    b.line(f"{lay}({b.var})", spec.shape([b.shape], p), spec, p=p)


def emit_norm(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    c = b.shape[1]
    if spec.name.startswith("batch_norm") or spec.name == "instance_norm2d":
        if spec.name == "instance_norm2d" and C.numel(b.shape[2:]) < 2:
            raise ComposeError("instance norm needs more than one spatial element")
        expr = f"{spec.call}({b.const('num_features', c, init=True)})"
        b.weights(4 * c)
    elif spec.name == "group_norm":
        g = b.draw("groups", spec.params["groups"])
        g = g if c % g == 0 else next(d for d in (4, 2, 1) if c % d == 0)
        if (c // g) * C.numel(b.shape[2:]) < 2:
            raise ComposeError("group norm over groups of one element would be constant")
        expr = f"nn.GroupNorm({b.const('num_groups', g, init=True)}, {b.const('num_channels', c, init=True)})"
        b.weights(2 * c)
    elif spec.name in ("layer_norm", "rms_norm"):
        nd = min(b.draw("norm_dims", spec.params["norm_dims"]), len(b.shape) - 1)
        shape = tuple(b.shape[-nd:])
        _need_extent(b, tuple(range(len(b.shape) - nd, len(b.shape))), spec.name)
        arg = b.const("normalized_shape", shape if nd > 1 else shape[0], init=True)
        expr = f"{spec.call}({arg})"
        b.weights(2 * C.numel(shape))
    else:  # F.normalize
        d = _dim_choice(b, b.draw("dim", spec.params["dim"]), len(b.shape))
        _need_extent(b, d, spec.name)
        b.line(f"F.normalize({b.var}, p=2.0, dim={d})", b.shape, spec, p={"dim": d})
        return
    lay = b.layer("norm", expr)
    # Default affine weights (ones/zeros) and running stats (0/1) would let a kernel skip them:
    # draw them at construction, so they depend on the init seed like any other weight.
    if spec.has_weights:
        b.prog.init_lines.append(f"nn.init.normal_({lay}.weight, 1.0, 0.2)")
        if spec.name != "rms_norm":
            b.prog.init_lines.append(f"nn.init.normal_({lay}.bias, 0.0, 0.2)")
    if spec.name.startswith("batch_norm"):
        b.prog.init_lines.append(f"{lay}.running_mean.normal_(0.0, 0.2)")
        b.prog.init_lines.append(f"{lay}.running_var.uniform_(0.5, 1.5)")
    b.line(f"{lay}({b.var})", b.shape, spec)


def emit_activation(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    if spec.name == "prelu":
        lay = b.layer("prelu", f"nn.PReLU({b.const('num_parameters', b.shape[1], init=True)})")
        b.weights(b.shape[1])
        b.line(f"{lay}({b.var})", b.shape, spec)
        return
    kw = "".join(f", {k}={b.draw(k, v)}" for k, v in spec.params.items())
    b.line(f"{spec.call}({b.var}{kw})", b.shape, spec)


def emit_softmax(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    d = _dim_choice(b, b.draw("dim", spec.params["dim"]), len(b.shape))
    _need_extent(b, d, spec.name)
    keep = _keepdim(b, spec, nxt)
    p = {"dim": d, "keepdim": keep}
    kw = f", keepdim={keep}" if spec.name == "logsumexp" and keep else ""
    b.line(f"{spec.call}({b.var}, dim={d}{kw})", spec.shape([b.shape], p), spec, p=p)


def _keepdim(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> bool:
    if "keepdim" not in spec.params:
        return False
    keep = b.draw("keepdim", spec.params["keepdim"])
    if nxt is not None and len(b.shape) - 1 < min(nxt.ranks):
        keep = True  # the next operator needs the rank
    if len(b.shape) <= 2 and nxt is not None:
        keep = True
    return keep


def emit_reduction(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    d = _dim_choice(b, b.draw("dim", spec.params["dim"]), len(b.shape))
    _need_extent(b, d, spec.name)
    keep = _keepdim(b, spec, nxt)
    dims = d if isinstance(d, tuple) else (d,)
    p = {"dims": dims, "keepdim": keep}
    kw = f", keepdim={keep}" if keep else ""
    b.line(f"{spec.call}({b.var}, dim={d}{kw})", spec.shape([b.shape], p), spec, p=p)


def emit_cumulative(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    if spec.name == "cumprod":  # the shortest non-batch dim keeps running products away from 0/inf
        d = min(range(1, len(b.shape)), key=lambda i: b.shape[i])
    else:
        d = _dim_choice(b, b.draw("dim", spec.params["dim"]), len(b.shape))
    b.line(f"{spec.call}({b.var}, dim={d})", b.shape, spec, p={"dim": d})


def emit_elementwise(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    x, shape = b.var, b.shape
    if spec.arity == 1:
        kw = ""
        if spec.name == "clamp":
            lo = b.draw("min", spec.params["min"])
            kw = f", min={lo}, max={b.draw('max', spec.params['max'])}"
        b.line(f"{spec.call}({x}{kw})", shape, spec)
        return
    kind = b.draw("operand", spec.params["operand"])
    other = None
    if kind != "scalar" and b.draw("residual", (False, False, True)):
        other = b.skip_with_shape(shape)
    extra = []
    if other is None and kind == "param":
        pshape = (shape[1],) + (1,) * (len(shape) - 2) if len(shape) > 2 else (shape[-1],)
        other = b.parameter("scale" if spec.name in ("mul", "div") else "bias", pshape,
                            "positive" if spec.name == "div" else "randn")
        extra = [pshape]
    elif other is None and kind == "input":
        maker = "torch.rand({dims}) + 0.5" if spec.name == "div" else "torch.randn({dims})"
        other = b.new_input("y", shape, maker)
        extra = [shape]
    elif other is None:
        other = repr(b.draw("scalar", (0.5, 2.0, 1.5)))
    else:
        extra = [shape]
    sym = {"add": "+", "sub": "-", "mul": "*", "div": "/"}.get(spec.name)
    use_op = sym is not None and b.draw("form", ("op", "op", "call")) == "op"
    expr = f"{x} {sym} {other}" if use_op else f"{spec.call}({x}, {other})"
    b.line(expr, shape, spec, in_shapes=[shape] + extra)


def emit_loss(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    x, shape = b.var, b.shape
    if spec.name == "cross_entropy":
        tshape = (shape[0], *shape[2:])
        b.loss_numel = C.numel(shape)
        t = b.new_input("target", tshape, f"torch.randint(0, {shape[1]}, ({{dims}}))")
        b.line(f"F.cross_entropy({x}, {t})", (), spec, in_shapes=[shape, tshape])
        return
    makers = {"binary_cross_entropy_with_logits": "torch.rand({dims})",
              "kl_div": "torch.randn({dims}).softmax(dim=-1)"}
    if spec.terminal:
        b.loss_numel = C.numel(shape)
    t = b.new_input("target" if spec.terminal else "y", shape, makers.get(spec.name, "torch.randn({dims})"))
    if spec.name == "cosine_similarity":
        b.line(f"F.cosine_similarity({x}, {t}, dim=1)", spec.shape([shape], {}), spec,
               in_shapes=[shape, shape])
        return
    kw = ", reduction='batchmean'" if spec.name == "kl_div" else ""
    b.line(f"{spec.call}({x}, {t}{kw})", (), spec, in_shapes=[shape, shape])


def emit_attention(b: Builder, spec: OpSpec, nxt: OpSpec | None) -> None:
    shape = b.shape
    k = b.new_input("k", shape)
    v = b.new_input("v", shape)
    causal = b.draw("causal", spec.params["causal"])
    kw = ", is_causal=True" if causal else ""
    b.line(f"F.scaled_dot_product_attention({b.var}, {k}, {v}{kw})", shape, spec,
           in_shapes=[shape, shape, shape])


EMITTERS = {"gemm": emit_gemm, "conv": emit_conv, "pool": emit_pool, "norm": emit_norm,
            "activation": emit_activation, "softmax": emit_softmax, "reduction": emit_reduction,
            "cumulative": emit_cumulative, "elementwise": emit_elementwise, "loss": emit_loss,
            "attention": emit_attention}
