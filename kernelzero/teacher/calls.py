"""Every spelling of a PyTorch call the teacher reads, lowered to graph nodes.

`torch.relu(x)`, `F.relu(x)`, `x.relu()`, `x.relu_()`, `self.act(x)` with `self.act = nn.ReLU()`:
a call's name is resolved through the module's imports (or as a tensor method, or a layer set in
`__init__`), its arguments are bound like Python binds them (`SIGNATURES`), and `apply` makes the
nodes. In-place variants rebind every name that held the updated value, and are refused on a
forward input (the evaluator would require ModelNew to update it too). Reductions, norms and
matmuls go on to `reductions.RowLowering`.
"""
from __future__ import annotations

import ast

from kernelzero.teacher.ir import Layout, Leaf, Node, Unsupported, const
from kernelzero.teacher.constants import NotConstant, Static, fold, qualname
from kernelzero.teacher.reader import ACTIVATION_LAYERS, Attr
from kernelzero.teacher.values import (DimSpec, LayerRef, ShapeOf, Transposed, count_dims, given,
                                       layout_of_flags, trailing_dims)

FLOAT32_EPS = "1.1920928955078125e-07"  # torch.finfo(torch.float32).eps: rms_norm's default eps

UNARY = {"relu": "relu", "relu_": "relu", "relu6": "relu6", "sigmoid": "sigmoid",
         "expit": "sigmoid", "tanh": "tanh", "silu": "silu", "mish": "mish", "selu": "selu",
         "hardsigmoid": "hardsigmoid", "hardswish": "hardswish", "softsign": "softsign",
         "abs": "abs", "absolute": "abs", "exp": "exp", "log": "log", "sqrt": "sqrt",
         "rsqrt": "rsqrt", "square": "square", "neg": "neg", "negative": "neg",
         "reciprocal": "reciprocal", "sin": "sin", "cos": "cos"}
SIGNATURES = {
    **{k: ("input", "inplace") for k in UNARY},
    "gelu": ("input", "approximate"),
    "leaky_relu": ("input", "negative_slope", "inplace"),
    "elu": ("input", "alpha", "inplace"),
    "softplus": ("input", "beta", "threshold"),
    "hardtanh": ("input", "min_val", "max_val", "inplace"),
    "clamp": ("input", "min", "max"), "clip": ("input", "min", "max"),
    "clamp_min": ("input", "min"), "clamp_max": ("input", "max"),
    "pow": ("input", "exponent"),
    "add": ("input", "other", "alpha"), "sub": ("input", "other", "alpha"),
    "subtract": ("input", "other", "alpha"),
    "mul": ("input", "other"), "multiply": ("input", "other"),
    "div": ("input", "other", "rounding_mode"), "divide": ("input", "other", "rounding_mode"),
    "true_divide": ("input", "other"),
    "maximum": ("input", "other"), "minimum": ("input", "other"),
    "max": ("input", "dim", "keepdim"), "min": ("input", "dim", "keepdim"),
    "sum": ("input", "dim", "keepdim", "dtype"), "mean": ("input", "dim", "keepdim", "dtype"),
    "amax": ("input", "dim", "keepdim"), "amin": ("input", "dim", "keepdim"),
    "logsumexp": ("input", "dim", "keepdim"),
    "softmax": ("input", "dim", "_stacklevel", "dtype"),
    "log_softmax": ("input", "dim", "_stacklevel", "dtype"),
    "layer_norm": ("input", "normalized_shape", "weight", "bias", "eps"),
    "rms_norm": ("input", "normalized_shape", "weight", "eps"),
    "normalize": ("input", "p", "dim", "eps"),
    "norm": ("input", "p", "dim", "keepdim"),
    "vector_norm": ("input", "ord", "dim", "keepdim"),
    "var": ("input", "dim", "unbiased", "keepdim", "correction"),
    "std": ("input", "dim", "unbiased", "keepdim", "correction"),
    "matmul": ("input", "other"), "mm": ("input", "mat2"),
    "linear": ("input", "weight", "bias"),
    "addmm": ("input", "mat1", "mat2", "beta", "alpha"),
    "contiguous": ("input",), "clone": ("input",), "float": ("input",),
    "t": ("input",), "where": ("condition", "input", "other"),
}
CMP = ("gt", "lt", "ge", "le")
COMPARE = {ast.Gt: "gt", ast.Lt: "lt", ast.GtE: "ge", ast.LtE: "le"}


