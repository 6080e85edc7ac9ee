"""Which catalog operators a PyTorch module's source uses, read from its AST (nothing is run).

Resolution: import aliases are followed (`import torch.nn.functional as F`, `from torch import nn`,
`from torch.nn import Conv2d`); a call's dotted name is matched against every spelling of every
`OpSpec` (`torch.relu`, `F.relu`, `nn.ReLU`, the method form `x.relu()`, operators such as `@` and
`+`). `self.conv(x)` counts as the layer that `__init__` stored in `self.conv`. Calls that look
like compute but are not in the catalog are reported as `unknown`; data movement, shape handling
and Python built-ins are `glue` and always allowed.

Covers: `scan_source` (every class and helper function of a task file except the input
generators, for the validation check) and `forward_api_sets` (one set per `forward`, for
co-occurrence mining). Does not cover: deciding whether a module is valid (propose/validate.py).
Limits: this is static analysis; a call through `getattr`, `eval` or a dict of functions is not
seen. The validation check is a filter for composed and LLM-written modules, not a security
boundary (those modules run only in the evaluator's sandbox).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kernelzero.catalog.specs import SPECS
from kernelzero.tasks.task import parse_python

_ROOTS = {"F": "torch.nn.functional", "nn": "torch.nn", "torch": "torch"}
_BINOPS = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*", ast.Div: "/", ast.MatMult: "@"}

GLUE_METHODS = frozenset("""view reshape flatten unflatten permute transpose t contiguous unsqueeze
squeeze expand expand_as size dim numel to float half double bfloat16 int long bool clone detach
type_as chunk split narrow select repeat flip roll new_zeros new_ones new_empty new_full item
tolist zero_ fill_ copy_ movedim view_as reshape_as __init__ append extend keys values items get
register_buffer register_parameter parameters modules children train eval format""".split())
GLUE_FUNCS = frozenset("""torch.cat torch.stack torch.flatten torch.reshape torch.permute
torch.transpose torch.unsqueeze torch.squeeze torch.split torch.chunk torch.narrow torch.zeros
torch.ones torch.empty torch.full torch.zeros_like torch.ones_like torch.empty_like torch.full_like
torch.arange torch.tensor torch.as_tensor torch.no_grad torch.randn torch.rand torch.randint
torch.randn_like torch.rand_like torch.movedim torch.flip torch.roll torch.nn.functional.pad
torch.nn.Parameter torch.nn.Sequential torch.nn.ModuleList torch.nn.ModuleDict torch.nn.Identity
torch.nn.Flatten torch.nn.Unflatten torch.nn.Module torch.nn.init torch.Size torch.finfo
torch.iinfo torch.device torch.float32 torch.broadcast_to torch.index_select torch.gather""".split())

# spelling -> catalog name, with `F.`/`nn.` spellings expanded to full module paths
_SPELLING: dict[str, str] = {}
for _spec in SPECS.values():
    for _s in _spec.spellings():
        if _s.startswith(".") or _s in _BINOPS.values():
            _SPELLING.setdefault(_s, _spec.name)
            continue
        root, _, rest = _s.partition(".")
        _SPELLING.setdefault(f"{_ROOTS.get(root, root)}.{rest}" if rest else _s, _spec.name)


@dataclass
class ApiUse:
    """What a source uses: catalog operator names, compute calls outside the catalog, glue."""

    apis: set[str] = field(default_factory=set)
    unknown: set[str] = field(default_factory=set)
    glue: set[str] = field(default_factory=set)

    def merge(self, other: "ApiUse") -> None:
        self.apis |= other.apis
        self.unknown |= other.unknown
        self.glue |= other.glue


def import_aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> full dotted module/object path, from the file's imports."""
    aliases = {"torch": "torch"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                aliases[a.asname or a.name.split(".")[0]] = a.name if a.asname else a.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom) and node.module:
            for a in node.names:
                aliases[a.asname or a.name] = f"{node.module}.{a.name}"
    return aliases


def dotted(node: ast.AST, aliases: dict[str, str]) -> str | None:
    """`F.gelu` -> `torch.nn.functional.gelu` when the root name is an imported module."""
    parts = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name) or node.id not in aliases:
        return None
    return ".".join([aliases[node.id]] + parts[::-1])


