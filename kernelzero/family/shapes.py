"""Sizes of generated modules, for the CPU (Triton interpreter) or an H200.

`cpu`: at most ~16-32K elements per tensor, so judging a module in the interpreter takes tens of
milliseconds; sizes that are not multiples of block sizes (1023, 1025, 257, 17) are common, and
some rows are longer than the row kernel's 4096-wide tile so its chunk loop runs. `gpu`: 4-32M
elements (16-128 MB) per tensor, where a fused kernel's saved memory traffic shows; matmuls of
512-4096.
"""
from __future__ import annotations

import random
from dataclasses import dataclass, field

CPU_FEATURES = (17, 33, 64, 100, 127, 128, 255, 256, 257, 384, 500, 512, 1000, 1023, 1024, 1025, 2047)
CPU_ROW = (1, 2, 7, 16, 31, 64, 100, 255, 256, 257, 511, 1000, 1023, 1025, 2048, 3000, 4097, 5000, 8193)
CPU_MM = (8, 16, 17, 32, 48, 64, 100, 128)
GPU_FEATURES = (1024, 2048, 4095, 4096, 8192)
GPU_ROW = (256, 512, 1000, 1024, 2048, 4096, 8192)
GPU_MM = (512, 1024, 2048, 4096)
CPU_CAP, ROW_CAP_CPU = 16384, 32768
GPU_MIN = 4 << 20  # elements: 16 MB of float32
# Names people give sizes, drawn whatever the module computes. With only each kind's usual names
# (a row reduction's last dim is `dim`, an elementwise module's `features`) the Coder learned "a
# global named dim means a reduction" and wrote row sums for KernelBench's elementwise problems,
# which all say `dim` (docs/learning-results.md).
FIRST_NAMES = ("batch_size", "batch_size", "batch", "n_rows", "M", "num_rows")
MIDDLE_NAMES = ("seq_len", "dim1", "length", "tokens", "channels", "height")
LAST_NAMES = ("features", "dim", "dim", "dim", "hidden_size", "d_model", "num_features", "N", "dim2", "size")
MATMUL_K_NAMES = ("in_features", "K", "dim", "hidden_size", "d_in")
MATMUL_N_NAMES = ("out_features", "N", "d_out", "hidden_dim", "units")


@dataclass
class Shapes:
    """The first input's dims as (global name, size) pairs, plus named sizes modules refer to
    (`features` = the last dim, `channels` = dim 1 of a 4-D input, matmul's `in_features` k and
    `out_features` n). `used` collects the globals the module text refers to."""

    dims: list[tuple[str, int]]
    features: int
    channels: int | None = None
    k: int = 0
    n: int = 0
    used: dict[str, int] = field(default_factory=dict)
    out_name: str = "out_features"  # the global that holds a matmul's n

    @property
    def rank(self) -> int:
        return len(self.dims)

    def ref(self, role: str, value: int) -> str:
        """The global that holds a size (recorded as used)."""
        channels = self.dims[1][0] if self.channels is not None else "channels"
        name = {"features": self.dims[-1][0], "channels": channels, "in_features": self.dims[-1][0],
                "out_features": self.out_name}.get(role, role)
        if name in self.used and self.used[name] != value:
            name = f"{name}_{role}"
        self.used[name] = value
        return name

    def globals_text(self, style: str) -> list[str]:
        names = dict((n, v) for n, v in self.dims) if style == "globals" else {}
        names.update(self.used)
        return [f"{n} = {v}" for n, v in names.items()]

    def input_expr(self, offset: bool, rng: random.Random, style: str) -> str:
        dims = ", ".join(n if style == "globals" else str(v) for n, v in self.dims)
        maker = "torch.randn" if rng.random() < 0.85 else "torch.rand"
        if offset:
            scale = rng.choice(("2.0", "0.5", "3.0", "1.5", "0.1"))
            shift = rng.choice(("0.5", "1.0", "-0.25", "2.0", "-1.0"))
            return f"{maker}({dims}) * {scale} + {shift}"
        return f"{maker}({dims})"

    def operand_expr(self, roles: tuple[str, str], style: str, rng: random.Random) -> str:
        """get_inputs' text for a matmul's second input: a 2-D tensor of the named sizes
        (`in_features` is k, `out_features` n)."""
        sizes = {"in_features": self.k, "out_features": self.n}
        dims = ", ".join(self.ref(r, sizes[r]) if style == "globals" else str(sizes[r]) for r in roles)
        return f"{rng.choice(('torch.randn', 'torch.randn', 'torch.rand'))}({dims})"

    def renamed(self, rng: random.Random, kind: str) -> "Shapes":
        """The same sizes under names drawn from the common ones, not the kind's usual ones."""
        last_pool = MATMUL_K_NAMES if kind == "matmul" else LAST_NAMES
        pools = [FIRST_NAMES] + [MIDDLE_NAMES] * (self.rank - 2) + [last_pool]
        names: list[str] = []
        for pool in pools:
            names.append(rng.choice([n for n in pool if n not in names and n != "out_features"]))
        out = self.out_name
        if kind == "matmul":
            out = rng.choice([n for n in MATMUL_N_NAMES if n not in names])
        return Shapes(list(zip(names, (v for _, v in self.dims))), self.features, self.channels,
                      self.k, self.n, out_name=out)

    def describe(self) -> dict:
        out = {"input": [v for _, v in self.dims]}
        if self.k:
            out.update(k=self.k, n=self.n)
        return out


