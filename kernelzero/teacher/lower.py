"""Lower a module's `forward` into the teacher's graph (kernelzero.teacher.ir), phrasing by phrasing.

`torch.relu(x)`, `F.relu(x)`, `x.relu()`, `self.act(x)` with `self.act = nn.ReLU()` and
`torch.clamp(x, min=0)`-style spellings all lower to the same nodes. Norms and softmaxes are
expanded into row reductions and elementwise ops (softmax = max pass, sum pass, write), so a
hand-written `x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)` and `nn.RMSNorm` meet in
the same form. Values that only steer the computation (a reduction's dim, keepdim, gelu's
approximate) must be known from the text, except a reduction dim stored in `self` (read by the
wrapper at run time). Anything else raises Unsupported with a one-line reason.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelzero.teacher.ir import FULL, ROW, UNIFORM, Layout, Leaf, Node, Unsupported, arg, const, ew
from kernelzero.teacher.reader import (ACTIVATION_LAYERS, Attr, ModuleInfo, NotConstant, Static,
                                       fold, layout_of, qualname)

FLOAT32_EPS = "1.1920928955078125e-07"  # torch.finfo(torch.float32).eps: rms_norm's default eps


@dataclass
class DimSpec:
    """The reduced dims, as the wrapper computes them: `single` (dim `expr`, e.g. `-1` or
    `self.dim`; `static` when known) or `trailing` (the last k dims; `expr` is k, such as `2` or
    `len(self.ln.normalized_shape)`)."""

    kind: str
    expr: str
    static: int | None = None

    def key(self, rank: int | None):
        if self.kind == "single" and self.static is not None and rank:
            return ("single", self.static % rank)
        return (self.kind, self.expr)


@dataclass
class ScalarAttr:
    name: str
    static: Static | None


@dataclass
class LayerRef:
    attr: Attr


@dataclass
class Pair:
    """(values, indices) from torch.max / torch.min with a dim: only the values are supported."""

    values: Node


@dataclass
class Transposed:
    node: Node


@dataclass
class ShapeOf:
    node: Node
    index: object = None  # an int, a slice (start, None), or None for the whole shape


# Function and method names -> parameter names (positional order). A tensor method passes its
# receiver as the first.
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
_COMPARE = {ast.Gt: "gt", ast.Lt: "lt", ast.GtE: "ge", ast.LtE: "le"}


def _base_name(name: str) -> str:
    """`mul_` -> `mul` (an in-place variant), `relu_` -> `relu`."""
    return name[:-1] if name.endswith("_") and name[:-1] in SIGNATURES else name


def _layout_of_flags(flags: list[bool], what: str) -> Layout:
    """Layout of a shape given as "is this dim 1" flags."""
    if all(flags):
        return Layout("one")
    trailing = 0
    while flags and flags[-1]:
        flags = flags[:-1]
        trailing += 1
    while flags and flags[0]:
        flags = flags[1:]
    if any(flags):
        raise Unsupported(f"unsupported: {what} broadcasts over an inner dim of size 1")
    return Layout("bcast", trailing)
NAMESPACES = ("torch.", "torch.nn.functional.", "torch.special.", "torch.linalg.")


class Lowering:
    def __init__(self, info: ModuleInfo):
        self.info = info
        self.env: dict[str, object] = {}
        self.loads: dict[tuple, Node] = {}
        self.scalars: dict[str, Node] = {}
        self.dim: DimSpec | None = None
        self.matmuls: list[Node] = []
        self.self_used: set[str] = set()   # self attributes the generated code reads
        hints = info.inputs
        ranks = [len(h.dims) for h in hints.values() if h.dims is not None and not h.scalar]
        self.rank = max(ranks) if ranks else None
        tensors = [(n, h) for n, h in hints.items() if not h.scalar]
        # The output's shape comes from the first input of the highest rank get_inputs shows.
        primary = next((n for n, h in tensors if h.dims is None or len(h.dims) == self.rank), None)
        for name, h in hints.items():
            if h.scalar:
                self.env[name] = self._scalar(name, name)
                continue
            if name == primary:
                layout = Layout()
            elif h.dims is None:  # unknown shape: `offs % numel` reads a full or a trailing-broadcast one
                layout = Layout("bcast", 0)
            elif ast.dump(ast.Tuple(h.dims)) == ast.dump(ast.Tuple(hints[primary].dims or [])) or \
                    len(h.dims) == self.rank and not self._has_ones(h.dims):
                layout = Layout()
            else:
                layout = layout_of(h.dims, info.aliases, info.globals, info.source, f"input {name}")
            self.env[name] = self._load(Leaf(name, name, layout, is_input=True))

    def _has_ones(self, dims) -> bool:
        for d in dims:
            try:
                if fold(d, self.info.source, self.info.aliases, self.info.globals).value == 1:
                    return True
            except NotConstant:
                pass
        return False

    # ------------------------------------------------------------------ leaves
    def _load(self, leaf: Leaf) -> Node:
        key = (leaf.expr, leaf.layout)
        if key not in self.loads:
            self.loads[key] = Node("load", attrs={"leaf": leaf}, hint=leaf.name)
        return self.loads[key]

    def _scalar(self, name: str, expr: str) -> Node:
        if expr not in self.scalars:
            self.scalars[expr] = arg(name, expr)
        return self.scalars[expr]

    def _self_tensor(self, path: list[str], layout: Layout, dims: list | None = None) -> Node:
        self.self_used.add(path[0])
        node = self._load(Leaf("_".join(path), "self." + ".".join(path), layout))
        if dims is not None:
            node.attrs["dims"] = dims
        return node

    # ------------------------------------------------------------------ statements
    def run(self) -> Node:
        fwd = self.info.forward
        for stmt in fwd.body:
            if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
                continue
            if isinstance(stmt, ast.Return):
                if stmt.value is None:
                    raise Unsupported("forward returns nothing")
                out = self.tensor(self.expr(stmt.value), "the output")
                if out.op in CMP:
                    raise Unsupported("unsupported: a boolean output")
                if out.op == "load" or out.level == UNIFORM:
                    raise Unsupported("unsupported: the output is not computed from the tensor inputs")
                return out
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                if len(targets) != 1 or not isinstance(targets[0], ast.Name) or stmt.value is None:
                    raise Unsupported(f"unsupported assignment in forward: {_line(stmt)}")
                self._bind(targets[0].id, self.expr(stmt.value))
            elif isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
                    isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr.endswith("_"):
                self.expr(stmt.value)  # x.mul_(2): rebinds x
            elif isinstance(stmt, ast.AugAssign) and isinstance(stmt.target, ast.Name):
                left = self.env.get(stmt.target.id)
                if left is None:
                    raise Unsupported(f"unknown name {stmt.target.id} in forward")
                self._bind(stmt.target.id, self.binop(stmt.op, left, self.expr(stmt.value)))
            else:
                raise Unsupported(f"unsupported statement in forward: {_line(stmt)}")
        raise Unsupported("forward has no return statement")

    def _bind(self, name: str, value) -> None:
        if isinstance(value, Node) and not value.hint and value.op not in ("load", "const", "arg"):
            value.hint = name
        self.env[name] = value

    # ------------------------------------------------------------------ expressions
    def expr(self, node: ast.AST):
        info = self.info
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (int, float, str, bool, type(None))):
                return fold(node, info.source, info.aliases, info.globals)
            raise Unsupported(f"unsupported constant {node.value!r}")
        if isinstance(node, ast.Name):
            if node.id in self.env:
                return self.env[node.id]
            if node.id in info.globals:
                return info.globals[node.id]
            raise Unsupported(f"unsupported: name {node.id} in forward")
        if isinstance(node, ast.UnaryOp):
            v = self.expr(node.operand)
            if isinstance(node.op, ast.UAdd):
                return v
            if isinstance(node.op, ast.USub):
                if isinstance(v, Static):
                    return fold(node, info.source, info.aliases, info.globals) \
                        if _static_num(v) else _bad(f"-{v.text}")
                return self.ew("neg", self.tensor(v, "-x"))
            raise Unsupported(f"unsupported operator {type(node.op).__name__} in forward")
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
            return self.ew(_COMPARE[type(node.ops[0])], self.tensor(self.expr(node.left), "a comparison"),
                           self.tensor(self.expr(node.comparators[0]), "a comparison"))
        if isinstance(node, ast.Attribute):
            return self.attribute(node)
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            return self.call(node)
        if isinstance(node, (ast.Tuple, ast.List)):
            items = [self.expr(e) for e in node.elts]
            if all(isinstance(i, Static) for i in items):
                return Static(tuple(i.value for i in items), ast.unparse(node))
            if len(items) == 1 and isinstance(items[0], ShapeOf):
                return ShapeOf(items[0].node, ("tuple", items[0].index))
            raise Unsupported("unsupported: a tuple of tensors in forward")
        raise Unsupported(f"unsupported expression in forward: {ast.unparse(node)[:50]}")

    def attribute(self, node: ast.Attribute):
        info = self.info
        q = qualname(node, info.aliases)
        if q is not None:
            try:
                return fold(node, info.source, info.aliases, info.globals)
            except NotConstant:
                raise Unsupported(f"unsupported: {q}") from None
        chain = []
        base = node
        while isinstance(base, ast.Attribute):
            chain.append(base.attr)
            base = base.value
        chain.reverse()
        if isinstance(base, ast.Name) and base.id == "self":
            return self.self_attr(chain)
        owner = self.expr(node.value)
        if isinstance(owner, Node) and node.attr == "T":
            return Transposed(owner)
        if isinstance(owner, Node) and node.attr == "shape":
            return ShapeOf(owner)
        if isinstance(owner, Pair) and node.attr == "values":
            return owner.values
        if isinstance(owner, Pair) and node.attr == "indices":
            raise Unsupported("unsupported: argmax/argmin (the indices of torch.max/min)")
        raise Unsupported(f"unsupported attribute .{node.attr} in forward")

    def self_attr(self, chain: list[str]):
        info = self.info
        a = info.attrs.get(chain[0])
        if a is None:
            raise Unsupported(f"unsupported: self.{chain[0]} is not set in __init__")
        if a.kind in ("param", "buffer"):
            return _tensor_attr(self._self_tensor([chain[0]], a.layout, a.shape_dims), chain, 1)
        if a.kind == "scalar":
            if len(chain) > 1:
                raise Unsupported(f"unsupported: self.{'.'.join(chain)}")
            return ScalarAttr(chain[0], a.static)
        if len(chain) == 1:
            return LayerRef(a)
        if a.cls in ("Linear", "LayerNorm", "RMSNorm") and chain[1] in ("weight", "bias"):
            if chain[1] == "bias" and a.options.get("bias", Static(True, "")).value is False:
                raise Unsupported(f"unsupported: self.{chain[0]}.bias is None")
            return _tensor_attr(self._self_tensor(chain[:2], Layout("bcast", 0)), chain, 2)
        raise Unsupported(f"unsupported: self.{'.'.join(chain)}")

    def subscript(self, node: ast.Subscript):
        v = self.expr(node.value)
        if isinstance(v, Pair):
            idx = self.static(self.expr(node.slice), "an index")
            if idx == 0:
                return v.values
            raise Unsupported("unsupported: argmax/argmin (the indices of torch.max/min)")
        if isinstance(v, Node) and v.op == "load" and not v.attrs["leaf"].is_input:
            items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
            flags = []
            for it in items:
                if isinstance(it, ast.Constant) and it.value is None:
                    flags.append(True)
                elif isinstance(it, ast.Slice) and it.lower is it.upper is it.step is None:
                    flags.append(False)
                else:
                    raise Unsupported(f"unsupported indexing in forward: {ast.unparse(node)[:50]}")
            leaf = v.attrs["leaf"]
            return self._load(Leaf(leaf.name, leaf.expr, _layout_of_flags(flags, leaf.expr), False))
        if isinstance(v, ShapeOf) and v.index is None:
            s = node.slice
            if isinstance(s, ast.Slice) and s.upper is None and s.step is None and s.lower is not None:
                return ShapeOf(v.node, ("from", self.static(self.expr(s.lower), "a shape slice")))
            return ShapeOf(v.node, self.static(self.expr(s), "a shape index"))
        raise Unsupported(f"unsupported indexing in forward: {ast.unparse(node)[:50]}")

    # ------------------------------------------------------------------ conversions
    def tensor(self, v, what: str) -> Node:
        """`v` as a graph node (constants and scalar attributes become scalar operands)."""
        if isinstance(v, Node):
            return v
        if isinstance(v, Static):
            if not _static_num(v):
                raise Unsupported(f"unsupported: {v.text} as an operand")
            return const(v.text)
        if isinstance(v, ScalarAttr):
            self.self_used.add(v.name)
            return self._scalar(v.name, f"self.{v.name}")
        if isinstance(v, ShapeOf) and isinstance(v.index, int):
            return self._rowlen_of(v)
        if isinstance(v, Transposed):
            raise Unsupported(f"unsupported: a transposed tensor in {what}")
        raise Unsupported(f"unsupported value in {what}")

    def static(self, v, what: str):
        if isinstance(v, Static):
            return v.value
        if isinstance(v, ScalarAttr) and v.static is not None:
            return v.static.value
        raise Unsupported(f"unsupported: {what} must be a constant")

    def _rowlen_of(self, v: ShapeOf) -> Node:
        """`x.shape[d]` as a value: the row length N, when d is the dim already reduced over."""
        d = self.dim
        same = d is not None and d.kind == "single" and d.static is not None and (
            d.static == v.index or self.rank is not None and d.static % self.rank == v.index % self.rank)
        if not same:
            raise Unsupported("unsupported: a tensor size used as a value (only the reduced dim's "
                              "size, after the reduction)")
        return Node("rowlen")

    # ------------------------------------------------------------------ operators
    def binop(self, op, left, right, node=None):
        if isinstance(left, Static) and isinstance(right, Static) and node is not None:
            try:
                return fold(node, self.info.source, self.info.aliases, self.info.globals)
            except NotConstant:
                raise Unsupported(f"unsupported: {ast.unparse(node)[:40]}") from None
        if isinstance(op, ast.MatMult):
            return self.matmul(left, right)
        if isinstance(op, ast.Pow):
            return self.power(self.tensor(left, "**"), right)
        names = {ast.Add: "add", ast.Sub: "sub", ast.Mult: "mul", ast.Div: "div"}
        if type(op) not in names:
            raise Unsupported(f"unsupported operator {type(op).__name__} in forward")
        return self.ew(names[type(op)], self.tensor(left, "an operator"), self.tensor(right, "an operator"))

    def ew(self, op: str, *args: Node, hint: str = "") -> Node:
        if op not in ("where", "to_float"):  # torch promotes a bool operand to float
            args = tuple(ew("to_float", a) if a.op in CMP else a for a in args)
        if any(squeezed(a) for a in args) and \
                any(a.level == FULL or (a.level == ROW and not squeezed(a)) for a in args):
            raise Unsupported("unsupported: a reduction without keepdim=True combined with a "
                              "tensor of another shape")
        return ew(op, *args, hint=hint)

    def power(self, base: Node, exponent) -> Node:
        if isinstance(exponent, Node):
            raise Unsupported("unsupported: a tensor exponent")
        p = self.static(exponent, "the exponent") if not isinstance(exponent, ScalarAttr) else None
        forms = {1: None, 2: "square", 3: "cube", 0.5: "sqrt", -1: "reciprocal", -0.5: "rsqrt"}
        if isinstance(p, (int, float)) and not isinstance(p, bool) and p in forms:
            return base if forms[p] is None else self.ew(forms[p], base)
        if p == 4:
            return self.ew("square", self.ew("square", base))
        return self.ew("pow", base, self.tensor(exponent, "an exponent"))

    # ------------------------------------------------------------------ calls
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
            if ns is None or _base_name(name) not in SIGNATURES:
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
            if _base_name(name) not in SIGNATURES:
                raise Unsupported(f"unsupported: Tensor.{name}")
        elif isinstance(f, ast.Name) and f.id == "abs":
            name = "abs"
        else:
            raise Unsupported(f"unsupported call: {ast.unparse(f)[:40]}")
        base = _base_name(name)
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
        return self._load(Leaf(leaf.name, leaf.expr, _layout_of_flags(flags, f"{leaf.expr}.{how}"), False))

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
            lo, hi = _given(a.get("min")), _given(a.get("max"))
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
            if _given(a.get("alpha")) is not None:
                other = self.ew("mul", other, self.tensor(a["alpha"], "alpha"))
            return self.ew("add" if name == "add" else "sub", self.tensor(x, name), other)
        if name in ("mul", "multiply"):
            return self.ew("mul", self.tensor(x, name), self.tensor(a.get("other"), name))
        if name in ("div", "divide", "true_divide"):
            if _given(a.get("rounding_mode")) is not None:
                raise Unsupported("unsupported: div with a rounding_mode")
            return self.ew("div", self.tensor(x, name), self.tensor(a.get("other"), name))
        if name in ("maximum", "minimum"):
            return self.ew(name, self.tensor(x, name), self.tensor(a.get("other"), name))
        if name in ("max", "min") and isinstance(a.get("dim"), Node):
            return self.ew("maximum" if name == "max" else "minimum", self.tensor(x, name), a["dim"])
        return self.apply_row_or_matmul(name, a, x)

    def _operand(self, a: dict, key: str, default: str) -> Node:
        v = _given(a.get(key))
        return const(default) if v is None else self.tensor(v, key)

    def softplus(self, t: Node, beta, threshold) -> Node:
        beta, threshold = _given(beta), _given(threshold)
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
                dims = _trailing(_count(shape.value))
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

    # ------------------------------------------------------------------ rows and matmuls
    def dims_of(self, v, what: str) -> DimSpec:
        """The dims a `dim=` argument names: one dim, the trailing dims, or all (None)."""
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
                return _trailing(len(neg))
        raise Unsupported(f"unsupported: {what} {value!r} (one dim, the trailing dims, or all)")

    def norm_dims(self, v) -> DimSpec:
        """The dims a `normalized_shape` covers: as many trailing dims as it has sizes."""
        if isinstance(v, ShapeOf):  # x.shape[-k:], (x.shape[-1],) or self.weight.shape
            dims = v.node.attrs.get("dims") if v.node.op == "load" else None
            if v.index is None and dims is not None:
                return _trailing(len(dims))
            if isinstance(v.index, tuple) and v.index[0] == "from" and v.index[1] < 0:
                return _trailing(-v.index[1])
            if v.index == ("tuple", -1):
                return _trailing(1)
            raise Unsupported("unsupported: this normalized_shape expression")
        if isinstance(v, ScalarAttr) and v.static is None:
            self.self_used.add(v.name)
            return DimSpec("trailing", f"len(self.{v.name})")
        return _trailing(_count(self.static(v, "normalized_shape")))

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
        if name in ("matmul", "mm"):
            return self.matmul(x, a.get("other", a.get("mat2")))
        if name == "linear":
            out = self.matmul(x, Transposed(self.tensor(a.get("weight"), "linear's weight")))
            b = _given(a.get("bias"))
            return out if b is None else self.ew("add", out, self.tensor(b, "linear's bias"))
        if name == "addmm":
            if any(_given(a.get(k)) is not None and self.static(a[k], k) != 1 for k in ("beta", "alpha")):
                raise Unsupported("unsupported: addmm with beta or alpha other than 1")
            out = self.matmul(a.get("mat1"), a.get("mat2"))
            return self.ew("add", self.tensor(x, "addmm's input"), out)
        t = self.tensor(x, name)
        if name in ("softmax", "log_softmax"):
            if _given(a.get("dtype")) is not None:
                raise Unsupported(f"unsupported: {name} with a dtype")
            if _given(a.get("dim")) is None:
                raise Unsupported(f"unsupported: {name} without a dim")
            dims = self.dims_of(a["dim"], f"{name}'s dim")
            m = self.reduce("max", t, dims, "row_max")
            if name == "softmax":
                e = self.ew("exp", self.ew("sub", t, m))
                return self.ew("div", e, self.reduce("sum", e, dims, "row_sum"))
            z = self.ew("sub", t, m)
            s = self.reduce("sum", self.ew("exp", z), dims, "row_sum")
            return self.ew("sub", z, self.ew("log", s))
        if name in ("layer_norm", "rms_norm"):
            dims = self.norm_dims(a.get("normalized_shape"))
            w = _given(a.get("weight"))
            w = None if w is None else self.tensor(w, "the weight")
            eps = _given(a.get("eps"))
            if name == "rms_norm":
                return self.rms_norm(t, dims, w, const(FLOAT32_EPS) if eps is None else self.tensor(eps, "eps"))
            b = _given(a.get("bias"))
            return self.layer_norm(t, dims, w, None if b is None else self.tensor(b, "the bias"),
                                   const("1e-05") if eps is None else self.tensor(eps, "eps"))
        if name == "normalize":
            p = self.static(a.get("p", Static(2.0, "")), "normalize's p")
            dims = self.dims_of(a.get("dim", Static(1, "1")), "normalize's dim")
            eps = _given(a.get("eps"))
            nrm = self.norm_of(t, p, dims)
            return self.ew("div", t, self.ew("clamp_min", nrm, const("1e-12") if eps is None else self.tensor(eps, "eps")))
        keepdim = _given(a.get("keepdim"))
        if _given(a.get("dtype")) is not None:
            raise Unsupported(f"unsupported: {name} with a dtype")
        dims = self.dims_of(_given(a.get("dim")), f"{name}'s dim")
        if name in ("sum", "mean", "amax", "amin", "max", "min"):
            kind = {"sum": "sum", "mean": "sum", "amax": "max", "max": "max"}.get(name, "min")
            if name == "mean":
                out = self.mean(t, dims)
            else:
                out = self.reduce(kind, t, dims, f"row_{kind}")
            out = self.squeeze(out, keepdim)
            has_dim = _given(a.get("dim")) is not None
            return Pair(out) if name in ("max", "min") and has_dim else out
        if name == "logsumexp":
            m = self.reduce("max", t, dims, "row_max")
            s = self.reduce("sum", self.ew("exp", self.ew("sub", t, m)), dims, "row_sum")
            return self.squeeze(self.ew("add", m, self.ew("log", s)), keepdim)
        if name in ("norm", "vector_norm"):
            p = self.static(a.get("p", a.get("ord", Static(2, ""))), f"{name}'s p")
            return self.squeeze(self.norm_of(t, p, dims), keepdim)
        if name in ("var", "std"):
            unbiased = _given(a.get("unbiased"))
            corr = _given(a.get("correction"))
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


def _trailing(k: int) -> DimSpec:
    return DimSpec("single", "-1", -1) if k == 1 else DimSpec("trailing", str(k))


def _count(shape) -> int:
    if isinstance(shape, int) and not isinstance(shape, bool):
        return 1
    if isinstance(shape, (tuple, list)):
        return len(shape)
    raise Unsupported("unsupported: normalized_shape must be an int or a tuple")


def _given(v):
    """None for an argument left out or passed as None."""
    return None if v is None or isinstance(v, Static) and v.value is None else v


def _static_num(v: Static) -> bool:
    return isinstance(v.value, (int, float)) and not isinstance(v.value, bool)


def squeezed(n: Node) -> bool:
    """Whether a row value lost its reduced dim (keepdim=False): it no longer lines up with
    the input's shape."""
    return bool(n.attrs.get("squeezed")) or (n.level == ROW and any(squeezed(a) for a in n.args))


def _tensor_attr(v: Node, chain: list[str], depth: int):
    """`self.w`, `self.w.T` or `self.w.shape` (`chain` past `depth` names the attribute)."""
    rest = chain[depth:]
    if not rest:
        return v
    if rest == ["T"]:
        return Transposed(v)
    if rest == ["shape"]:
        return ShapeOf(v)
    raise Unsupported(f"unsupported: self.{'.'.join(chain)}")


def _bad(text: str):
    raise Unsupported(f"unsupported: {text}")


def _line(stmt: ast.stmt) -> str:
    return ast.unparse(stmt).splitlines()[0][:60]


def lower(info: ModuleInfo) -> tuple[Node, Lowering]:
    lo = Lowering(info)
    out = lo.run()
    if out.level == UNIFORM:
        raise Unsupported("unsupported: the output does not depend on a tensor input")
    return out, lo
