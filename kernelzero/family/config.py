"""What the family generator draws (`FamilyConfig`) and what it gives back (`FamilyModule`)."""
from __future__ import annotations

from dataclasses import dataclass, field, fields

from kernelzero.family.ops import ELEMENTWISE

KINDS = ("elementwise", "rowwise", "matmul")
PLACEMENTS = ("inline", "attr", "global", "arg")


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
    p_matmul_inputs: chance a matmul module multiplies two forward inputs (`torch.matmul(A, B)`,
        `A @ B.T`, `torch.mm(A, B)`, as KernelBench's Level 1 matmuls do) instead of its input by
        a weight it owns. Drawn from a stream of its own too, so the other modules stay as they were.
    p_middle_dim: chance a reduction of a 3-D input reduces its middle dim (`x.sum(dim=1)`).
    p_dim_arg: chance a reduction's or softmax's dim is a constructor argument (`self.dim = dim`,
        `get_init_inputs` returning it), as in KernelBench's reduction problems. Both drawn from a
        stream of their own.
    p_ctor_defaults: chance the constructor's trailing literal parameters carry their values as
        defaults (`eps: float = 1e-5`) and `get_init_inputs` passes only some of them (`[]`).
    p_kb_docstrings: chance of KernelBench's docstrings (class, `__init__` and `forward`, with
        Args/Returns sections). Both drawn from a stream of their own (family/signature.py); both
        0 by default until a Coder trained on them ships, since the held-out sets are drawn with
        the defaults and turning them on changes every held-out figure (data: 0.3 each, through
        `bench/family_data.py --family p_ctor_defaults=0.3 --family p_kb_docstrings=0.3`).
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
    p_matmul_inputs: float = 0.35
    p_middle_dim: float = 0.3
    p_dim_arg: float = 0.25
    p_ctor_defaults: float = 0.0
    p_kb_docstrings: float = 0.0

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
        for f in fields(self):
            v = getattr(self, f.name)
            if f.name.startswith("p_") and (isinstance(v, bool) or not isinstance(v, (int, float))
                                            or not 0 <= v <= 1):
                raise ValueError(f"FamilyConfig.{f.name}={v!r}: a probability, a number in [0, 1]")
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
