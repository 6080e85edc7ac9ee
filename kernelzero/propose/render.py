"""A composed module as data (`Program`) and its KernelBench-format source text.

KernelBench format: imports, shape constants as module globals, `class Model(nn.Module)` whose
`__init__` takes `*get_init_inputs()` and whose `forward` takes `*get_inputs()`, then the two
module-level input makers. Covers rendering only; what goes into a Program is the composer's job.
"""
from __future__ import annotations

from dataclasses import dataclass, field

INDENT = "    "


@dataclass
class Program:
    """Pieces of a reference module.

    consts: module-level constants, name -> Python value, in order of first use.
    init_args: names of constants passed to `__init__` through `get_init_inputs()`, in order.
    init_lines / forward_lines: statements of `__init__` (after `super().__init__()`) and `forward`.
    forward_args: parameter names of `forward`, matching `get_inputs()` item by item.
    input_exprs: the expression that builds each input in `get_inputs()`.
    output: the expression `forward` returns. doc: the class docstring (one line).
    """

    consts: dict[str, object] = field(default_factory=dict)
    init_args: list[str] = field(default_factory=list)
    init_lines: list[str] = field(default_factory=list)
    forward_args: list[str] = field(default_factory=list)
    forward_lines: list[str] = field(default_factory=list)
    input_exprs: list[str] = field(default_factory=list)
    output: str = "x"
    doc: str = ""

    def __post_init__(self) -> None:
        if len(self.forward_args) != len(self.input_exprs):
            raise ValueError("Program: one input expression per forward argument is required")


def render(p: Program, header: str = "") -> str:
    """The KernelBench-format source of a Program (always ends with a newline)."""
    if len(p.forward_args) != len(p.input_exprs):
        raise ValueError("Program: forward_args and input_exprs differ in length")
    out: list[str] = []
    if header:
        out += [f'"""{header}"""', ""]
    out += ["import torch", "import torch.nn as nn", "import torch.nn.functional as F", ""]
    out += [f"{k} = {v!r}" for k, v in p.consts.items()]
    out += ["", "", "class Model(nn.Module):"]
    if p.doc:
        out += [f'{INDENT}"""{p.doc}"""', ""]
    sig = ", ".join(["self"] + p.init_args)
    out += [f"{INDENT}def __init__({sig}):", f"{INDENT * 2}super().__init__()"]
    out += [INDENT * 2 + line for line in p.init_lines]
    out += ["", f"{INDENT}def forward({', '.join(['self'] + p.forward_args)}):"]
    out += [INDENT * 2 + line for line in p.forward_lines]
    out += [f"{INDENT * 2}return {p.output}", "", ""]
    out += ["def get_inputs():", f"{INDENT}return [{', '.join(p.input_exprs)}]", "", ""]
    out += ["def get_init_inputs():", f"{INDENT}return [{', '.join(p.init_args)}]", ""]
    return "\n".join(out)
