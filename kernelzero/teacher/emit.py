"""What every teacher kernel file shares: names, the lines that compute a block of nodes, the
kernel signature and the `ModelNew` around it.

A file is: the imports, the reference's constants the constructor needs, one `@triton.jit`
kernel, and `ModelNew` (the reference's constructor signature and parameter statements, copied
as written, so the evaluator loads the reference's weights by name; a `forward` that only makes
inputs contiguous, allocates the output and launches the kernel).

Names in a kernel: loads take the tensor's name (`x`, `bias`), an op takes the name the forward
gave its value when it has one, else the name of its first operand when that operand is not
needed again (so a chain reads `x = ...` line after line), else a fresh `t`, `t2`, ...
"""
from __future__ import annotations

import ast
import keyword

from kernelzero.teacher.ir import Leaf, Node, Unsupported, render
from kernelzero.teacher.reader import ModuleInfo

HEADER = "import torch\nimport torch.nn as nn\nimport triton\nimport triton.language as tl\n"
HEADER_NAMES = {"torch", "nn", "triton", "tl"}
RESERVED = set(keyword.kwlist) | {
    "offs", "mask", "rows", "cols", "base", "start", "acc", "rm", "rn", "rk", "k0", "a", "b",
    "n", "N", "M", "K", "inner", "tl", "triton", "float", "BLOCK", "BLOCK_I", "BLOCK_N",
    "BLOCK_M", "BLOCK_K", "out_ptr", "range", "torch", "nn", "math", "self", "out"}


def unique(base: str, taken: set[str]) -> str:
    name, i = base, 2
    while name in taken:
        name, i = f"{base}{i}" if not base.endswith("_") else f"{base}{i}", i + 1
    taken.add(name)
    return name


def real(n: Node) -> Node:
    """The node that holds the value (`squeeze` only marks a shape change)."""
    while n.op == "squeeze":
        n = n.args[0]
    return n


class Signature:
    """A kernel's arguments: tensor pointers, sizes and scalars, each with the wrapper expression
    that fills it. `taken` holds every argument name (no variable may shadow one)."""

    def __init__(self, fixed: list[str]):
        self.taken = set(RESERVED) | set(fixed)
        self.ptrs: list[tuple[str, str]] = []     # (kernel arg, wrapper expr)
        self.sizes: list[tuple[str, str]] = []
        self.scalars: list[tuple[str, str]] = []
        self.leaf_names: dict[tuple, str] = {}    # (expr, layout) -> kernel name (`x` for `x_ptr`)
        self.scalar_names: dict[str, str] = {}    # wrapper expr -> kernel arg name

    def leaf(self, leaf: Leaf, shape_of: str = "") -> str:
        """The leaf's kernel name, registering its pointer (and sizes) on first use. `shape_of`:
        the wrapper variable with the output's full shape (a broadcast's `inner` comes from it)."""
        key = (leaf.expr, leaf.layout)
        if key not in self.leaf_names:
            base = leaf.name
            while {f"{base}_ptr", f"{base}_size", f"{base}_inner"} & self.taken:
                base += "_"
            self.taken |= {f"{base}_ptr", f"{base}_size", f"{base}_inner"}
            self.leaf_names[key] = base
            self.ptrs.append((f"{base}_ptr", leaf.expr))
            if leaf.layout.kind == "bcast":
                self.sizes.append((f"{base}_size", f"{leaf.expr}.numel()"))
                if leaf.layout.trailing:
                    self.sizes.append((f"{base}_inner",
                                       f"{shape_of}.shape[-{leaf.layout.trailing}:].numel()"))
        return self.leaf_names[key]

    def scalar(self, node: Node) -> str:
        expr = node.attrs["expr"]
        if expr not in self.scalar_names:
            self.scalar_names[expr] = unique(node.attrs["name"], self.taken)
            self.scalars.append((self.scalar_names[expr], expr))
        return self.scalar_names[expr]

    def register(self, nodes: list[Node], shape_of: str) -> None:
        """Arguments for every leaf and scalar among `nodes`, in their order."""
        for n in nodes:
            if n.op == "load":
                self.leaf(n.attrs["leaf"], shape_of)
            elif n.op == "arg":
                self.scalar(n)


