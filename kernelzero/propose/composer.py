"""Programmatic composer: an API set -> a valid KernelBench-format reference module.

Steps: (1) choose an order of the operators and the rank of the first input: producers (GEMM,
convolution, attention) first, then normalisation, activation and elementwise epilogues, pooling,
softmax/cumulative, reductions and losses last; orders that are known to give degenerate outputs
(softmax then sum, a centring norm then mean, ReLU then min, ...) are excluded, rank changes use
glue (`flatten`/`unflatten`) and raising a rank costs more than lowering it. (2) draw the first
input's dims and every operator's parameters from the catalog's ranges. (3) choose the batch size
from the roofline cost model so the module's estimated eager runtime hits a target drawn from the
target machine's range (`Target.target_ms`), within its memory cap and per-tensor size cap;
redraw dims if no batch size fits. Binary elementwise operators take a learned parameter, a new
input, a scalar, or (sometimes) an earlier tensor of the same shape: a residual, making a small DAG.

Not covered: checking the result by running it (validate.py); that is the only proof of validity.
The estimate is a sizing aid; the evaluator measures the real runtime on the device.
"""
from __future__ import annotations

import itertools
import math
import random
from dataclasses import dataclass, field

from kernelzero.catalog.cost import Target, estimate_ms, get_target
from kernelzero.catalog.specs import OpSpec, get_spec
from kernelzero.propose.builder import Builder, ComposeError
from kernelzero.propose.emit import EMITTERS
from kernelzero.propose.render import render

STAGE = {"attention": 0, "gemm": 0, "conv": 0, "norm": 1, "activation": 2, "elementwise": 2,
         "pool": 3, "cumulative": 4, "softmax": 4, "reduction": 5, "loss": 6}
_CENTRING = {"layer_norm", "group_norm", "instance_norm2d"}
_NONNEG_FLOOR = {"relu", "relu6", "hardtanh", "hardsigmoid", "clamp", "abs", "square"}
_UPPER_CAP = {"relu6", "hardtanh", "hardsigmoid", "clamp", "sigmoid", "tanh", "softsign"}
_UNIT_RANGE = {"sigmoid", "hardsigmoid", "softmax", "tanh", "softsign", "hardtanh"}
# (a, b): `a` directly followed by `b` gives an (almost) constant or zero output.
FORBIDDEN = ({(a, b) for a in _CENTRING for b in ("sum", "mean")}
             | {("softmax", "sum"), ("log_softmax", "logsumexp"), ("softmax", "logsumexp")}
             | {(a, b) for a in _NONNEG_FLOOR for b in ("amin", "argmin")}
             | {(a, b) for a in _UPPER_CAP for b in ("amax", "argmax")}
             | {(a, "cumprod") for a in _UNIT_RANGE})

# Largest number of elements a scalar loss may reduce: the mean of more values is so predictable
# that a stored constant would pass at fp32 tolerance (the audit's `seed_independent`).
LOSS_NUMEL_CAP = {"gpu": 2**22, "cpu": 2**12}

# First-input dims: (constant name, choices) per rank, for GPU- and CPU-sized targets.
PROFILES = {
    "gpu": {2: [("features", (512, 1024, 2048, 4096, 8192))],
            3: [("channels", (16, 32, 64)), ("length", (256, 512, 1024, 4096))],
            4: [("channels", (3, 16, 32, 64)), ("height", (32, 64, 128)), ("width", "height")],
            5: [("channels", (3, 8, 16)), ("depth", (8, 16, 32)), ("height", (16, 32, 64)),
                ("width", "height")],
            "attention": [("num_heads", (8, 16)), ("seq_len", (256, 512, 1024)),
                          ("head_dim", (64, 128))],
            "bmm": [("m", (128, 256, 512)), ("k", (128, 256, 512))]},
    "cpu": {2: [("features", (64, 128, 256, 512))],
            3: [("channels", (4, 8, 16)), ("length", (32, 64, 128))],
            4: [("channels", (3, 4, 8)), ("height", (8, 12, 16, 24)), ("width", "height")],
            5: [("channels", (3, 4)), ("depth", (4, 6, 8)), ("height", (6, 8, 12)),
                ("width", "height")],
            "attention": [("num_heads", (2, 4)), ("seq_len", (16, 32, 64)), ("head_dim", (16, 32))],
            "bmm": [("m", (16, 32, 64)), ("k", (16, 32, 64))]},
}


