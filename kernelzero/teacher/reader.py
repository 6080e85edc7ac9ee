"""Read a reference module's text (never run it): imports, constants, `Model.__init__`, input hints.

What it finds:
- aliases: which local names mean `torch`, `torch.nn`, `torch.nn.functional`, `math` or a
  function imported from them (`from torch.nn.functional import relu`);
- module constants: globals whose value folds to a number, string, bool or tuple (`SCALE = 0.37`,
  `dim = 4 * 256`, `math.sqrt(2 / math.pi)`);
- `__init__`: each `self.NAME = ...` as a parameter or buffer (with its shape's layout), a layer
  (nn.Linear, nn.LayerNorm, nn.RMSNorm, activation layers), or a scalar (a constant, or a value
  computed from the constructor's arguments, read at run time);
- input hints from `get_inputs`: which forward arguments are scalars, and each tensor's dims
  (`torch.randn(B, C, 1, 1)` says rank 4 with two trailing ones).
Anything else in `__init__` raises Unsupported with the reason. Folding a value from the text, the
imports' aliases and a made tensor's dims are in constants.py.
"""
from __future__ import annotations

import ast
from dataclasses import dataclass, field

from kernelzero.teacher.constants import (NotConstant, Static, aliases_of, fold, layout_of,
                                          module_constants, qualname, tensor_dims)
from kernelzero.teacher.ir import Layout, Unsupported

MODULE_PATHS = {"torch", "torch.nn", "torch.nn.functional", "math", "torch.special", "torch.linalg"}
ACTIVATION_LAYERS = {  # nn class -> (op, constructor parameters with defaults)
    "ReLU": ("relu", (("inplace", False),)),
    "ReLU6": ("relu6", (("inplace", False),)),
    "LeakyReLU": ("leaky_relu", (("negative_slope", 0.01), ("inplace", False))),
    "ELU": ("elu", (("alpha", 1.0), ("inplace", False))),
    "SELU": ("selu", (("inplace", False),)),
    "GELU": ("gelu", (("approximate", "none"),)),
    "SiLU": ("silu", (("inplace", False),)),
    "Sigmoid": ("sigmoid", ()),
    "Tanh": ("tanh", ()),
    "Softplus": ("softplus", (("beta", 1.0), ("threshold", 20.0))),
    "Mish": ("mish", (("inplace", False),)),
    "Hardtanh": ("hardtanh", (("min_val", -1.0), ("max_val", 1.0), ("inplace", False))),
    "Hardsigmoid": ("hardsigmoid", (("inplace", False),)),
    "Hardswish": ("hardswish", (("inplace", False),)),
    "Softsign": ("softsign", ()),
    "Identity": ("identity", ()),
    "Softmax": ("softmax", (("dim", None),)),
    "LogSoftmax": ("log_softmax", (("dim", None),)),
}
STATE_LAYERS = {  # layers with parameters: (constructor parameters with defaults)
    "Linear": (("in_features", None), ("out_features", None), ("bias", True),
               ("device", None), ("dtype", None)),
    "LayerNorm": (("normalized_shape", None), ("eps", 1e-5), ("elementwise_affine", True),
                  ("bias", True), ("device", None), ("dtype", None)),
    "RMSNorm": (("normalized_shape", None), ("eps", None), ("elementwise_affine", True),
                ("device", None), ("dtype", None)),
}


@dataclass
class Attr:
    """One `self.NAME` set in `__init__`.

    kind: `param` / `buffer` (tensor; `layout`), `layer` (`cls`, `options`: constructor argument
        name -> Static or source text of a run-time value), `scalar` (`static` when it folds to a
        constant, else read at run time as `self.NAME`).
    stmt: the statement that sets it (copied into ModelNew.__init__ when kept).
    """

    name: str
    kind: str
    stmt: ast.stmt
    layout: Layout | None = None
    cls: str = ""
    options: dict = field(default_factory=dict)
    static: Static | None = None
    shape_dims: list | None = None


@dataclass
class InputHint:
    scalar: bool = False
    dims: list | None = None   # ast nodes of the tensor's dims, when get_inputs shows them


@dataclass
class ModuleInfo:
    tree: ast.Module
    source: str
    aliases: dict[str, str]
    globals: dict[str, Static]
    global_stmts: dict[str, ast.stmt]
    imports: list[ast.stmt]
    init: ast.FunctionDef | None
    forward: ast.FunctionDef
    attrs: dict[str, Attr]
    init_locals: list[ast.stmt]
    init_args: list[str]
    inputs: dict[str, InputHint]
    dims_env: dict[str, Static] = field(default_factory=dict)