def base_name(name: str) -> str:
    """`mul_` -> `mul` (an in-place variant), `relu_` -> `relu`."""
    return name[:-1] if name.endswith("_") and name[:-1] in SIGNATURES else name


NAMESPACES = ("torch.", "torch.nn.functional.", "torch.special.", "torch.linalg.")


class CallLowering:
    """The call half of `lower.Lowering` (a mixin: it uses the expression methods there)."""

    def call(self, node: ast.Call):
        info = self.info
        f = node.func
        if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) and f.value.id == "self":
            target = self.expr(f)
            if not isinstance(target, LayerRef):
                raise Unsupported(f"unsupported: calling self.{f.attr}")
            if len(node.args) != 1 or node.keywords:
                raise Unsupported(f"unsupported: calling self.{f.attr} with other than one argument")
            x = self.expr(node.args[0])
            out = self.layer(target.attr, x)
            inplace = target.attr.options.get("inplace")
            if isinstance(inplace, Static) and inplace.value is True:
                self.in_place(x, out)
            return out
        q = qualname(f, info.aliases)
        receiver = None
        if q is not None:
            if q.startswith("math."):
                try:
                    return fold(node, info.source, info.aliases, info.globals)
                except NotConstant:
                    raise Unsupported(f"unsupported: {q} of a tensor") from None
            ns = next((p for p in sorted(NAMESPACES, key=len, reverse=True) if q.startswith(p)), None)
            name = q[len(ns):] if ns else q
            if ns is None or base_name(name) not in SIGNATURES:
                raise Unsupported(f"unsupported: {q}")
        elif isinstance(f, ast.Attribute):
            receiver = self.expr(f.value)
            name = f.attr
            if not isinstance(receiver, Node):
                raise Unsupported(f"unsupported method .{name}()")
            if name == "size":
                if node.keywords or len(node.args) > 1:
                    raise Unsupported("unsupported: size() with keywords")
                return ShapeOf(receiver, self.static(self.expr(node.args[0]), "a size index")
                               if node.args else None)
            if name in ("view", "reshape", "unsqueeze") and receiver.op == "load" and \
                    not receiver.attrs["leaf"].is_input:
                args = [self.static(self.expr(a), "a shape") for a in node.args]
                return self.reshaped(receiver, name, args[0] if len(args) == 1 and name != "unsqueeze" else args)
            if base_name(name) not in SIGNATURES:
                raise Unsupported(f"unsupported: Tensor.{name}")
        elif isinstance(f, ast.Name) and f.id == "abs":
            name = "abs"
        else:
            raise Unsupported(f"unsupported call: {ast.unparse(f)[:40]}")
        base = base_name(name)
        a = self.bind(base, node, receiver)
        out = self.apply(base, a)
        flag = a.get("inplace")
        if base != name or isinstance(flag, Static) and flag.value is True:
            self.in_place(a.get("input"), out)
        return out

    def in_place(self, target, result) -> None:
        """An in-place op: every name bound to the updated value now holds the result. A forward
        input updated in place is refused: the evaluator requires the same update of ModelNew."""
        if isinstance(target, Node) and target.op == "load" and target.attrs["leaf"].is_input:
            raise Unsupported(f"unsupported: an in-place op on the forward input "
                              f"`{target.attrs['leaf'].name}` (the reference updates its input)")
        for k, v in list(self.env.items()):
            if v is target:
                self.env[k] = result

    def reshaped(self, v: Node, how: str, dims) -> Node:
        """A parameter viewed for broadcasting: `self.bias.view(1, -1, 1, 1)`, `.reshape(-1, 1, 1)`,
        `.unsqueeze(-1)` (of a 1-D one). Only where its sizes stay one contiguous block."""
        leaf = v.attrs["leaf"]
        if how == "unsqueeze":
            known = v.attrs.get("dims")
            if known is None or len(dims) != 1 or len(known) != 1:
                raise Unsupported("unsupported: unsqueeze of a parameter that is not 1-D")
            flags = [False]
            d = dims[0] % 2
            flags.insert(d, True)
        else:
            dims = dims if isinstance(dims, (tuple, list)) else (dims,)
            if not all(isinstance(d, int) for d in dims):
                raise Unsupported("unsupported: a view of a parameter with sizes not in the text")
            flags = [d == 1 for d in dims]
        return self._load(Leaf(leaf.name, leaf.expr, layout_of_flags(flags, f"{leaf.expr}.{how}"), False))

    def bind(self, name: str, node: ast.Call, receiver) -> dict:
        params = SIGNATURES[name]
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            raise Unsupported(f"unsupported: *args/**kwargs in {name}()")
        given = ([receiver] if receiver is not None else []) + [self.expr(a) for a in node.args]
        if len(given) > len(params):
            raise Unsupported(f"unsupported: {name}() with {len(given)} arguments")
        out = dict(zip(params, given))
        for k in node.keywords:
            if k.arg not in params:
                raise Unsupported(f"unsupported: {name}({k.arg}=...)")
            out[k.arg] = self.expr(k.value)
        return out

    def apply(self, name: str, a: dict):
        x = a.get("input")
        if name == "float" and isinstance(x, Node) and x.op in CMP:
            return self.ew("to_float", x)
        if name in ("contiguous", "clone", "float"):
            return self.tensor(x, name)
        if name == "where":
            cond = a.get("condition")
            if not (isinstance(cond, Node) and cond.op in CMP):
                raise Unsupported("unsupported: torch.where without a comparison as its condition")
            return self.ew("where", cond, self.tensor(x, "where"), self.tensor(a.get("other"), "where"))
        if name == "t":
            return Transposed(self.tensor(x, name))
        if name in UNARY:
            return self.ew(UNARY[name], self.tensor(x, name))
        if name == "gelu":
            mode = self.static(a.get("approximate", Static("none", "")), "gelu's approximate")
            if mode not in ("none", "tanh"):
                raise Unsupported(f"unsupported: gelu(approximate={mode!r})")
            return self.ew("gelu" if mode == "none" else "gelu_tanh", self.tensor(x, name))
        if name == "leaky_relu":
            return self.ew("leaky_relu", self.tensor(x, name), self._operand(a, "negative_slope", "0.01"))
        if name == "elu":
            return self.ew("elu", self.tensor(x, name), self._operand(a, "alpha", "1.0"))
        if name == "softplus":
            return self.softplus(self.tensor(x, name), a.get("beta"), a.get("threshold"))
        if name == "hardtanh":
            return self.ew("hardtanh", self.tensor(x, name), self._operand(a, "min_val", "-1.0"),
                           self._operand(a, "max_val", "1.0"))
        if name in ("clamp", "clip", "clamp_min", "clamp_max"):
            lo, hi = given(a.get("min")), given(a.get("max"))
            t = self.tensor(x, name)
            if lo is not None and hi is not None:
                return self.ew("clamp", t, self.tensor(lo, name), self.tensor(hi, name))
            if lo is not None:
                return self.ew("clamp_min", t, self.tensor(lo, name))
            if hi is not None:
                return self.ew("clamp_max", t, self.tensor(hi, name))
            raise Unsupported(f"unsupported: {name}() without bounds")
        if name == "pow":
            return self.power(self.tensor(x, name), a.get("exponent"))
        if name in ("add", "sub", "subtract"):
            other = self.tensor(a.get("other"), name)
            if given(a.get("alpha")) is not None:
                other = self.ew("mul", other, self.tensor(a["alpha"], "alpha"))
            return self.ew("add" if name == "add" else "sub", self.tensor(x, name), other)
        if name in ("mul", "multiply"):
            return self.ew("mul", self.tensor(x, name), self.tensor(a.get("other"), name))
        if name in ("div", "divide", "true_divide"):
            if given(a.get("rounding_mode")) is not None:
                raise Unsupported("unsupported: div with a rounding_mode")
            return self.ew("div", self.tensor(x, name), self.tensor(a.get("other"), name))
        if name in ("maximum", "minimum"):
            return self.ew(name, self.tensor(x, name), self.tensor(a.get("other"), name))
        if name in ("max", "min") and isinstance(a.get("dim"), Node):
            return self.ew("maximum" if name == "max" else "minimum", self.tensor(x, name), a["dim"])
        return self.apply_row_or_matmul(name, a, x)

    def _operand(self, a: dict, key: str, default: str) -> Node:
        v = given(a.get(key))
        return const(default) if v is None else self.tensor(v, key)

    def softplus(self, t: Node, beta, threshold) -> Node:
        beta, threshold = given(beta), given(threshold)
        plain = all(v is None or isinstance(v, Static) and v.value == d
                    for v, d in ((beta, 1), (threshold, 20)))
        if plain:
            return self.ew("softplus", t)
        return self.ew("softplus_bt", t, self.tensor(beta if beta is not None else Static(1.0, "1.0"), "beta"),
                       self.tensor(threshold if threshold is not None else Static(20.0, "20.0"), "threshold"))

    # ------------------------------------------------------------------ layers
    def layer(self, attr: Attr, x):
        t = self.tensor(x, f"self.{attr.name}")
        if attr.cls in ACTIVATION_LAYERS:
            op = ACTIVATION_LAYERS[attr.cls][0]
            opt = {k: self._layer_option(attr, k) for k in attr.options}
            if op == "identity":
                return t
            if op in ("softmax", "log_softmax"):
                return self.apply_row_or_matmul(op, {"dim": opt["dim"]}, t)
            if op == "gelu":
                mode = self.static(opt["approximate"], "GELU's approximate")
                return self.ew("gelu" if mode == "none" else "gelu_tanh", t)
            if op == "leaky_relu":
                return self.ew(op, t, self.tensor(opt["negative_slope"], op))
            if op == "elu":
                return self.ew(op, t, self.tensor(opt["alpha"], op))
            if op == "hardtanh":
                return self.ew(op, t, self.tensor(opt["min_val"], op), self.tensor(opt["max_val"], op))
            if op == "softplus":
                return self.softplus(t, opt["beta"], opt["threshold"])
            return self.ew(op, t)
        if attr.cls == "Linear":
            w = self._self_tensor([attr.name, "weight"], Layout("bcast", 0))
            out = self.matmul(t, Transposed(w))
            if self.static(self._layer_option(attr, "bias"), "Linear's bias"):
                out = self.ew("add", out, self._self_tensor([attr.name, "bias"], Layout("bcast", 0)))
            return out
        if attr.cls in ("LayerNorm", "RMSNorm"):
            self.self_used.add(attr.name)
            shape = attr.options["normalized_shape"]
            if isinstance(shape, Static):
                dims = trailing_dims(count_dims(shape.value))
            else:
                dims = DimSpec("trailing", f"len(self.{attr.name}.normalized_shape)")
            affine = self.static(self._layer_option(attr, "elementwise_affine"), "elementwise_affine")
            w = self._self_tensor([attr.name, "weight"], Layout("bcast", 0)) if affine else None
            eps = attr.options["eps"]
            if isinstance(eps, Static) and eps.value is None:
                eps_node = const(FLOAT32_EPS)
            else:
                eps_node = self._scalar("eps", f"self.{attr.name}.eps")
            if attr.cls == "RMSNorm":
                return self.rms_norm(t, dims, w, eps_node)
            has_bias = affine and self.static(self._layer_option(attr, "bias"), "LayerNorm's bias")
            b = self._self_tensor([attr.name, "bias"], Layout("bcast", 0)) if has_bias else None
            return self.layer_norm(t, dims, w, b, eps_node)
        raise Unsupported(f"unsupported: nn.{attr.cls}")

    def _layer_option(self, attr: Attr, key: str):
        v = attr.options[key]
        if isinstance(v, Static):
            return v
        self.self_used.add(attr.name)
        return self._scalar(f"{attr.name}_{key}", f"self.{attr.name}.{key}")