@dataclass
class ComposeConfig:
    """How the composer sizes modules.

    target: machine model from kernelzero.catalog.cost.TARGETS (`h100`, `h200`, `cpu`).
    target_ms: estimated eager runtime to aim for; None draws one log-uniformly from the target's
        range for every module.
    band: accept a size whose estimate is within [target_ms / band, target_ms * band].
    memory_cap_bytes: cap on estimated peak memory; None uses the target's cap.
    max_batch: largest batch size the composer will choose.
    tries: redraws of dims and parameters before giving up on an API set.
    """

    target: str = "h100"
    target_ms: float | None = None
    band: float = 3.0
    memory_cap_bytes: float | None = None
    max_batch: int = 1 << 20
    tries: int = 12

    def __post_init__(self) -> None:
        get_target(self.target)  # raises with the list of targets
        if self.target_ms is not None and self.target_ms <= 0:
            raise ValueError("ComposeConfig.target_ms must be positive (or None)")
        if self.band < 1:
            raise ValueError("ComposeConfig.band must be >= 1")
        if self.max_batch < 2 or self.tries < 1:
            raise ValueError("ComposeConfig needs max_batch >= 2 and tries >= 1")


@dataclass
class Composed:
    """A composed module and how it was made (everything JSON-ready except `source`)."""

    source: str
    apis: list[str]
    order: list[str]
    target: str
    target_ms: float
    est_ms: float
    est_flops: float
    est_bytes: float
    peak_bytes: float
    batch_size: int
    meta: dict = field(default_factory=dict)

    def manifest(self) -> dict:
        return {"apis": self.apis, "order": self.order, "target": self.target,
                "target_ms": round(self.target_ms, 4), "est_ms": round(self.est_ms, 4),
                "est_gflop": self.est_flops / 1e9, "est_mbytes": self.est_bytes / 1e6,
                "peak_mbytes": self.peak_bytes / 1e6, "batch_size": self.batch_size, **self.meta}


def _out_rank(spec: OpSpec, r: int) -> int:
    if spec.family == "loss" and spec.terminal:
        return 0
    if spec.name == "cosine_similarity":
        return r - 1
    return r  # reductions keep the dim when a later operator needs the rank


def order_score(order: list[OpSpec], start_rank: int) -> float:
    """Lower is better; math.inf when the order cannot make a module."""
    score, r = 0.0, start_rank
    for i, spec in enumerate(order):
        if r < 2:
            return math.inf
        if spec.terminal and i != len(order) - 1:
            return math.inf
        if i and (order[i - 1].name, spec.name) in FORBIDDEN:
            return math.inf
        if r not in spec.ranks:
            score += 1 if any(q < r for q in spec.ranks) else 6
            r = max([q for q in spec.ranks if q < r], default=min(spec.ranks))
        r = _out_rank(spec, r)
        score += 4 * sum(STAGE[o.family] > STAGE[spec.family] for o in order[:i])
    return score


def choose_order(apis: list[str], rng: random.Random) -> tuple[list[OpSpec], int]:
    """The best-scoring (order, first-input rank), ties broken at random."""
    specs = [get_spec(a) for a in apis]
    best, best_score = None, math.inf
    for perm in itertools.permutations(specs):
        need = max(min(s.ranks) for s in perm)
        starts = [r for r in perm[0].ranks if r >= min(need, max(perm[0].ranks))] or list(perm[0].ranks)
        for r in starts:
            s = order_score(list(perm), r) + rng.random() * 2.5
            if s < best_score:
                best, best_score = (list(perm), r), s
    if best is None:
        raise ComposeError(f"no order of {apis} makes a valid chain")
    return best


def fixed_order(names: list[str]) -> tuple[list[OpSpec], int]:
    """The given order with its best first-input rank; ComposeError when it cannot work."""
    specs = [get_spec(a) for a in names]
    scored = [(order_score(specs, r), -r, r) for r in specs[0].ranks]
    score, _, rank = min(scored)
    if score == math.inf:
        raise ComposeError(f"the order {names} cannot make a valid chain")
    return specs, rank


