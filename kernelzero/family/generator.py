"""Generate modules of the op family, written the many ways people write PyTorch.

    from kernelzero.family import FamilyConfig, generate
    modules = generate(FamilyConfig(kinds=("elementwise",), max_ops=3), n=10_000, seed=0)
    modules[0].source, modules[0].meta        # a KernelBench-format file and what it holds

Each module is drawn from its own seeded stream (`seed/index`), so module i is the same whatever
n is, and the same seed always gives the same modules. Kinds: `elementwise` (a chain of ops, with
constants, a second input, broadcast parameters, residuals), `rowwise` (a reduction, softmax or
norm over a row, with ops before and after) and `matmul` (a linear layer or matmul and an
epilogue). Everything else varies too: functional / method / layer spellings, where constants
live (inline, `self.x`, module globals, constructor arguments), one line per op or nested
expressions, type hints, docstrings, `super()` forms and sizes (not multiples of block sizes).
"""
from __future__ import annotations

import ast
import random
import re
from dataclasses import dataclass, field

from kernelzero.family.ops import BY_NAME, ELEMENTWISE, LAYER_ATTR, MATMUL, ROWWISE, FamilyOp, draw_constant
from kernelzero.family.shapes import Shapes, draw_shapes

KINDS = ("elementwise", "rowwise", "matmul")
PLACEMENTS = ("inline", "attr", "global", "arg")
EPS_TEXTS = ("1e-5", "1e-6", "1e-05", "1e-8", "0.001", "1e-4")


@dataclass
class FamilyConfig:
    """What to generate.

    kinds: which kinds to draw from (equally likely): elementwise, rowwise, matmul.
    min_ops / max_ops: ops per module, the main op (reduction, matmul) included; training sets use
        1-3, the longer-chain held-out set 4-6.
    target: `cpu` (small shapes: judging in the Triton interpreter takes tens of ms) or `gpu`
        (H200-sized: tens of MB per tensor, so a fused kernel visibly beats eager).
    ops: elementwise ops to draw from (names in kernelzero.family.ops); None: all of them.
    p_stepwise: chance a module writes one `x = ...` line per op (else nested expressions).
    placements: where constants may live: `inline` literal, `attr` (`self.scale = 0.37`),
        `global` (a module constant) or `arg` (a constructor argument from get_init_inputs).
    p_type_hints / p_docstring: chance of type hints / docstrings and comments.
    p_input_offset: chance the inputs are drawn as `randn * s + o` instead of `randn`.
    p_common_names: chance the sizes take names drawn from those people use (`dim`, `N`,
        `hidden_size`, ...) instead of the kind's usual ones, so no name gives the kind away.
    p_input_locals: chance get_inputs binds each input to a local first (`x = torch.rand(...)`).
    Both are drawn from a stream of their own: they change names, never what a module computes.
    """

    kinds: tuple[str, ...] = KINDS
    min_ops: int = 1
    max_ops: int = 3
    target: str = "cpu"
    ops: tuple[str, ...] | None = None
    p_stepwise: float = 0.5
    placements: tuple[str, ...] = PLACEMENTS
    p_type_hints: float = 0.4
    p_docstring: float = 0.3
    p_input_offset: float = 0.25
    p_common_names: float = 0.7
    p_input_locals: float = 0.3

    def __post_init__(self) -> None:
        bad = [k for k in self.kinds if k not in KINDS]
        if bad or not self.kinds:
            raise ValueError(f"FamilyConfig.kinds={self.kinds!r}: choose from {KINDS}")
        if not 1 <= self.min_ops <= self.max_ops:
            raise ValueError(f"FamilyConfig needs 1 <= min_ops <= max_ops (got {self.min_ops}, {self.max_ops})")
        if self.target not in ("cpu", "gpu"):
            raise ValueError(f"FamilyConfig.target={self.target!r}: choose cpu or gpu")
        unknown = [o for o in (self.ops or ()) if o not in {op.name for op in ELEMENTWISE}]
        if unknown:
            raise ValueError(f"FamilyConfig.ops: unknown elementwise ops {unknown}")
        if not self.placements or any(p not in PLACEMENTS for p in self.placements):
            raise ValueError(f"FamilyConfig.placements: choose from {PLACEMENTS}")


