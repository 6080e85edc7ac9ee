"""The Builder: one composed module being written, operator by operator (the emitters of
emit.py call it).

A `Builder` accumulates a `Program` (render.py) while the composer walks its operator order: it
holds the chain's current tensor (`x`, with its concrete shape), draws each operator's parameters
from the spec's ranges (the draws are cached per operator position, so a second build at another
batch size makes the same choices), adds constants, layers, parameters and extra inputs, and adds
the roofline `Cost` of every call. Rank changes between operators use glue only (`flatten`,
`unflatten`), never a compute API.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from kernelzero.catalog import cost as C
from kernelzero.catalog.specs import OpSpec
from kernelzero.propose.render import Program

# Smaller choices for CPU-sized modules (the specs' ranges are GPU-sized).
CPU_CHOICES = {"c_out": (4, 8, 16), "n": (16, 32, 64, 128)}


class ComposeError(ValueError):
    """This operator order or these shapes cannot make a valid module."""


@dataclass
class Builder:
    rng: random.Random
    target: C.Target
    batch: int
    draws: dict = field(default_factory=dict)
    prog: Program = field(default_factory=Program)
    shape: tuple = ()
    var: str = "x"
    costs: list = field(default_factory=list)
    fixed_bytes: float = 0.0     # inputs and weights, alive for the whole call
    peak_live: float = 0.0       # largest (input + output) of one call
    max_numel: int = 0
    history: list = field(default_factory=list)  # (line index, shape) where a tensor was made
    saved: dict = field(default_factory=dict)    # line index -> name it was saved under
    pos: int = 0                                 # position of the operator being emitted
    names: dict = field(default_factory=dict)
    loss_numel: int = 0          # elements a scalar loss reduces (0: no scalar loss)

    # -- drawing --------------------------------------------------------------------------------
    def draw(self, key: str, choices):
        k = (self.pos, key)
        if k not in self.draws:
            if self.target.name == "cpu" and key in CPU_CHOICES:
                choices = CPU_CHOICES[key]
            self.draws[k] = choices[self.rng.randrange(len(choices))]
        return self.draws[k]

    # -- program pieces -------------------------------------------------------------------------
    def fresh(self, base: str) -> str:
        n = self.names.get(base, 0)
        self.names[base] = n + 1
        return base if n == 0 else f"{base}{n + 1}"

    def const(self, base: str, value, init: bool = False) -> str:
        name = self.fresh(base)
        self.prog.consts[name] = value
        if init:
            self.prog.init_args.append(name)
        return name

    def layer(self, base: str, expr: str) -> str:
        attr = self.fresh(base)
        self.prog.init_lines.append(f"self.{attr} = {expr}")
        return f"self.{attr}"

    def parameter(self, base: str, shape: tuple, init: str = "randn") -> str:
        shape_name = self.const(f"{base}_shape", tuple(shape), init=True)
        expr = {"randn": f"torch.randn({shape_name}) * 0.5",
                "positive": f"torch.rand({shape_name}) + 0.5"}[init]
        self.fixed_bytes += 4 * C.numel(shape)
        return self.layer(base, f"nn.Parameter({expr})")

    def weights(self, n_elems: float) -> None:
        self.fixed_bytes += 4 * n_elems

    def new_input(self, base: str, shape: tuple, maker: str = "torch.randn({dims})",
                  batched: bool = True) -> str:
        name = self.fresh(base)
        self.prog.forward_args.append(name)
        self.prog.input_exprs.append(maker.format(dims=self.dims(shape, batched)))
        self.fixed_bytes += 4 * C.numel(shape)
        self._numel(shape)
        return name

    def dims(self, shape: tuple, batched: bool = True) -> str:
        """Shape as source: `batch_size` for a leading batch dim, literals for the rest."""
        parts = [str(d) for d in shape]
        if batched and shape and shape[0] == self.batch and "batch_size" in self.prog.consts:
            parts[0] = "batch_size"
        return ", ".join(parts) if len(parts) != 1 else parts[0] + ","

    def line(self, expr: str, shape: tuple, spec: OpSpec | None = None, in_shapes=None, p=None) -> None:
        """`x = expr`, recording the new shape and, for an operator call, its cost."""
        if any(d < 1 for d in shape):
            raise ComposeError(f"{spec.name if spec else 'glue'} gives an empty shape {shape}")
        self.prog.forward_lines.append(f"{self.var} = {expr}")
        if spec is not None:
            in_shapes = in_shapes or [self.shape]
            self.costs.append(spec.cost(in_shapes, shape, p or {}))
            live = 4 * (sum(C.numel(s) for s in in_shapes) + C.numel(shape))
            self.peak_live = max(self.peak_live, live)
            self.history.append((len(self.prog.forward_lines) - 1, shape))
        self.shape = shape
        self._numel(shape)

    def _numel(self, shape) -> None:
        self.max_numel = max(self.max_numel, C.numel(shape))

    def skip_with_shape(self, shape: tuple) -> str | None:
        """A name for an earlier tensor of this exact shape (saved after the line that made it)."""
        for idx, s in self.history[:-1]:
            if s == shape:
                if idx not in self.saved:
                    self.saved[idx] = self.fresh("skip")
                self.fixed_bytes += 4 * C.numel(shape)
                return self.saved[idx]
        return None

    def finish_lines(self) -> None:
        """Insert `skip = x` after each line whose result a residual uses."""
        for idx in sorted(self.saved, reverse=True):
            self.prog.forward_lines.insert(idx + 1, f"{self.saved[idx]} = {self.var}")

    # -- rank glue ------------------------------------------------------------------------------
    def adapt_rank(self, ranks: tuple[int, ...]) -> None:
        r = len(self.shape)
        if r in ranks:
            return
        lower = [q for q in ranks if q < r]
        if lower:
            q = max(lower)
            end = r - q + 1
            new = (self.shape[0], C.numel(self.shape[1:end + 1]), *self.shape[end + 1:])
            self.line(f"{self.var}.flatten(1, {end})", new)
            return
        q = min(ranks)
        parts = _split(self.shape[-1], q - r + 1)
        self.line(f"{self.var}.unflatten(-1, {tuple(parts)})", (*self.shape[:-1], *parts))


def _split(n: int, k: int) -> list[int]:
    """n as a product of k factors, first ones small (channels), the rest near-square."""
    parts = []
    for _ in range(k - 1):
        remaining = k - len(parts)
        target = max(1, round(n ** (1 / remaining)))
        f = next((d for d in range(target, 0, -1) if n % d == 0), 1)
        parts.append(f)
        n //= f
    return parts + [n]
