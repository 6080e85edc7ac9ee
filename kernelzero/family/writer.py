"""`ModuleWriter`: one family module being written (its __init__ and forward lines, inputs,
constants and style), rendered as a KernelBench-format file. The kinds (kinds.py) fill it in."""
from __future__ import annotations

import ast
import random
import re

from kernelzero.family.config import FamilyConfig
from kernelzero.family.ops import BY_NAME, LAYER_ATTR, FamilyOp, draw_constant
from kernelzero.family.shapes import Shapes, draw_shapes
from kernelzero.family.signature import Signature


class ModuleWriter:
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
        self.second_expr: str | None = None  # get_inputs' text for a second input of another shape
        self.operands: random.Random | None = None  # streams of their own (make_module)
        self.axes: random.Random | None = None
        self.signature: random.Random | None = None
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

    # ------------------------------------------------------------------ the file
    def render(self) -> str:
        r, st = self.rng, self.style
        hint, ret = (": torch.Tensor", " -> torch.Tensor") if st["type_hints"] else ("", "")
        args = [self.x] + ([self.second_input] if self.second_input else [])
        sig = Signature.draw(self.signature, self.init_params, self.cfg.p_ctor_defaults,
                             self.cfg.p_kb_docstrings)
        init_sig = ", ".join(["self"] + sig.init_params(self.init_params, st["type_hints"]))
        what = self.ops_text()
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
        if sig.docstrings:
            out += sig.class_doc(what) + [""]
        elif st["docstring"]:
            out += [f'    """{self.describe()}"""', ""]
        out += [f"    def __init__({init_sig}):"]
        if sig.docstrings:
            out += sig.init_doc(self.init_params, self.signature)
        out += [f"        {st['super']}.__init__()"]
        out += [f"        {line}" for line in self.init_lines]
        out += ["", f"    def forward(self, {', '.join(a + hint for a in args)}){ret}:"]
        if sig.docstrings:
            out += sig.forward_doc(what, args)
        elif st["docstring"] and r.random() < 0.5:
            out.append(f"        # {self.describe()}")
        out += [f"        {line}" for line in body]
        inputs = self.shapes.input_expr(st["input_offset"], r, st["sizes"])
        sizes = self.shapes.globals_text(st["sizes"])
        out += ["", ""] + (sizes + ["", ""] if sizes else [])
        exprs = [inputs] * len(args) if self.second_expr is None else [inputs, self.second_expr]
        out += ["def get_inputs():"] + self.inputs_body(exprs) + ["", "",
                "def get_init_inputs():", sig.init_inputs(self.init_params, self.signature), ""]
        return "\n".join(out)

    def inputs_body(self, exprs: list[str]) -> list[str]:
        """get_inputs' body: the inputs in the returned list, or each bound to a local first."""
        if self.names.random() >= self.cfg.p_input_locals:
            return [f"    return [{', '.join(exprs)}]"]
        taken = {n for n, _ in self.shapes.dims} | set(self.shapes.used)
        options = [("x",), ("inp",), ("a",), ("A",)] if len(exprs) == 1 else [("x", "y"), ("a", "b"), ("A", "B"), ("x1", "x2")]
        local = self.names.choice([o for o in options if not taken & set(o)])
        return [f"    {n} = {e}" for n, e in zip(local, exprs)] + [f"    return [{', '.join(local)}]"]

    def ops_text(self) -> str:
        return ", then ".join(o for o, _ in self.steps)

    def describe(self) -> str:
        return f"{self.kind.capitalize()} module: {self.ops_text()}."
