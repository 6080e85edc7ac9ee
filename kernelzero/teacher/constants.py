"""What a module's text alone says about a value: constant folding (`SCALE = 0.37`, `dim = 4 * 256`,
`math.sqrt(2 / math.pi)`), the module's imports as aliases, its constant globals, and the dims and
broadcast layout of a tensor made by `torch.randn(B, C, 1, 1)`. Nothing is run.
"""
from __future__ import annotations

import ast
import math
from dataclasses import dataclass

from kernelzero.catalog.apimap import dotted as qualname  # F.relu -> torch.nn.functional.relu
from kernelzero.teacher.ir import Layout, Unsupported

TENSOR_MAKERS = {"randn", "rand", "zeros", "ones", "empty", "full", "randn_like", "tensor",
                 "ones_like", "zeros_like"}


class NotConstant(Exception):
    pass


@dataclass
class Static:
    """A value known from the text. text: how to write it in a kernel (as the source wrote it
    when it is a plain literal)."""

    value: object
    text: str


def aliases_of(tree: ast.Module) -> tuple[dict[str, str], list[ast.stmt]]:
    aliases, imports = {}, []
    for node in tree.body:
        if isinstance(node, ast.Import):
            imports.append(node)
            for a in node.names:
                if a.asname:
                    aliases[a.asname] = a.name
                else:
                    aliases[a.name.split(".")[0]] = a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            imports.append(node)
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases, imports


def fold(node: ast.AST, source: str, aliases: dict, env: dict[str, Static]) -> Static:
    """The constant value of an expression, with the text to print it by; NotConstant if any
    part of it is only known at run time."""
    value = _fold(node, aliases, env)
    if isinstance(node, ast.Constant) or (isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub)
                                          and isinstance(node.operand, ast.Constant)):
        text = ast.get_source_segment(source, node) or repr(value)
    elif isinstance(node, ast.Name) and node.id in env:
        text = env[node.id].text
    elif isinstance(value, float):
        text = repr(value)
    else:
        text = repr(value)
    return Static(value, text)


_BIN = {ast.Add: lambda a, b: a + b, ast.Sub: lambda a, b: a - b, ast.Mult: lambda a, b: a * b,
        ast.Div: lambda a, b: a / b, ast.FloorDiv: lambda a, b: a // b, ast.Pow: lambda a, b: a ** b,
        ast.Mod: lambda a, b: a % b}
_MATH = {"sqrt": math.sqrt, "exp": math.exp, "log": math.log, "tanh": math.tanh, "cos": math.cos,
         "sin": math.sin}


def _fold(node, aliases, env):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float, str, bool, type(None))):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id].value
        raise NotConstant(node.id)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        v = _fold(node.operand, aliases, env)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            raise NotConstant("unary")
        return -v if isinstance(node.op, ast.USub) else v
    if isinstance(node, ast.BinOp) and type(node.op) in _BIN:
        a, b = _fold(node.left, aliases, env), _fold(node.right, aliases, env)
        if isinstance(a, tuple) and isinstance(b, tuple) and isinstance(node.op, ast.Add):
            return a + b
        if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in (a, b)):
            raise NotConstant("binop")
        try:
            return _BIN[type(node.op)](a, b)
        except (ArithmeticError, ValueError):
            raise NotConstant("arithmetic") from None
    if isinstance(node, (ast.Tuple, ast.List)):
        return tuple(_fold(e, aliases, env) for e in node.elts)
    q = qualname(node, aliases)
    if q in ("math.pi", "math.e", "math.inf"):
        return getattr(math, q.split(".")[1])
    if isinstance(node, ast.Call) and not node.keywords and len(node.args) == 1:
        fq = qualname(node.func, aliases)
        name = node.func.id if isinstance(node.func, ast.Name) else None
        v = _fold(node.args[0], aliases, env)
        if fq and fq.startswith("math.") and fq[5:] in _MATH and isinstance(v, (int, float)):
            try:
                return _MATH[fq[5:]](v)
            except ValueError:
                raise NotConstant("math domain") from None
        if name in ("float", "int") and isinstance(v, (int, float, str)):
            return {"float": float, "int": int}[name](v)
    raise NotConstant(type(node).__name__)


def module_constants(tree: ast.Module, source: str, aliases: dict) -> tuple[dict, dict]:
    env: dict[str, Static] = {}
    stmts: dict[str, ast.stmt] = {}
    for node in tree.body:
        target = value = None
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            target, value = node.targets[0].id, node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.value:
            target, value = node.target.id, node.value
        if target is None:
            continue
        try:
            env[target] = fold(value, source, aliases, env)
            stmts[target] = node
        except NotConstant:
            env.pop(target, None)
    return env, stmts


def tensor_dims(node: ast.AST, aliases: dict) -> list | None:
    """The dims of a tensor made by `torch.randn(B, F)` (also `rand/zeros/ones/empty/full`,
    `torch.tensor(0.5)`, a tuple of sizes, and the same scaled or shifted: `torch.randn(F) * 0.1`);
    None when the expression is not such a call."""
    while isinstance(node, ast.BinOp):
        left = tensor_dims(node.left, aliases)
        node = node.right if left is None else None
        if left is not None:
            return left
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
            node.func.attr in ("mul", "add", "sub", "mul_", "add_", "contiguous", "float") and \
            tensor_dims(node.func.value, aliases) is not None:
        return tensor_dims(node.func.value, aliases)
    if not isinstance(node, ast.Call):
        return None
    q = qualname(node.func, aliases) or ""
    if not q.startswith("torch.") or q.split(".")[-1] not in TENSOR_MAKERS | {"randint"}:
        return None
    maker = q.split(".")[-1]
    if maker == "randint":  # randint(high, size) or randint(low, high, size)
        size = ([k.value for k in node.keywords if k.arg == "size"] or node.args[1:3][-1:])
        return list(size[0].elts) if size and isinstance(size[0], (ast.Tuple, ast.List)) else None
    if maker == "tensor":
        return [] if node.args and isinstance(node.args[0], (ast.Constant, ast.UnaryOp)) else None
    args = node.args[:1] if maker == "full" else node.args
    if len(args) == 1 and isinstance(args[0], (ast.Tuple, ast.List)):
        args = args[0].elts
    if any(isinstance(a, ast.Starred) for a in args):
        return None
    return list(args)


def layout_of(dims: list | None, aliases: dict, env: dict, source: str, what: str) -> Layout:
    """Layout of a tensor with these dims: `one` when every dim is 1, else `bcast` with its
    trailing ones counted (a size-1 dim between larger ones is refused). A lone dim that folds
    to a tuple (`torch.randn(bias_shape)`) is that tuple's sizes."""
    if dims is None:
        return Layout("bcast", 0)
    ones = []
    for d in dims:
        try:
            value = fold(d, source, aliases, env).value
        except NotConstant:
            if len(dims) == 1 and isinstance(d, ast.Name) and "shape" in d.id:
                raise Unsupported(f"unsupported: {what} has the shape `{d.id}`, which the module "
                                  "text does not show") from None
            value = None
        if isinstance(value, tuple):
            ones += [v == 1 for v in value]
        else:
            ones.append(value == 1)
    if all(ones):
        return Layout("one")
    trailing = 0
    while ones and ones[-1]:
        ones.pop()
        trailing += 1
    while ones and ones[0]:
        ones.pop(0)
    if any(ones):
        raise Unsupported(f"unsupported: {what} broadcasts over an inner dim of size 1")
    return Layout("bcast", trailing)