def load_line(var: str, name: str, leaf: Leaf) -> str:
    lay = leaf.layout
    if lay.kind == "one":
        return f"{var} = tl.load({name}_ptr)"
    if lay.kind == "full":
        index = "offs"
    elif lay.trailing:
        index = f"offs // {name}_inner % {name}_size"
    else:
        index = f"offs % {name}_size"
    return f"{var} = tl.load({name}_ptr + {index}, mask=mask)"


class Block:
    """Prints nodes as lines, naming each value (see the module docstring). `names` maps node
    ids to the variables holding them, across blocks."""

    def __init__(self, sig: Signature, names: dict[int, str] | None = None):
        self.sig = sig
        self.names: dict[int, str] = names if names is not None else {}

    def operand(self, n: Node) -> str:
        n = real(n)
        if n.is_scalar_expr:
            if n.op == "arg":
                return self.sig.scalar(n)
            return render(n, self.operand)
        if n.id not in self.names:
            raise Unsupported(f"internal error: a {n.op} value used before it is computed")
        return self.names[n.id]

    def lines(self, nodes: list[Node], keep: set[int], taken: set[str]) -> list[str]:
        """Lines computing `nodes` (id order); values in `keep` stay live after the block;
        names in `taken` (values kept from earlier blocks) are never reused."""
        nodes = [n for n in nodes if n.op != "squeeze" and not n.is_scalar_expr]
        ids = {n.id for n in nodes}
        uses: dict[int, int] = {}
        for n in nodes:
            for a in {real(a).id for a in n.args}:
                if a in ids:
                    uses[a] = uses.get(a, 0) + 1
        live: dict[str, int] = {}   # variable -> id of the value it holds
        out = []
        blocked = taken | self.sig.taken
        for n in nodes:
            args = list({real(a).id: real(a) for a in n.args}.values())
            dying = [a for a in args if a.id in ids and uses[a.id] == 1 and a.id not in keep]
            free = {self.names[a.id] for a in dying}
            if n.op == "load":
                kname = self.sig.leaf(n.attrs["leaf"])
                cands = [kname]
            else:
                expr = render(n, self.operand)
                cands = ([n.hint] if n.hint else []) + [self.names[a.id] for a in dying]
            name = next((c for c in cands if c not in blocked and (c not in live or c in free)), None)
            if name is None:
                name = unique("t", blocked | set(live))
            out.append(load_line(name, kname, n.attrs["leaf"]) if n.op == "load" else f"{name} = {expr}")
            for a in args:
                if a.id in ids:
                    uses[a.id] -= 1
                    if uses[a.id] == 0 and a.id not in keep and live.get(self.names[a.id]) == a.id:
                        del live[self.names[a.id]]
            live[name] = n.id
            self.names[n.id] = name
        return out


def cone(targets: list[Node], done: set[int]) -> list[Node]:
    """The nodes still to compute for `targets` (themselves included), in id order: not
    crossing values already computed (`done`) or printed inline (scalar expressions)."""
    seen: dict[int, Node] = {}
    stack = [real(t) for t in targets]
    while stack:
        n = real(stack.pop())
        if n.id in seen or n.id in done or n.is_scalar_expr:
            continue
        seen[n.id] = n
        stack.extend(n.args)
    return sorted(seen.values(), key=lambda n: n.id)


def kernel_def(name: str, sig: Signature, fixed_sizes: list[str], constexprs: list[str]) -> str:
    params = [p for p, _ in sig.ptrs] + ["out_ptr"] + fixed_sizes + [p for p, _ in sig.sizes] + \
        [p for p, _ in sig.scalars] + [f"{c}: tl.constexpr" for c in constexprs]
    return f"@triton.jit\ndef {name}({', '.join(params)}):"


def launch(name: str, grid: str, sig: Signature, out: str, fixed_sizes: list[str],
           constexprs: list[str]) -> str:
    args = [e for _, e in sig.ptrs] + [out] + fixed_sizes + [e for _, e in sig.sizes] + \
        [e for _, e in sig.scalars] + constexprs
    return f"{name}[{grid}]({', '.join(args)})"


