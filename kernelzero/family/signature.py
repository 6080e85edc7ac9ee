"""KernelBench's way of writing a module's constructor and docstrings, for the family writer.

KernelBench's Level 1 gives constructor parameters defaults (`def __init__(self, dim: int = 1)`)
and often passes fewer values than parameters (`get_init_inputs` returns `[]`, so `dim` is 1), and
writes docstrings with `Args:` and `Returns:` sections in `__init__` and `forward`. A Coder that
never saw these forms wrote `ModelNew.__init__` with other parameters than the problem's (4 of the
shipped Coder's 10 misses on KernelBench Level 1's family problems). `Signature` draws both forms
from a stream of its own, so a module that does not take them is written as before.
"""
from __future__ import annotations

import ast
import random
from dataclasses import dataclass

PARAM_PHRASES = ("Value used by the forward pass.", "Parameter of the operation.",
                 "Set once, when the model is built.")


def is_literal(text: str) -> bool:
    """Whether `text` is a plain number (a default that needs no name defined before the class)."""
    node = ast.parse(text, mode="eval").body
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        node = node.operand
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float))


@dataclass
class Signature:
    """How one module writes its constructor and docstrings.

    defaults: how many trailing parameters carry their value as a default (only literal values:
        a size named by a global defined after the class cannot be a default).
    passed: how many values `get_init_inputs` returns (the rest take their defaults).
    docstrings: KernelBench's docstrings (class, `__init__` and `forward`, with Args/Returns).
    """

    defaults: int = 0
    passed: int = 0
    docstrings: bool = False

    @classmethod
    def draw(cls, rng: random.Random | None, params: list[tuple[str, str, str]], p_defaults: float,
             p_docstrings: float) -> "Signature":
        """params: (name, value text, type) of each constructor parameter, in order."""
        if rng is None:
            return cls(passed=len(params))
        with_defaults, docstrings = rng.random() < p_defaults, rng.random() < p_docstrings
        trailing = 0
        for _, text, _ in reversed(params):
            if not is_literal(text):
                break
            trailing += 1
        defaults = trailing if with_defaults else 0
        passed = rng.randint(len(params) - defaults, len(params)) if defaults else len(params)
        return cls(defaults=defaults, passed=passed, docstrings=docstrings)

    def init_params(self, params: list[tuple[str, str, str]], type_hints: bool) -> list[str]:
        """The constructor's parameters as written after `self`."""
        out = []
        for i, (name, text, typ) in enumerate(params):
            head = f"{name}: {typ}" if type_hints else name
            if i >= len(params) - self.defaults:
                head += f" = {text}" if type_hints else f"={text}"
            out.append(head)
        return out

    def init_inputs(self, params: list[tuple[str, str, str]], rng: random.Random | None) -> str:
        """get_init_inputs' return line (KernelBench comments an empty list)."""
        values = ", ".join(text for _, text, _ in params[:self.passed])
        note = "  # No special initialization inputs needed" if (
            not values and self.docstrings and rng is not None and rng.random() < 0.7) else ""
        return f"    return [{values}]{note}"

    def class_doc(self, description: str) -> list[str]:
        return ['    """', f"    Simple model that performs {description}.", '    """']

    def init_doc(self, params: list[tuple[str, str, str]], rng: random.Random) -> list[str]:
        if not params:
            return []
        out = ['        """', "        Initializes the model.", "", "        Args:"]
        for i, (name, text, typ) in enumerate(params):
            default = i >= len(params) - self.defaults
            out.append(f"            {name} ({typ}{', optional' if default else ''}): "
                       f"{rng.choice(PARAM_PHRASES)}" + (f" Defaults to {text}." if default else ""))
        return out + ['        """']

    def forward_doc(self, description: str, args: list[str]) -> list[str]:
        out = ['        """', f"        Applies {description} to the input.", "", "        Args:"]
        out += [f"            {a} (torch.Tensor): Input tensor." for a in args]
        return out + ["", "        Returns:", "            torch.Tensor: Output tensor.", '        """']
