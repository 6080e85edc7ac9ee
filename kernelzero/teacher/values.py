"""What a forward expression evaluates to besides a graph node, and helpers on such values.

A constant (`constants.Static`), a scalar attribute (`ScalarAttr`: `self.scale`), a layer
(`LayerRef`: `self.act`, called later), torch.max/min's (values, indices) pair (`Pair`), a
transposed tensor (`Transposed`: only a matmul's right operand), a shape or size (`ShapeOf`), and
which dims a reduction covers (`DimSpec`).
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelzero.teacher.ir import ROW, Layout, Node, Unsupported
from kernelzero.teacher.constants import Static
from kernelzero.teacher.reader import Attr


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

def trailing_dims(k: int) -> DimSpec:
    return DimSpec("single", "-1", -1) if k == 1 else DimSpec("trailing", str(k))


def count_dims(shape) -> int:
    if isinstance(shape, int) and not isinstance(shape, bool):
        return 1
    if isinstance(shape, (tuple, list)):
        return len(shape)
    raise Unsupported("unsupported: normalized_shape must be an int or a tuple")


def given(v):
    """None for an argument left out or passed as None."""
    return None if v is None or isinstance(v, Static) and v.value is None else v


def is_number(v: Static) -> bool:
    return isinstance(v.value, (int, float)) and not isinstance(v.value, bool)


def squeezed(n: Node) -> bool:
    """Whether a row value lost its reduced dim (keepdim=False): it no longer lines up with
    the input's shape."""
    return bool(n.attrs.get("squeezed")) or (n.level == ROW and any(squeezed(a) for a in n.args))


def tensor_attr(v: Node, chain: list[str], depth: int):
    """`self.w`, `self.w.T` or `self.w.shape` (`chain` past `depth` names the attribute)."""
    rest = chain[depth:]
    if not rest:
        return v
    if rest == ["T"]:
        return Transposed(v)
    if rest == ["shape"]:
        return ShapeOf(v)
    raise Unsupported(f"unsupported: self.{'.'.join(chain)}")


def layout_of_flags(flags: list[bool], what: str) -> Layout:
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
