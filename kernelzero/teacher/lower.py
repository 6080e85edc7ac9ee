"""Lower a module's `forward` into the teacher's graph (kernelzero.teacher.ir), statement by
statement: assignments, augmented assignments, in-place method statements and the return.

Expressions are evaluated to graph nodes or to the values in `values` (constants, scalar
attributes, layers, shapes). Calls go through `calls.CallLowering` (every spelling of an op),
reductions, norms and matmuls through `reductions.RowLowering`. Values that only steer the
computation (a reduction's dim, keepdim, gelu's approximate) must be known from the text, except
a reduction dim stored in `self` (read by the wrapper at run time). Anything else raises
Unsupported with a one-line reason.
"""
from __future__ import annotations

import ast

from kernelzero.teacher.calls import CMP, COMPARE, CallLowering
from kernelzero.teacher.ir import FULL, ROW, UNIFORM, Layout, Leaf, Node, Unsupported, arg, const, ew
from kernelzero.teacher.constants import NotConstant, Static, fold, layout_of, qualname
from kernelzero.teacher.reader import ModuleInfo
from kernelzero.teacher.reductions import RowLowering
from kernelzero.teacher.values import (DimSpec, LayerRef, Pair, ScalarAttr, ShapeOf, Transposed, is_number,
                                       layout_of_flags, squeezed, tensor_attr)


class Lowering(CallLowering, RowLowering):
    """A module's forward, statement by statement, as graph nodes (`run` returns the output)."""

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
                        if is_number(v) else _bad(f"-{v.text}")
                return self.ew("neg", self.tensor(v, "-x"))
            raise Unsupported(f"unsupported operator {type(node.op).__name__} in forward")
        if isinstance(node, ast.BinOp):
            return self.binop(node.op, self.expr(node.left), self.expr(node.right), node)
        if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in COMPARE:
            return self.ew(COMPARE[type(node.ops[0])], self.tensor(self.expr(node.left), "a comparison"),
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
            return tensor_attr(self._self_tensor([chain[0]], a.layout, a.shape_dims), chain, 1)
        if a.kind == "scalar":
            if len(chain) > 1:
                raise Unsupported(f"unsupported: self.{'.'.join(chain)}")
            return ScalarAttr(chain[0], a.static)
        if len(chain) == 1:
            return LayerRef(a)
        if a.cls in ("Linear", "LayerNorm", "RMSNorm") and chain[1] in ("weight", "bias"):
            if chain[1] == "bias" and a.options.get("bias", Static(True, "")).value is False:
                raise Unsupported(f"unsupported: self.{chain[0]}.bias is None")
            return tensor_attr(self._self_tensor(chain[:2], Layout("bcast", 0)), chain, 2)
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
            return self._load(Leaf(leaf.name, leaf.expr, layout_of_flags(flags, leaf.expr), False))
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
            if not is_number(v):
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