def classify_call(call: ast.Call, aliases: dict[str, str], layers: dict[str, str]) -> tuple[str, str]:
    """(kind, name) of one call: kind is `api` (catalog name), `unknown`, `glue` or `layer`."""
    func = call.func
    # self.conv(x) -> the layer __init__ stored under that name
    if (isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name)
            and func.value.id == "self" and func.attr in layers):
        return "api", layers[func.attr]
    name = dotted(func, aliases)
    if name is not None:
        if name in _SPELLING:
            return "api", _SPELLING[name]
        if name in GLUE_FUNCS or any(name.startswith(g + ".") for g in GLUE_FUNCS):
            return "glue", name
        if name.startswith("torch.") and name.split(".")[-1][:1].isupper() and ".nn." not in name:
            return "glue", name  # dtypes and classes such as torch.Generator
        if name.startswith("torch"):
            return "unknown", name
        return "glue", name  # math.sqrt, numpy helpers, builtins on module objects
    if isinstance(func, ast.Attribute):
        meth = "." + func.attr
        if isinstance(func.value, ast.Name) and func.value.id == "self":
            return "glue", meth  # a helper method of the module: its body is scanned too
        if meth in _SPELLING:
            return "api", _SPELLING[meth]
        if func.attr in GLUE_METHODS:
            return "glue", meth
        return "unknown", meth
    if isinstance(func, ast.Name):
        return "glue", func.id  # builtins (len, range, super) and helpers defined in the file
    return "glue", "<expr>"


def _is_number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float))


def _scan_body(nodes, aliases, layers) -> ApiUse:
    use = ApiUse()
    for stmt in nodes:
        for node in ast.walk(stmt):
            if isinstance(node, ast.Call):
                kind, name = classify_call(node, aliases, layers)
                {"api": use.apis, "unknown": use.unknown, "glue": use.glue}[kind].add(name)
            elif (isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) not in _BINOPS
                  and not (isinstance(node, ast.BinOp) and _shape_arith(node))):
                use.unknown.add(f"operator {type(node.op).__name__}")  # **, %, //, bit ops
            elif isinstance(node, (ast.BinOp, ast.AugAssign)) and type(node.op) in _BINOPS:
                operands = (node.left, node.right) if isinstance(node, ast.BinOp) else (node.value,)
                if isinstance(node, ast.BinOp) and all(_is_number(o) for o in operands):
                    continue
                if isinstance(node, ast.BinOp) and _shape_arith(node):
                    continue
                use.apis.add(_SPELLING[_BINOPS[type(node.op)]])
    return use


def _shape_arith(node: ast.BinOp) -> bool:
    """`x.size(0) * 2`, `x.shape[1] // g`, `self.dim ** 0.5`: integer shape arithmetic is glue."""
    def shapeish(n):
        if _is_number(n):
            return True
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr in ("size", "dim", "numel"):
            return True
        if isinstance(n, ast.Subscript) and isinstance(n.value, ast.Attribute) and n.value.attr == "shape":
            return True
        if isinstance(n, ast.Attribute) and n.attr == "shape":
            return True
        return isinstance(n, ast.BinOp) and shapeish(n.left) and shapeish(n.right)
    return shapeish(node.left) and shapeish(node.right)


def _layers_of(cls: ast.ClassDef, aliases) -> tuple[dict[str, str], ApiUse]:
    """self.<attr> -> catalog name for layers built in __init__, and what __init__ constructs."""
    layers: dict[str, str] = {}
    use = ApiUse()
    for fn in cls.body:
        if not (isinstance(fn, ast.FunctionDef) and fn.name == "__init__"):
            continue
        for node in ast.walk(fn):
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
                kind, name = classify_call(node.value, aliases, {})
                for t in node.targets:
                    if (kind == "api" and isinstance(t, ast.Attribute)
                            and isinstance(t.value, ast.Name) and t.value.id == "self"):
                        layers[t.attr] = name
            if isinstance(node, ast.Call):
                kind, name = classify_call(node, aliases, {})
                if kind == "api" and (dotted(node.func, aliases) or "").startswith("torch.nn."):
                    use.apis.add(name)  # a layer constructed here (also inside nn.Sequential)
                elif kind == "unknown" and (dotted(node.func, aliases) or "").startswith("torch.nn."):
                    use.unknown.add(name)  # e.g. nn.Dropout: an nn layer outside the catalog
    return layers, use


INPUT_FUNCS = ("get_inputs", "get_init_inputs")


def scan_source(source: str) -> ApiUse:
    """Operators used by every class and helper function of a task file (not the input makers)."""
    tree = parse_python(source)
    aliases = import_aliases(tree)
    use = ApiUse()
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            layers, init_use = _layers_of(node, aliases)
            use.merge(init_use)
            bodies = [fn.body for fn in node.body
                      if isinstance(fn, ast.FunctionDef) and fn.name != "__init__"]
            for body in bodies:
                use.merge(_scan_body(body, aliases, layers))
        elif isinstance(node, ast.FunctionDef) and node.name not in INPUT_FUNCS:
            use.merge(_scan_body(node.body, aliases, {}))
    return use


def forward_api_sets(source: str) -> list[set[str]]:
    """One set of catalog operators per `forward` method in the file (layers resolved)."""
    try:
        tree = parse_python(source)
    except SyntaxError:
        return []
    aliases = import_aliases(tree)
    out = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.ClassDef):
            continue
        layers, _ = _layers_of(node, aliases)
        for fn in node.body:
            if isinstance(fn, ast.FunctionDef) and fn.name == "forward":
                apis = _scan_body(fn.body, aliases, layers).apis
                if apis:
                    out.append(apis)
    return out