class Composer:
    """Turns API sets into modules; `compose(apis, rng)` raises ComposeError when it cannot."""

    def __init__(self, config: ComposeConfig | None = None):
        self.config = config or ComposeConfig()
        self.target: Target = get_target(self.config.target)
        self.scale = "cpu" if self.target.name == "cpu" else "gpu"

    def compose(self, apis: list[str], rng: random.Random, order: list[str] | None = None) -> Composed:
        """A module using exactly `apis`; `order` fixes the chain order instead of choosing it. Long on
        purpose: the sizes, memory cap and chain are drawn in one pass that reads top to bottom."""
        cfg, tgt = self.config, self.target
        if order is not None:
            if sorted(order) != sorted(apis):
                raise ValueError(f"order {order} is not an ordering of {sorted(apis)}")
            order, rank = fixed_order(order)
        else:
            order, rank = choose_order(sorted(apis), rng)
        lo, hi = tgt.target_ms
        target_ms = cfg.target_ms or math.exp(rng.uniform(math.log(lo), math.log(hi)))
        cap = cfg.memory_cap_bytes or tgt.memory_cap_bytes
        best, best_gap, last_err = None, math.inf, None
        for _ in range(cfg.tries):
            draws: dict = {}
            try:
                profile = self._profile(order[0], rank, rng)
                b2, b4 = self._build(order, profile, 2, draws, rng), self._build(order, profile, 4, draws, rng)
                e2, e4 = estimate_ms(b2.costs, tgt), estimate_ms(b4.costs, tgt)
                slope = max((e4 - e2) / 2, 1e-12)
                n = int(round((target_ms - (e2 - 2 * slope)) / slope))
                mem_slope = max((_peak(b4) - _peak(b2)) / 2, 1.0)
                n_mem = int((cap - (_peak(b2) - 2 * mem_slope)) / mem_slope)
                numel_slope = max((b4.max_numel - b2.max_numel) / 2, 1.0)
                n_numel = int((tgt.max_numel - (b2.max_numel - 2 * numel_slope)) / numel_slope)
                capped = False
                if b2.loss_numel:  # a scalar loss over too many elements is predictable
                    n_loss = int(LOSS_NUMEL_CAP[self.scale] // (b2.loss_numel / 2))
                    capped = n_loss < n
                    n = min(n, n_loss)
                n = max(2, min(n, n_mem, n_numel, cfg.max_batch))
                b = self._build(order, profile, n, draws, rng)
                while n > 2 and (_peak(b) > cap or b.max_numel > tgt.max_numel):
                    # the linear fit misses a batch-independent tensor (a weight) that dominated
                    shrink = min(cap / _peak(b), tgt.max_numel / b.max_numel)
                    n = max(2, min(n - 1, int(n * shrink * 0.95)))
                    b = self._build(order, profile, n, draws, rng)
            except ComposeError as e:
                last_err = e
                continue
            est = estimate_ms(b.costs, tgt)
            if _peak(b) > cap or b.max_numel > tgt.max_numel:
                last_err = ComposeError(f"too large for {tgt.name} even at batch size 2")
                continue
            gap = 0.0 if capped and est < target_ms else abs(math.log(est / target_ms))
            if gap < best_gap:
                best, best_gap = (b, est, n, profile), gap
            if gap <= math.log(cfg.band):
                break
        if best is None or best_gap > math.log(cfg.band):
            raise ComposeError(f"cannot size {apis} for {target_ms:.3g} ms on {tgt.name}: "
                               f"{last_err or 'estimate out of band'}")
        b, est, n, profile = best
        chain = " -> ".join(s.name for s in order)
        header = (f"Composed by KernelZero from the API set {sorted(apis)}: {chain}. Sized for "
                  f"about {target_ms:.3g} ms of eager runtime on {tgt.name} (roofline estimate "
                  f"{est:.3g} ms; not a measurement).")
        b.prog.doc = chain
        source = render(b.prog, header=header)
        flops = sum(c.flops for c in b.costs)
        nbytes = sum(c.bytes for c in b.costs)
        return Composed(source=source, apis=sorted(apis), order=[s.name for s in order],
                        target=tgt.name, target_ms=target_ms, est_ms=est, est_flops=flops,
                        est_bytes=nbytes, peak_bytes=_peak(b), batch_size=n,
                        meta={"profile": dict(profile), "loss_capped": bool(b.loss_numel) and est < target_ms / cfg.band})

    # -- internals --------------------------------------------------------------------------------
    def _profile(self, first: OpSpec, rank: int, rng: random.Random) -> list[tuple[str, int]]:
        table = PROFILES[self.scale]
        key = "attention" if first.family == "attention" else "bmm" if first.name == "bmm" else rank
        dims: list[tuple[str, int]] = []
        for name, choices in table[key]:
            value = dict(dims)[choices] if isinstance(choices, str) else rng.choice(choices)
            dims.append((name, value))
        return dims

    def _build(self, order, profile, n, draws, rng) -> Builder:
        b = Builder(rng=rng, target=self.target, batch=n, draws=draws)
        b.const("batch_size", n)
        names = [b.const(name, v) for name, v in profile]
        b.shape = (n, *(v for _, v in profile))
        b.prog.forward_args.append("x")
        b.prog.input_exprs.append(f"torch.randn({', '.join(['batch_size'] + names)})")
        b.fixed_bytes += 4 * math.prod(b.shape)
        b.max_numel = math.prod(b.shape)
        for i, spec in enumerate(order):
            b.pos = i
            b.adapt_rank(spec.ranks)
            EMITTERS[spec.family](b, spec, order[i + 1] if i + 1 < len(order) else None)
        b.finish_lines()
        b.prog.output = b.var
        return b


def _peak(b: Builder) -> float:
    return b.fixed_bytes + b.peak_live
