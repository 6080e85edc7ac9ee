"""The teacher's dataflow graph: what a module's `forward` computes, as nodes the emitters print.

A `Node` is a leaf (a tensor `load`, a literal `const`, a run-time scalar `arg`, the reduced
length `rowlen`), an elementwise op (its Triton form is a template in `EW`), a row `reduce`
(sum / max / min over the module's reduced dims) or a `matmul`. Nodes are made in forward order,
so their ids are a topological order that follows the source.

Levels say where a value lives in a kernel: `UNIFORM` (same for every element: constants, scalar
arguments, one-element parameters), `ROW` (one value per reduced row) and `FULL` (one per element).
"""
from __future__ import annotations

import itertools
import re
from dataclasses import dataclass, field

UNIFORM, ROW, FULL = 0, 1, 2

_ids = itertools.count()


class Unsupported(Exception):
    """The module is outside what the teacher compiles; the message is the one-line reason."""


@dataclass(frozen=True)
class Layout:
    """How a tensor leaf lines up with the output.

    kind: `full` (the output's shape: read at the flat offset), `bcast` (a right-aligned block of
        sizes, e.g. a per-feature vector (F,) or a per-channel (C, 1, 1): read at
        `offs // inner % size`, where inner is the product of the output's last `trailing` sizes)
        or `one` (a single value: read once).
    trailing: for `bcast`, how many size-1 dims end its shape.
    """

    kind: str = "full"
    trailing: int = 0


@dataclass(frozen=True)
class Leaf:
    """A tensor the kernel reads. name: its kernel name (`x`, `bias`, `linear_weight`);
    expr: how ModelNew.forward reaches it (`x`, `self.bias`); is_input: a forward argument (made
    contiguous by the wrapper) rather than a parameter or buffer."""

    name: str
    expr: str
    layout: Layout = Layout()
    is_input: bool = False


@dataclass(eq=False)
class Node:
    op: str
    args: tuple = ()
    attrs: dict = field(default_factory=dict)
    hint: str = ""
    id: int = field(default_factory=lambda: next(_ids))

    @property
    def level(self) -> int:
        if self.op in ("const", "arg", "rowlen"):
            return UNIFORM
        if self.op == "load":
            return UNIFORM if self.attrs["leaf"].layout.kind == "one" else FULL
        if self.op == "reduce":
            return ROW
        if self.op == "matmul":
            return FULL
        return max((a.level for a in self.args), default=UNIFORM)

    @property
    def is_scalar_expr(self) -> bool:
        """Printed inline where used (constants, scalar arguments and ops on them only)."""
        return self.level == UNIFORM and self.op != "load"


def const(text: str) -> Node:
    return Node("const", attrs={"text": text})


def arg(name: str, expr: str) -> Node:
    """A run-time scalar: kernel argument `name`, passed by the wrapper as `expr`."""
    return Node("arg", attrs={"name": name, "expr": expr})


def ew(op: str, *args: Node, hint: str = "") -> Node:
    if op not in EW:
        raise Unsupported(f"unsupported: {op}")
    return Node(op, tuple(args), hint=hint)


# Elementwise ops: their Triton form, `{0}` the first operand. tanh is 2 sigmoid(2 v) - 1 (core
# Triton has no tanh); gelu's tanh form uses 0.5 v (1 + tanh(u)) = v sigmoid(2 u).
EW = {
    "add": "{0} + {1}", "sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / {1}",
    "neg": "-{0}", "reciprocal": "1 / {0}",
    "relu": "tl.maximum({0}, 0.0)",
    "relu6": "tl.minimum(tl.maximum({0}, 0.0), 6.0)",
    "leaky_relu": "tl.where({0} > 0, {0}, {0} * {1})",
    "elu": "tl.where({0} > 0, {0}, {1} * (tl.exp({0}) - 1))",
    "selu": "1.0507009873554805 * tl.where({0} > 0, {0}, 1.6732632423543772 * (tl.exp({0}) - 1))",
    "gelu": "0.5 * {0} * (1 + tl.erf({0} * 0.7071067811865476))",
    "gelu_tanh": "{0} * tl.sigmoid(1.5957691216057308 * ({0} + 0.044715 * {0} * {0} * {0}))",
    "silu": "{0} * tl.sigmoid({0})",
    "sigmoid": "tl.sigmoid({0})",
    "tanh": "2 * tl.sigmoid(2 * {0}) - 1",
    "softplus": "tl.where({0} > 20.0, {0}, tl.log(1 + tl.exp({0})))",
    "softplus_bt": "tl.where({0} * {1} > {2}, {0}, tl.log(1 + tl.exp({0} * {1})) / {1})",
    "mish": "{0} * (2 * tl.sigmoid(2 * tl.where({0} > 20.0, {0}, tl.log(1 + tl.exp({0})))) - 1)",
    "hardtanh": "tl.minimum(tl.maximum({0}, {1}), {2})",
    "hardsigmoid": "tl.minimum(tl.maximum({0} + 3.0, 0.0), 6.0) / 6.0",
    "hardswish": "{0} * tl.minimum(tl.maximum({0} + 3.0, 0.0), 6.0) / 6.0",
    "softsign": "{0} / (1 + tl.abs({0}))",
    "abs": "tl.abs({0})", "exp": "tl.exp({0})", "log": "tl.log({0})",
    "sqrt": "tl.sqrt({0})", "rsqrt": "tl.rsqrt({0})", "sin": "tl.sin({0})", "cos": "tl.cos({0})",
    "square": "{0} * {0}", "cube": "{0} * {0} * {0}",
    "pow": "tl.exp({1} * tl.log({0}))",
    "clamp": "tl.minimum(tl.maximum({0}, {1}), {2})",
    "clamp_min": "tl.maximum({0}, {1})", "clamp_max": "tl.minimum({0}, {1})",
    "maximum": "tl.maximum({0}, {1})", "minimum": "tl.minimum({0}, {1})",
    "gt": "{0} > {1}", "lt": "{0} < {1}", "ge": "{0} >= {1}", "le": "{0} <= {1}",
    "where": "tl.where({0}, {1}, {2})", "to_float": "tl.where({0}, 1.0, 0.0)",
}

_ATOM_RE = re.compile(r"^(?:[A-Za-z_]\w*|\d[\d.eE+-]*)$")


def atom(text: str) -> str:
    """`text` safe to drop into a template: names and unsigned numbers as they are, else in ()."""
    return text if _ATOM_RE.match(text) else f"({text})"


def render(node: Node, operand) -> str:
    """The expression for `node`; `operand(n)` gives each argument's text (a variable name or an
    inline scalar expression)."""
    if node.op == "const":
        return node.attrs["text"]
    if node.op == "arg":
        return node.attrs["name"]
    if node.op == "rowlen":
        return "N"
    return EW[node.op].format(*(atom(operand(a)) for a in node.args))


def walk(out: Node) -> list[Node]:
    """Every node `out` depends on, itself included, in id (forward) order."""
    seen: dict[int, Node] = {}
    stack = [out]
    while stack:
        n = stack.pop()
        if n.id not in seen:
            seen[n.id] = n
            stack.extend(n.args)
    return sorted(seen.values(), key=lambda n: n.id)