def bind_call(call: ast.Call, params: tuple, what: str) -> dict[str, ast.AST | None]:
    """Map a call's arguments onto `params` ((name, default) pairs) like Python would; defaults
    are returned as None (the caller knows them)."""
    if any(isinstance(a, ast.Starred) for a in call.args) or any(k.arg is None for k in call.keywords):
        raise Unsupported(f"unsupported: *args/**kwargs in {what}")
    names = [p[0] for p in params]
    if len(call.args) > len(names):
        raise Unsupported(f"unsupported: too many arguments to {what}")
    out: dict[str, ast.AST | None] = dict.fromkeys(names)
    for n, a in zip(names, call.args):
        out[n] = a
    for k in call.keywords:
        if k.arg not in out:
            raise Unsupported(f"unsupported: {what}({k.arg}=...)")
        out[k.arg] = k.value
    return out


def read_module(source: str) -> ModuleInfo:
    try:
        tree = ast.parse(source)
    except SyntaxError as e:
        raise Unsupported(f"the module does not parse: {e.msg} (line {e.lineno})") from None
    aliases, imports = aliases_of(tree)
    env, global_stmts = module_constants(tree, source, aliases)
    model = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
    if model is None:
        raise Unsupported("the module defines no `class Model`")
    methods = {n.name: n for n in model.body if isinstance(n, ast.FunctionDef)}
    if "forward" not in methods:
        raise Unsupported("Model has no forward method")
    extra = sorted(set(methods) - {"__init__", "forward"})
    if extra:
        raise Unsupported(f"unsupported: Model method {extra[0]}() besides __init__ and forward")
    init = methods.get("__init__")
    info = ModuleInfo(tree=tree, source=source, aliases=aliases, globals=env,
                      global_stmts=global_stmts, imports=imports, init=init,
                      forward=methods["forward"], attrs={}, init_locals=[], init_args=[],
                      inputs={})
    info.dims_env = _init_hints(info)
    if init is not None:
        _read_init(info)
    info.inputs = _input_hints(info)
    return info


def _init_hints(info: ModuleInfo) -> dict[str, Static]:
    """Constants for reading parameter shapes in __init__: the module's globals, with each
    constructor argument standing for what get_init_inputs passes it (when the text shows it)."""
    env = dict(info.globals)
    if info.init is None:
        return env
    names = [a.arg for a in info.init.args.args[1:]]
    for n in names:
        env.pop(n, None)
    fn = next((n for n in info.tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_init_inputs"), None)
    ret = next((s.value for s in (fn.body if fn else []) if isinstance(s, ast.Return)), None)
    if isinstance(ret, (ast.List, ast.Tuple)) and not any(isinstance(e, ast.Starred) for e in ret.elts):
        for n, e in zip(names, ret.elts):
            try:
                env[n] = fold(e, info.source, info.aliases, info.globals)
            except NotConstant:
                pass
    return env


def _is_super_init(stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
        isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "__init__" and \
        isinstance(stmt.value.func.value, ast.Call) and \
        isinstance(stmt.value.func.value.func, ast.Name) and stmt.value.func.value.func.id == "super"


def _read_init(info: ModuleInfo) -> None:
    init, src, aliases = info.init, info.source, info.aliases
    a = init.args
    if a.vararg or a.kwarg or a.kwonlyargs or a.posonlyargs:
        raise Unsupported("unsupported: *args, **kwargs or keyword-only arguments in __init__")
    info.init_args = [x.arg for x in a.args[1:]]
    for stmt in init.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant):
            continue  # docstring
        if _is_super_init(stmt) or isinstance(stmt, ast.Pass):
            continue
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Call) and \
                isinstance(stmt.value.func, ast.Attribute) and stmt.value.func.attr == "register_buffer":
            call = stmt.value
            if not call.args or not isinstance(call.args[0], ast.Constant) or len(call.args) < 2:
                raise Unsupported("unsupported: register_buffer without a literal name and a tensor")
            name = call.args[0].value
            dims = tensor_dims(call.args[1], aliases)
            info.attrs[name] = Attr(name, "buffer", stmt, shape_dims=dims,
                                    layout=layout_of(dims, aliases, info.dims_env, src, f"buffer {name}"))
            continue
        target = value = None
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1:
            target, value = stmt.targets[0], stmt.value
        elif isinstance(stmt, ast.AnnAssign) and stmt.value is not None:
            target, value = stmt.target, stmt.value
        if isinstance(target, ast.Name):
            info.init_locals.append(stmt)
            continue
        if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                and target.value.id == "self"):
            raise Unsupported(f"unsupported in __init__: {ast.unparse(stmt).splitlines()[0][:60]}")
        info.attrs[target.attr] = _read_attr(info, target.attr, value, stmt)