# ---------------------------------------------------------------------- the file around the kernel
def _segment(info: ModuleInfo, node: ast.AST) -> str:
    return ast.get_source_segment(info.source, node) or ast.unparse(node)


def init_lines(info: ModuleInfo, keep_attrs: set[str]) -> tuple[str, list[str]]:
    """ModelNew.__init__'s signature and body: the reference's own statements for parameters,
    buffers, layers with weights and the attributes the new forward reads."""
    if info.init is None:
        return "self", []
    a = info.init.args
    defaults = [None] * (len(a.args) - len(a.defaults)) + list(a.defaults)
    params = []
    for p, d in zip(a.args, defaults):
        text = _segment(info, p)
        if d is not None:
            text += (" = " if p.annotation is not None else "=") + _segment(info, d)
        params.append(text)
    wanted = {a.name for a in info.attrs.values() if a.kind in ("param", "buffer") or a.name in keep_attrs
              or a.kind == "layer" and a.cls in ("Linear", "LayerNorm", "RMSNorm")}
    while True:  # and every attribute a kept statement reads (`nn.ELU(alpha=self.alpha)`)
        more = {n.attr for a in info.attrs.values() if a.name in wanted for n in ast.walk(a.stmt)
                if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
                and n.attr in info.attrs} - wanted
        if not more:
            break
        wanted |= more
    kept = {id(a.stmt) for a in info.attrs.values() if a.name in wanted} | {id(s) for s in info.init_locals}
    body = [_segment(info, stmt) for stmt in info.init.body if id(stmt) in kept]
    return ", ".join(params), body


def needed_globals(info: ModuleInfo, sig: str, body: list[str]) -> list[str]:
    """Module statements the copied __init__ needs: imports beyond the header, and constants
    (a constructor argument shadows a global of its name in the body, not in the defaults)."""
    fn = ast.parse(f"def f({sig}): pass").body[0]
    names = {n.id for d in fn.args.defaults for n in ast.walk(d) if isinstance(n, ast.Name)}
    names |= {n.id for n in ast.walk(fn.args) if isinstance(n, ast.Name)}  # annotations
    for t in body:
        names |= {n.id for n in ast.walk(ast.parse(t)) if isinstance(n, ast.Name)} - set(info.init_args)
    wanted, order = set(), []
    stack = sorted(names)
    while stack:
        name = stack.pop()
        if name in wanted or name not in info.global_stmts:
            continue
        wanted.add(name)
        stmt = info.global_stmts[name]
        stack.extend(n.id for n in ast.walk(stmt.value) if isinstance(n, ast.Name))
    imports = []
    for imp in info.imports:
        bound = {(a.asname or a.name.split(".")[0]) for a in imp.names}
        if bound & names - HEADER_NAMES:
            imports.append(_segment(info, imp))
    consts = [_segment(info, s) for s in info.tree.body if any(info.global_stmts.get(w) is s for w in wanted)]
    return imports + consts


def module_text(info: ModuleInfo, kernel: list[str], keep_attrs: set[str], forward: list[str]) -> str:
    sig, body = init_lines(info, keep_attrs)
    fwd = info.forward.args
    defaults = [None] * (len(fwd.args) - len(fwd.defaults)) + list(fwd.defaults)
    fparams = ", ".join(p.arg + ("" if d is None else "=" + _segment(info, d))
                        for p, d in zip(fwd.args, defaults))
    extra = needed_globals(info, sig, body)
    init = "\n".join(["    def __init__(" + sig + "):", "        super().__init__()"]
                     + ["        " + line for b in body for line in b.splitlines()])
    parts = [(HEADER + "".join(e + "\n" for e in extra)).rstrip("\n"), "\n".join(kernel),
             "class ModelNew(nn.Module):\n" + init + "\n\n    def forward(" + fparams + "):\n"
             + "\n".join("        " + line for line in forward)]
    return "\n\n\n".join(parts) + "\n"


def input_prep(leaves: list[Leaf]) -> list[str]:
    """`x = x.contiguous()` for each forward input the kernel reads (flat offsets need it)."""
    return [f"{lf.expr} = {lf.expr}.contiguous()" for lf in leaves if lf.is_input]