def _fit(rng: random.Random, sizes: list[int], cap: int) -> list[int]:
    """Shrink the leading sizes until the product is within cap."""
    total = 1
    for s in sizes:
        total *= s
    while total > cap and sizes[0] > 1:
        sizes[0] = max(1, sizes[0] // 2)
        total = 1
        for s in sizes:
            total *= s
    return sizes


def draw_shapes(rng: random.Random, kind: str, target: str) -> Shapes:
    gpu = target == "gpu"
    if kind == "matmul":
        pick = GPU_MM if gpu else CPU_MM
        k, n = rng.choice(pick), rng.choice(pick)
        if rng.random() < 0.3:
            b = rng.choice((2, 4, 8)) if gpu else rng.randint(1, 3)
            s = rng.choice((256, 512)) if gpu else rng.randint(2, 16)
            dims = [("batch_size", b), ("seq_len", s), ("in_features", k)]
        else:
            m = rng.choice(GPU_MM) if gpu else rng.randint(1, 64)
            dims = [("batch_size", m), ("in_features", k)]
        return Shapes(dims, k, k=k, n=n)
    if kind == "rowwise":
        if gpu:
            if rng.random() < 0.15:
                n = rng.choice((65536, 131072, 262144))
                rows = max(rng.choice((16, 32, 64)), GPU_MIN // n)
            else:
                n = rng.choice(GPU_ROW)
                rows = max(1024, (8 << 20) // n)
            return Shapes([("batch_size", rows), ("dim", n)], n)
        n = rng.choice(CPU_ROW)
        if rng.random() < 0.25:
            b, s = _fit(rng, [rng.randint(1, 4), rng.randint(2, 8)], max(1, ROW_CAP_CPU // n))
            return Shapes([("batch_size", b), ("seq_len", s), ("dim", n)], n)
        rows = _fit(rng, [rng.randint(1, 32)], max(1, ROW_CAP_CPU // n))[0]
        return Shapes([("batch_size", rows), ("dim", n)], n)
    rank = rng.choice((2, 2, 2, 3, 4, 4))
    if rank == 4:
        if gpu:
            c, h = rng.choice((32, 64, 128)), rng.choice((64, 96, 128))
            b = max(1, (8 << 20) // (c * h * h))
            sizes = [b, c, h, h]
        else:
            sizes = _fit(rng, [rng.randint(1, 4), rng.randint(2, 16), rng.randint(3, 17), rng.randint(3, 17)], CPU_CAP)
        names = ("batch_size", "channels", "height", "width")
        return Shapes(list(zip(names, sizes)), sizes[-1], channels=sizes[1])
    f = rng.choice(GPU_FEATURES if gpu else CPU_FEATURES)
    if rank == 3:
        if gpu:
            s = rng.choice((256, 512))
            sizes = [max(rng.choice((8, 16, 32)), -(-GPU_MIN // (s * f))), s, f]
        else:
            sizes = _fit(rng, [rng.randint(1, 4), rng.randint(2, 16), f], CPU_CAP)
        return Shapes(list(zip(("batch_size", "seq_len", "features"), sizes)), f)
    b = max(rng.choice((1024, 2048, 4096)), -(-GPU_MIN // f)) if gpu else \
        _fit(rng, [rng.randint(1, 16)], max(1, CPU_CAP // f))[0]
    return Shapes([("batch_size", b), ("features", f)], f)