@dataclass
class FamilyModule:
    """A generated module: `name` (KernelBench-style, without the id), `source`, and `meta`
    (kind, ops in order, chain_length, has_constants, constants, placements, phrasings, style,
    shapes, target, seed, index)."""

    name: str
    source: str
    meta: dict = field(default_factory=dict)


def generate(cfg: FamilyConfig, n: int, seed: int = 0, start: int = 0) -> list[FamilyModule]:
    """Modules `start .. start + n - 1` of the stream that `seed` and `cfg` define."""
    return [make_module(cfg, seed, i) for i in range(start, start + n)]


def make_module(cfg: FamilyConfig, seed: int, index: int) -> FamilyModule:
    rng = random.Random(f"kernelzero-family/{seed}/{index}")
    names = random.Random(f"kernelzero-family/{seed}/{index}/names")
    kind = rng.choice(cfg.kinds)
    w = _Writer(rng, cfg, kind, names)
    {"elementwise": w.elementwise, "rowwise": w.rowwise, "matmul": w.matmul}[kind]()
    source = w.render()
    ops = [o for o, _ in w.steps]
    meta = {"kind": kind, "ops": ops, "chain_length": len(ops), "has_constants": bool(w.constants),
            "constants": w.constants, "placements": w.placements,
            "phrasings": [p for _, p in w.steps], "style": w.style, "shapes": w.shapes.describe(),
            "target": cfg.target, "seed": seed, "index": index}
    name = kind.capitalize() + "_" + "_".join(o.title().replace("_", "") for o in ops)
    return FamilyModule(name=name, source=source, meta=meta)


