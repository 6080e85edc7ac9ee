"""Reductions, norms and the matmul, lowered to graph nodes.

Norms and softmaxes are expanded into row reductions (`reduce`: sum / max / min over the module's
one set of reduced dims, kept as [rows, 1] columns) and elementwise ops: softmax is a max pass, a
sum pass and the write; layer_norm a mean, a variance of the centred values, then the scale and
shift. So a hand-written `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)` and
`nn.RMSNorm` meet in the same graph. keepdim=False marks the value `squeezed` (it no longer lines
up with the input). A matmul takes a forward input on the left and a parameter or input (possibly
transposed) on the right; what follows it is its epilogue.
"""
from __future__ import annotations

from kernelzero.teacher.ir import FULL, Node, Unsupported, const
from kernelzero.teacher.constants import Static
from kernelzero.teacher.calls import FLOAT32_EPS
from kernelzero.teacher.values import (DimSpec, Pair, ScalarAttr, ShapeOf, Transposed, count_dims, given,
                                       trailing_dims)


class RowLowering:
    """The reduction and matmul half of `lower.Lowering` (a mixin)."""

    def dims_of(self, v, what: str) -> DimSpec:
        """The dims a `dim=` argument names: one dim or the trailing dims (all of them, dim=None,
        is refused: one program would reduce the whole tensor)."""
        if isinstance(v, ScalarAttr) and v.static is None:
            self.self_used.add(v.name)
            return DimSpec("single", f"self.{v.name}")
        value = self.static(v, what) if v is not None else None
        if value is None:
            raise Unsupported("unsupported: a reduction over all elements (no dim): one program "
                              "would do all the work")
        if isinstance(value, (tuple, list)) and len(value) == 1:
            value = value[0]
        if isinstance(value, int) and not isinstance(value, bool):
            return DimSpec("single", str(value), value)
        if isinstance(value, (tuple, list)) and value and all(isinstance(d, int) for d in value):
            neg = sorted(d - self.rank if self.rank and d >= 0 else d for d in value)
            if neg == list(range(-len(neg), 0)):
                return trailing_dims(len(neg))
        raise Unsupported(f"unsupported: {what} {value!r} (one dim, or the trailing dims)")

    def norm_dims(self, v) -> DimSpec:
        """The dims a `normalized_shape` covers: as many trailing dims as it has sizes."""
        if isinstance(v, ShapeOf):  # x.shape[-k:], (x.shape[-1],) or self.weight.shape
            dims = v.node.attrs.get("dims") if v.node.op == "load" else None
            if v.index is None and dims is not None:
                return trailing_dims(len(dims))
            if isinstance(v.index, tuple) and v.index[0] == "from" and v.index[1] < 0:
                return trailing_dims(-v.index[1])
            if v.index == ("tuple", -1):
                return trailing_dims(1)
            raise Unsupported("unsupported: this normalized_shape expression")
        if isinstance(v, ScalarAttr) and v.static is None:
            self.self_used.add(v.name)
            return DimSpec("trailing", f"len(self.{v.name})")
        return trailing_dims(count_dims(self.static(v, "normalized_shape")))

    def reduce(self, kind: str, t: Node, dims: DimSpec, hint: str = "") -> Node:
        if t.level != FULL:
            raise Unsupported("unsupported: a reduction of a reduced value")
        if self.matmuls:
            raise Unsupported("unsupported: a reduction after a matmul")
        if self.dim is None:
            self.dim = dims
        elif self.dim.key(self.rank) != dims.key(self.rank):
            raise Unsupported("unsupported: reductions over different dims in one module")
        return Node("reduce", (t,), attrs={"kind": kind}, hint=hint)

    def squeeze(self, n: Node, keepdim) -> Node:
        if self.static(keepdim, "keepdim") if keepdim is not None else False:
            return n
        s = Node("squeeze", (n,), hint=n.hint)
        s.attrs["squeezed"] = True
        n.hint = ""
        return s

    def mean(self, t: Node, dims: DimSpec, hint: str = "mean") -> Node:
        return self.ew("div", self.reduce("sum", t, dims, "row_sum"), Node("rowlen"), hint=hint)

    def layer_norm(self, t, dims, w, b, eps) -> Node:
        mean = self.mean(t, dims)
        xc = self.ew("sub", t, mean, hint="xc")
        var = self.ew("div", self.reduce("sum", self.ew("mul", xc, xc), dims, "row_sq"), Node("rowlen"),
                      hint="var")
        y = self.ew("mul", xc, self.ew("rsqrt", self.ew("add", var, eps), hint="rstd"))
        if w is not None:
            y = self.ew("mul", y, w)
        if b is not None:
            y = self.ew("add", y, b)
        return y

    def rms_norm(self, t, dims, w, eps) -> Node:
        ms = self.mean(self.ew("mul", t, t), dims, hint="ms")
        y = self.ew("mul", t, self.ew("rsqrt", self.ew("add", ms, eps), hint="rstd"))
        return self.ew("mul", y, w) if w is not None else y

    def apply_row_or_matmul(self, name: str, a: dict, x):
        """The IR node of a row op or a matmul named `name` (arguments `a`, input `x`). One helper
        per op family, all reached from here, so every spelling of a reduction lowers the same
        way."""
        if name in ("matmul", "mm", "linear", "addmm"):
            return self.apply_matmul(name, a, x)
        t = self.tensor(x, name)
        if name in ("softmax", "log_softmax"):
            return self.apply_softmax(name, a, t)
        if name in ("layer_norm", "rms_norm", "normalize"):
            return self.apply_norm(name, a, t)
        return self.apply_reduction(name, a, t)

    def apply_matmul(self, name: str, a: dict, x) -> Node:
        """matmul / mm, linear (a transposed weight and an optional bias) and addmm (beta and
        alpha 1 only)."""
        if name in ("matmul", "mm"):
            return self.matmul(x, a.get("other", a.get("mat2")))
        if name == "linear":
            out = self.matmul(x, Transposed(self.tensor(a.get("weight"), "linear's weight")))
            b = given(a.get("bias"))
            return out if b is None else self.ew("add", out, self.tensor(b, "linear's bias"))
        if any(given(a.get(k)) is not None and self.static(a[k], k) != 1 for k in ("beta", "alpha")):
            raise Unsupported("unsupported: addmm with beta or alpha other than 1")
        out = self.matmul(a.get("mat1"), a.get("mat2"))
        return self.ew("add", self.tensor(x, "addmm's input"), out)

    def apply_softmax(self, name: str, a: dict, t: Node) -> Node:
        """softmax (a max pass, a sum pass, the write) or log_softmax, over a given dim."""
        if given(a.get("dtype")) is not None:
            raise Unsupported(f"unsupported: {name} with a dtype")
        if given(a.get("dim")) is None:
            raise Unsupported(f"unsupported: {name} without a dim")
        dims = self.dims_of(a["dim"], f"{name}'s dim")
        m = self.reduce("max", t, dims, "row_max")
        if name == "softmax":
            e = self.ew("exp", self.ew("sub", t, m))
            return self.ew("div", e, self.reduce("sum", e, dims, "row_sum"))
        z = self.ew("sub", t, m)
        s = self.reduce("sum", self.ew("exp", z), dims, "row_sum")
        return self.ew("sub", z, self.ew("log", s))

    def apply_norm(self, name: str, a: dict, t: Node) -> Node:
        """layer_norm and rms_norm (over the trailing dims `normalized_shape` covers, with the
        torch default eps when none is given) and F.normalize."""
        if name in ("layer_norm", "rms_norm"):
            dims = self.norm_dims(a.get("normalized_shape"))
            w = given(a.get("weight"))
            w = None if w is None else self.tensor(w, "the weight")
            eps = given(a.get("eps"))
            if name == "rms_norm":
                return self.rms_norm(t, dims, w, const(FLOAT32_EPS) if eps is None else self.tensor(eps, "eps"))
            b = given(a.get("bias"))
            return self.layer_norm(t, dims, w, None if b is None else self.tensor(b, "the bias"),
                                   const("1e-05") if eps is None else self.tensor(eps, "eps"))
        p = self.static(a.get("p", Static(2.0, "")), "normalize's p")
        dims = self.dims_of(a.get("dim", Static(1, "1")), "normalize's dim")
        eps = given(a.get("eps"))
        nrm = self.norm_of(t, p, dims)
        return self.ew("div", t, self.ew("clamp_min", nrm, const("1e-12") if eps is None else self.tensor(eps, "eps")))

    def apply_reduction(self, name: str, a: dict, t: Node):
        """sum, mean, amax / amin, max / min (a Pair with a dim), logsumexp, norms, var and std,
        squeezed unless keepdim; any other name is unsupported."""
        keepdim = given(a.get("keepdim"))
        if given(a.get("dtype")) is not None:
            raise Unsupported(f"unsupported: {name} with a dtype")
        dims = self.dims_of(given(a.get("dim")), f"{name}'s dim")
        if name in ("sum", "mean", "amax", "amin", "max", "min"):
            kind = {"sum": "sum", "mean": "sum", "amax": "max", "max": "max"}.get(name, "min")
            if name == "mean":
                out = self.mean(t, dims)
            else:
                out = self.reduce(kind, t, dims, f"row_{kind}")
            out = self.squeeze(out, keepdim)
            has_dim = given(a.get("dim")) is not None
            return Pair(out) if name in ("max", "min") and has_dim else out
        if name == "logsumexp":
            m = self.reduce("max", t, dims, "row_max")
            s = self.reduce("sum", self.ew("exp", self.ew("sub", t, m)), dims, "row_sum")
            return self.squeeze(self.ew("add", m, self.ew("log", s)), keepdim)
        if name in ("norm", "vector_norm"):
            p = self.static(a.get("p", a.get("ord", Static(2, ""))), f"{name}'s p")
            return self.squeeze(self.norm_of(t, p, dims), keepdim)
        if name in ("var", "std"):
            unbiased = given(a.get("unbiased"))
            corr = given(a.get("correction"))
            c = 1 if unbiased is None and corr is None else (
                self.static(corr, "correction") if corr is not None else int(bool(self.static(unbiased, "unbiased"))))
            mean = self.mean(t, dims)
            xc = self.ew("sub", t, mean, hint="xc")
            n = Node("rowlen") if c == 0 else self.ew("sub", Node("rowlen"), const(str(c)))
            v = self.ew("div", self.reduce("sum", self.ew("mul", xc, xc), dims, "row_sq"), n, hint="var")
            return self.squeeze(v if name == "var" else self.ew("sqrt", v), keepdim)
        raise Unsupported(f"unsupported: {name}")

    def norm_of(self, t: Node, p, dims: DimSpec) -> Node:
        if p in (2, 2.0, "fro"):
            return self.ew("sqrt", self.reduce("sum", self.ew("mul", t, t), dims, "row_sq"), hint="norm")
        if p in (1, 1.0):
            return self.reduce("sum", self.ew("abs", t), dims, "norm")
        if p == float("inf"):
            return self.reduce("max", self.ew("abs", t), dims, "norm")
        raise Unsupported(f"unsupported: a p={p!r} norm")

    def matmul(self, a, b) -> Node:
        if self.matmuls:
            raise Unsupported("unsupported: more than one matmul")
        if self.dim is not None:
            raise Unsupported("unsupported: a matmul after a reduction")
        trans = isinstance(b, Transposed)
        b = b.node if trans else b
        if not (isinstance(a, Node) and a.op == "load" and a.attrs["leaf"].is_input):
            raise Unsupported("unsupported: a matmul whose left operand is not a forward input")
        if not (isinstance(b, Node) and b.op == "load"):
            raise Unsupported("unsupported: a matmul whose right operand is computed")
        leaf = b.attrs["leaf"]
        dims = self.info.inputs[leaf.name].dims if leaf.is_input else b.attrs.get("dims")
        if dims is not None and len(dims) != 2:
            raise Unsupported(f"unsupported: a matmul with a {len(dims)}-D right operand (only 2-D)")
        node = Node("matmul", (a, b), attrs={"trans": trans}, hint="acc")
        self.matmuls.append(node)
        return node
