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

import random

from kernelzero.family.kinds import elementwise, matmul, rowwise
from kernelzero.family.config import KINDS, PLACEMENTS, FamilyConfig, FamilyModule
from kernelzero.family.writer import ModuleWriter

__all__ = ["KINDS", "PLACEMENTS", "FamilyConfig", "FamilyModule", "ModuleWriter", "generate", "make_module"]


def generate(cfg: FamilyConfig, n: int, seed: int = 0, start: int = 0) -> list[FamilyModule]:
    """Modules `start .. start + n - 1` of the stream that `seed` and `cfg` define."""
    return [make_module(cfg, seed, i) for i in range(start, start + n)]


def make_module(cfg: FamilyConfig, seed: int, index: int) -> FamilyModule:
    rng = random.Random(f"kernelzero-family/{seed}/{index}")
    names = random.Random(f"kernelzero-family/{seed}/{index}/names")
    kind = rng.choice(cfg.kinds)
    w = ModuleWriter(rng, cfg, kind, names)
    w.operands = random.Random(f"kernelzero-family/{seed}/{index}/operands")
    w.axes = random.Random(f"kernelzero-family/{seed}/{index}/axes")
    w.signature = random.Random(f"kernelzero-family/{seed}/{index}/signature")
    {"elementwise": elementwise, "rowwise": rowwise, "matmul": matmul}[kind](w)
    source = w.render()
    ops = [o for o, _ in w.steps]
    meta = {"kind": kind, "ops": ops, "chain_length": len(ops), "has_constants": bool(w.constants),
            "constants": w.constants, "placements": w.placements,
            "phrasings": [p for _, p in w.steps], "style": w.style, "shapes": w.shapes.describe(),
            "target": cfg.target, "seed": seed, "index": index}
    name = kind.capitalize() + "_" + "_".join(o.title().replace("_", "") for o in ops)
    return FamilyModule(name=name, source=source, meta=meta)