def _read_attr(info: ModuleInfo, name: str, value: ast.AST, stmt: ast.stmt) -> Attr:
    src, aliases = info.source, info.aliases
    # A constructor argument or a local of __init__ shadows the global of its name (`dim = 2048`
    # beside `def __init__(self, dim)`): `self.dim = dim` is then the argument, read at run time.
    local = set(info.init_args) | {t.id for s in info.init_locals for t in
                                   (s.targets if isinstance(s, ast.Assign) else [s.target])
                                   if isinstance(t, ast.Name)}
    consts = {k: v for k, v in info.globals.items() if k not in local}
    if isinstance(value, ast.Call):
        q = qualname(value.func, aliases) or ""
        if q in ("torch.nn.Parameter", "torch.nn.parameter.Parameter"):
            if not value.args:
                raise Unsupported(f"unsupported: nn.Parameter without a tensor ({name})")
            dims = tensor_dims(value.args[0], aliases)
            return Attr(name, "param", stmt, shape_dims=dims,
                        layout=layout_of(dims, aliases, info.dims_env, src, f"parameter {name}"))
        cls = q.split(".")[-1] if q.startswith("torch.nn.") else ""
        if cls in ACTIVATION_LAYERS or cls in STATE_LAYERS:
            params = ACTIVATION_LAYERS[cls][1] if cls in ACTIVATION_LAYERS else STATE_LAYERS[cls]
            bound = bind_call(value, params, f"nn.{cls}")
            options = {}
            for p, default in params:
                node = bound[p]
                if node is None:
                    options[p] = Static(default, repr(default))
                    continue
                try:
                    options[p] = fold(node, src, aliases, consts)
                except NotConstant:
                    options[p] = ast.get_source_segment(src, node) or ast.unparse(node)
            return Attr(name, "layer", stmt, cls=cls, options=options)
        if q.startswith("torch.nn.") and q.split(".")[-1][:1].isupper():
            raise Unsupported(f"unsupported: nn.{q.split('.')[-1]}")
        if tensor_dims(value, aliases) is not None:
            raise Unsupported(f"unsupported: tensor attribute {name} that is neither a "
                              "parameter nor a buffer")
    try:
        return Attr(name, "scalar", stmt, static=fold(value, src, aliases, consts))
    except NotConstant:
        pass
    used = {n.id for n in ast.walk(value) if isinstance(n, ast.Name)}
    known = set(info.init_args) | set(info.globals) | {"float", "int", "math", "tuple"}
    known |= {s.targets[0].id for s in info.init_locals if isinstance(s, ast.Assign)}
    if used <= known and not any(isinstance(n, (ast.Lambda, ast.ListComp)) for n in ast.walk(value)):
        return Attr(name, "scalar", stmt)  # read at run time
    raise Unsupported(f"unsupported in __init__: self.{name} = {ast.unparse(value)[:50]}")


def _input_hints(info: ModuleInfo) -> dict[str, InputHint]:
    fwd = info.forward.args
    if fwd.vararg or fwd.kwarg or fwd.kwonlyargs:
        raise Unsupported("unsupported: *args, **kwargs or keyword-only arguments in forward")
    names = [a.arg for a in fwd.args[1:]]
    hints = {n: InputHint() for n in names}
    for a in fwd.args[1:]:
        ann = a.annotation
        if isinstance(ann, ast.Name) and ann.id in ("float", "int"):
            hints[a.arg].scalar = True
    fn = next((n for n in info.tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_inputs"), None)
    if fn is None:
        return hints
    local: dict[str, ast.AST] = {}
    ret = None
    for stmt in fn.body:
        if isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name):
            local[stmt.targets[0].id] = stmt.value
        elif isinstance(stmt, ast.Return):
            ret = stmt.value
    if not isinstance(ret, (ast.List, ast.Tuple)) or len(ret.elts) != len(names):
        return hints
    for n, e in zip(names, ret.elts):
        if isinstance(e, ast.Name) and e.id in local:
            e = local[e.id]
        try:
            v = fold(e, info.source, info.aliases, info.globals).value
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                hints[n].scalar = True
            continue
        except NotConstant:
            pass
        hints[n].dims = tensor_dims(e, info.aliases)
    return hints