class _Writer:
    """Builds one module: __init__ lines, forward lines, inputs, constants; renders the file."""

    def __init__(self, rng: random.Random, cfg: FamilyConfig, kind: str, names: random.Random):
        self.rng, self.cfg, self.kind, self.names = rng, cfg, kind, names
        self.shapes: Shapes = draw_shapes(rng, kind, cfg.target)
        if names.random() < cfg.p_common_names:
            self.shapes = self.shapes.renamed(names, kind)
        self.globals: list[str] = []
        self.init_params: list[tuple[str, str, str]] = []   # (name, get_init_inputs text, type)
        self.init_lines: list[str] = []
        self.lines: list[str] = []
        self.taken: set[str] = {"self", "torch", "nn", "F", "math", "mean", "var"}
        self.steps: list[tuple[str, str]] = []
        self.constants: list[str] = []
        self.placements: list[str] = []
        self.second_input: str | None = None
        self.residual: str | None = None
        self.param_role = "features"
        self.style = {"stepwise": rng.random() < cfg.p_stepwise,
                      "type_hints": rng.random() < cfg.p_type_hints,
                      "super": rng.choice(("super()", "super(Model, self)")),
                      "docstring": rng.random() < cfg.p_docstring,
                      "input_offset": rng.random() < cfg.p_input_offset,
                      "functional_import": rng.choice(("import torch.nn.functional as F",
                                                       "from torch.nn import functional as F")),
                      "sizes": rng.choice(("globals", "globals", "literals"))}
        self.x = self.fresh(rng.choice(("x", "x", "x", "input", "inp", "inputs")))
        self.var = self.x if rng.random() < 0.6 else self.fresh(rng.choice(("h", "y", "out", "z")))
        self.cur, self.cur_is_name, self.bounded = self.x, True, False

    # ------------------------------------------------------------------ names, constants, sizes
    def fresh(self, base: str) -> str:
        name, i = base, 2
        while name in self.taken:
            name, i = f"{base}{i}", i + 1
        self.taken.add(name)
        return name

    def constant(self, spec, previous=None, in_layer=False) -> tuple[str, float]:
        """A drawn constant, placed inline, in `self`, as a module global or a constructor
        argument: (the text forward or a layer uses, its value)."""
        value, text = draw_constant(self.rng, spec, previous)
        place = self.rng.choice(self.cfg.placements)
        self.constants.append(text)
        self.placements.append(place)
        if place == "inline":
            return text, value
        if place == "global":
            name = self.fresh(spec.role.upper() if self.rng.random() < 0.7 else spec.role)
            self.globals.append(f"{name} = {text}")
            return name, value
        name = self.fresh(spec.role)
        if place == "arg":
            self.init_params.append((name, text, "float"))
            if in_layer:
                return name, value
            self.init_lines.append(f"self.{name} = {name}")
        else:
            self.init_lines.append(f"self.{name} = {text}")
        return f"self.{name}", value

    def size(self, role: str, value: int) -> str:
        """A size used in __init__: a constructor argument (the usual way), a global or a literal."""
        ref = self.shapes.ref(role, value) if self.style["sizes"] == "globals" else str(value)
        r = self.rng.random()
        if r < 0.6:
            name = self.fresh(role)
            self.init_params.append((name, ref, "int"))
            return name
        return ref if r < 0.8 else str(value)

    # ------------------------------------------------------------------ forward building
    def flush(self) -> str:
        """Bind the current expression to the working variable; returns its name."""
        if not self.cur_is_name:
            self.lines.append(f"{self.var} = {self.cur}")
            self.cur, self.cur_is_name = self.var, True
        return self.cur

    def apply(self, expr: str) -> None:
        if self.style["stepwise"]:
            self.lines.append(f"{self.var} = {expr}")
            self.cur, self.cur_is_name = self.var, True
        else:
            self.cur, self.cur_is_name = expr, False

    def fill(self, template: str, values: dict) -> str:
        """The template with the current expression in it: parenthesised where an operator or a
        method call would otherwise bind to part of it (`(x + b) * 2`, `(x * 2).relu()`)."""
        v = self.cur
        simple = isinstance(ast.parse(v, mode="eval").body, (ast.Name, ast.Call, ast.Attribute, ast.Subscript))
        as_argument_only = "{v}" not in re.sub(r"(?<=[(,] )\{v\}(?=[,)])|(?<=\()\{v\}(?=[,)])", "", template)
        wrapped = v if simple else f"({v})"
        return template.format(v=v if as_argument_only else wrapped, m=wrapped, **values)

    def phrase(self, op: FamilyOp, extra: dict | None = None, allowed=None) -> None:
        """Apply `op` in one of its phrasings (its constants drawn and placed)."""
        at_input = self.cur == self.x and self.cur_is_name
        template = self.rng.choice([p for p in op.phrasings if (allowed is None or allowed(p))
                                    and not (at_input and p.startswith("inplace:"))])
        template = template.removeprefix("inplace:")
        values = dict(extra or {})
        in_layer = template.startswith("layer:")
        prev = None
        for i, spec in enumerate(op.consts):
            values[f"c{i}"], prev = self.constant(spec, prev, in_layer=in_layer)
        label = template
        if template.startswith("name:"):
            self.flush()
            template = template[5:]
        if in_layer:
            ctor = template[6:].format(**values)
            label = "layer:" + ctor.split("(")[0]
            attr = self.fresh(LAYER_ATTR.get(ctor.split("(")[0].split(".")[-1], "layer"))
            self.init_lines.append(f"self.{attr} = {ctor}")
            template = f"self.{attr}({{v}})"
        self.apply(self.fill(template, values))
        self.steps.append((op.name, label))
        self.bounded = op.bounded or (self.bounded and op.name in ("abs", "square"))

    def param(self, role: str) -> str:
        """A broadcast parameter: per-feature (F,) or, on 4-D inputs, per-channel (C, 1, 1)."""
        name = self.fresh(role)
        s = self.shapes
        if s.channels:
            r = self.rng.random()
            if r < 0.25:  # a 1-D parameter viewed for broadcasting
                self.init_lines.append(f"self.{name} = nn.Parameter(torch.randn({self.size('channels', s.channels)}))")
                view = self.rng.choice((".view(1, -1, 1, 1)", "[:, None, None]", ".reshape(-1, 1, 1)",
                                        ".view(-1, 1, 1)"))
                return f"self.{name}{view}"
            if r < 0.45:
                shape = self.fresh(f"{role}_shape")
                self.globals.append(f"{shape} = ({s.channels}, 1, 1)")
                self.init_params.append((shape, shape, "tuple"))
                dims = shape
            else:
                dims = f"{self.size('channels', s.channels)}, 1, 1"
        else:
            dims = self.size(self.param_role, s.features)
        init = self.rng.choice((f"torch.randn({dims})", f"torch.randn({dims}) * 0.1", f"torch.rand({dims})")
                               + ((f"torch.ones({dims})",) if role == "scale" else ()))
        self.init_lines.append(f"self.{name} = nn.Parameter({init})")
        return f"self.{name}"

    def elementwise_op(self, op: FamilyOp) -> None:
        extra = {}
        if op.kind == "input":
            if self.second_input is None:
                self.second_input = self.fresh(self.rng.choice(("y", "other", "gate", "skip")))
            extra["y"] = self.second_input
        elif op.kind == "param":
            extra["p"] = self.param("bias" if op.name == "add_bias" else "scale")
        elif op.kind == "residual":
            extra["r"] = self.residual
        self.phrase(op, extra)

    def pick_ops(self, count: int, pool: list[FamilyOp], kinds: set[str]) -> list[FamilyOp]:
        """`count` ops of the given kinds; no op twice in a row; `exp` only on bounded values."""
        names = set(self.cfg.ops) if self.cfg.ops else None
        pool = [op for op in pool if op.kind in kinds and (names is None or op.name in names)]
        if not pool:
            pool = [BY_NAME["relu"]]
        out, bounded = [], self.bounded
        for _ in range(count):
            ok = [op for op in pool if not op.needs_bounded or bounded] or [BY_NAME["relu"]]
            if out:
                ok = [op for op in ok if op.name != out[-1].name] or ok
            op = self.rng.choice(ok)
            out.append(op)
            bounded = op.bounded or (bounded and op.name in ("abs", "square"))
        return out

    # ------------------------------------------------------------------ the three kinds
    def elementwise(self) -> None:
        count = self.rng.randint(self.cfg.min_ops, self.cfg.max_ops)
        kinds = {"unary", "const", "input", "param"} | ({"residual"} if count > 1 else set())
        ops = self.pick_ops(count, ELEMENTWISE, kinds)
        while ops[0].kind == "residual":
            ops[0] = self.pick_ops(1, ELEMENTWISE, {"unary", "const"})[0]
        residual = any(op.kind == "residual" for op in ops)
        if residual:  # keep the input reachable: an alias, or a working variable other than it
            if self.var == self.x or self.rng.random() < 0.3:
                self.residual = self.fresh(self.rng.choice(("identity", "residual", "shortcut")))
                self.lines.append(f"{self.residual} = {self.x}")
            else:
                self.residual = self.x
        for i, op in enumerate(ops):
            self.elementwise_op(op)
            if i == 0 and residual and self.residual == self.x and self.rng.random() < 0.5:
                self.residual = self.fresh(self.rng.choice(("skip_val", "first", "h0")))
                self.lines.append(f"{self.residual} = {self.cur}")
                self.cur, self.cur_is_name = self.residual, True

    def rowwise(self) -> None:
        count = self.rng.randint(self.cfg.min_ops, self.cfg.max_ops)
        main = self.rng.choice(ROWWISE)
        before = self.rng.randint(0, count - 1)
        for op in self.pick_ops(before, ELEMENTWISE, {"unary", "const", "input", "param"}):
            self.elementwise_op(op)
        s = self.shapes
        if main.kind == "norm":
            self.norm(main)
        else:
            last = self.rng.random() < 0.7 or s.rank != 2
            d = (self.rng.choice(("-1", "-1", str(s.rank - 1)))) if last else "1"
            keep = main.kind == "reduce" and self.rng.random() < 0.5
            kd = self.rng.choice((", keepdim=True", ", True")) if keep else ""
            if main.kind == "reduce" and not keep and self.rng.random() < 0.3:
                kd = ", keepdim=False"
            self.phrase(main, {"d": d, "kd": kd}, allowed=lambda p: kd != ", True" or "dim={d}" not in p)
        kinds = {"unary", "const"} | (set() if main.kind == "reduce" else {"param"})
        for op in self.pick_ops(count - 1 - before, ELEMENTWISE, kinds):
            self.elementwise_op(op)

    def norm(self, op: FamilyOp) -> None:
        """layer_norm / rms_norm over the last dim: an nn layer, the functional form, or by hand."""
        s, r = self.shapes, self.rng
        eps_text = r.choice(EPS_TEXTS)
        form = r.choice(op.phrasings)
        cls = "LayerNorm" if op.name == "layer_norm" else "RMSNorm"
        f = self.size("features", s.features)
        if form.startswith("layer:"):
            eps = "" if r.random() < 0.3 else f", eps={eps_text}"
            attr = self.fresh(r.choice(("norm", "ln" if cls == "LayerNorm" else "rms")))
            self.init_lines.append(f"self.{attr} = nn.{cls}({f}{eps})")
            self.apply(f"self.{attr}({self.cur})")
            self.steps.append((op.name, f"layer:nn.{cls}"))
            if eps:
                self.constants.append(eps_text)
                self.placements.append("layer")
            return
        self.constants.append(eps_text)
        self.placements.append("inline")
        w = self.fresh("weight")
        self.init_lines.append(f"self.{w} = nn.Parameter(torch.{r.choice(('ones', 'randn'))}({f}))")
        b = None
        if op.name == "layer_norm":
            b = self.fresh("bias")
            self.init_lines.append(f"self.{b} = nn.Parameter(torch.{r.choice(('zeros', 'randn'))}({f}))")
        eps = eps_text
        if r.random() < 0.5:
            self.placements[-1] = "arg"
            self.init_params.append(("eps", eps_text, "float"))
            self.init_lines.append("self.eps = eps")
            eps = "self.eps"
        if form.startswith("f"):
            shapes = [f"self.{w}.shape"] + ([f"{self.cur}.shape[-1:]"] if self.cur_is_name else [])
            if not f.isidentifier() or f not in {n for n, _, _ in self.init_params}:
                shapes.append(f"({f},)")
            elif r.random() < 0.3:
                self.init_lines.append(f"self.normalized_shape = ({f},)")
                shapes = ["self.normalized_shape"]
            shape = r.choice(shapes)
            args = f"self.{w}, self.{b}" if b else f"self.{w}"
            fn = "F.layer_norm" if b else "F.rms_norm"
            self.apply(f"{fn}({self.cur}, {shape}, {args}, eps={eps})")
            self.steps.append((op.name, fn))
            return
        v = self.flush()
        if op.name == "rms_norm":
            ms = r.choice((f"{v}.pow(2).mean(-1, keepdim=True)", f"torch.mean({v} ** 2, dim=-1, keepdim=True)"))
            self.apply(f"{v} * torch.rsqrt({ms} + {eps}) * self.{w}")
        else:
            mean, var = self.fresh("mu"), self.fresh("sigma2")
            self.lines.append(f"{mean} = {v}.mean(dim=-1, keepdim=True)")
            self.lines.append(r.choice((f"{var} = (({v} - {mean}) ** 2).mean(dim=-1, keepdim=True)",
                                        f"{var} = {v}.var(dim=-1, keepdim=True, unbiased=False)")))
            self.apply(f"({v} - {mean}) / torch.sqrt({var} + {eps}) * self.{w} + self.{b}")
        self.steps.append((op.name, "hand-written"))

    def matmul(self) -> None:
        s, r = self.shapes, self.rng
        count = r.randint(self.cfg.min_ops, self.cfg.max_ops)
        op = r.choice(MATMUL)
        form = r.choice([p for p in op.phrasings if s.rank == 2 or p not in ("addmm", "mm")])
        bias = op.name == "linear"
        v = self.cur
        k, n = self.size("in_features", s.k), self.size("out_features", s.n)
        if form == "layer:nn.Linear":
            attr = self.fresh(r.choice(("fc", "linear", "proj", "dense")))
            self.init_lines.append(f"self.{attr} = nn.Linear({k}, {n}{'' if bias else ', bias=False'})")
            self.apply(f"self.{attr}({v})")
        else:
            w = self.fresh("weight")
            transposed = form in ("F.linear", "matmul_t")
            scale = r.choice((" * 0.02", " * 0.05", f" / math.sqrt({k})", ""))
            self.init_lines.append(f"self.{w} = nn.Parameter(torch.randn({f'{n}, {k}' if transposed else f'{k}, {n}'}){scale})")
            b = self.fresh("bias") if bias else None
            if b:
                self.init_lines.append(f"self.{b} = nn.Parameter(torch.randn({n}) * 0.1)")
            if form == "F.linear":
                expr = f"F.linear({v}, self.{w}, self.{b})" if b else f"F.linear({v}, self.{w})"
            elif form in ("addmm", "mm"):
                expr = f"torch.addmm(self.{b}, {v}, self.{w})" if b else f"torch.mm({v}, self.{w})"
            else:
                t = r.choice((".t()", ".T")) if transposed else ""
                mm = r.choice((f"{v} @ self.{w}{t}", f"torch.matmul({v}, self.{w}{t})"))
                expr = f"{mm} + self.{b}" if b else mm
            self.apply(expr)
        self.steps.append((op.name, form))
        self.param_role, self.shapes.features = "out_features", s.n
        for ep in self.pick_ops(count - 1, ELEMENTWISE, {"unary", "const", "param"}):
            self.elementwise_op(ep)

    # ------------------------------------------------------------------ the file
    def render(self) -> str:
        r, st = self.rng, self.style
        hint, ret = (": torch.Tensor", " -> torch.Tensor") if st["type_hints"] else ("", "")
        args = [self.x] + ([self.second_input] if self.second_input else [])
        init_sig = ", ".join(["self"] + [f"{n}: {t}" if st["type_hints"] else n for n, _, t in self.init_params])
        body = self.lines + [f"return {self.cur}"]
        code = "\n".join(body + self.init_lines)
        out = ["import torch", "import torch.nn as nn" if r.random() < 0.8 else "from torch import nn"]
        if "F." in code:
            out.append(st["functional_import"])
        if "math." in code:
            out.insert(0, "import math")
        if self.globals:
            out += [""] + self.globals
        out += ["", "", "class Model(nn.Module):"]
        if st["docstring"]:
            out += [f'    """{self.describe()}"""', ""]
        out += [f"    def __init__({init_sig}):", f"        {st['super']}.__init__()"]
        out += [f"        {line}" for line in self.init_lines]
        out += ["", f"    def forward(self, {', '.join(a + hint for a in args)}){ret}:"]
        if st["docstring"] and r.random() < 0.5:
            out.append(f"        # {self.describe()}")
        out += [f"        {line}" for line in body]
        inputs = self.shapes.input_expr(st["input_offset"], r, st["sizes"])
        sizes = self.shapes.globals_text(st["sizes"])
        out += ["", ""] + (sizes + ["", ""] if sizes else [])
        out += ["def get_inputs():"] + self.inputs_body(inputs, len(args)) + ["", "",
                "def get_init_inputs():", f"    return [{', '.join(v for _, v, _ in self.init_params)}]", ""]
        return "\n".join(out)

    def inputs_body(self, expr: str, count: int) -> list[str]:
        """get_inputs' body: the inputs in the returned list, or each bound to a local first."""
        if self.names.random() >= self.cfg.p_input_locals:
            return [f"    return [{', '.join([expr] * count)}]"]
        taken = {n for n, _ in self.shapes.dims} | set(self.shapes.used)
        options = [("x",), ("inp",), ("a",), ("A",)] if count == 1 else [("x", "y"), ("a", "b"), ("A", "B"), ("x1", "x2")]
        local = self.names.choice([o for o in options if not taken & set(o)])
        return [f"    {n} = {expr}" for n in local] + [f"    return [{', '.join(local)}]"]

    def describe(self) -> str:
        return f"{self.kind.capitalize()} module: " + ", then ".join(o for o, _ in self.steps) + "."
