"""The row kernel: reductions and norms, one program per BLOCK_I rows of the reduced dims.

The wrapper views the input as (outer, N, inner): N values per row, `inner` apart (1 when the last
dims are reduced; KernelBench's RMSNorm reduces dim 1 of a 4-D tensor, inner = H * W). A program
takes a [BLOCK_I, BLOCK_N] tile: BLOCK_I neighbouring rows (contiguous in memory when inner > 1)
by BLOCK_N of their values. Each reduction level is one loop over the row in BLOCK_N chunks
(softmax: a max pass, a sum pass, then the write pass), so rows of any length work in registers
of a fixed size; values computed before a reduction are recomputed in each pass from the inputs.
Row values (a mean, a 1/std) are computed once after their pass, as [BLOCK_I, 1] columns that
broadcast over the tile.
"""
from __future__ import annotations

from kernelzero.teacher.elementwise import primary_input
from kernelzero.teacher.emit import Block, Signature, cone, input_prep, kernel_def, launch, real, unique
from kernelzero.teacher.ir import ROW, UNIFORM, Node, walk
from kernelzero.teacher.values import DimSpec

TILE = 4096        # values per program tile (BLOCK_I * BLOCK_N)
MAX_BLOCK_I = 64   # rows per program when inner > 1

INIT = {"sum": "tl.zeros([BLOCK_I, 1], dtype=tl.float32)",
        "max": 'tl.full([BLOCK_I, 1], -float("inf"), tl.float32)',
        "min": 'tl.full([BLOCK_I, 1], float("inf"), tl.float32)'}
ACCUMULATE = {
    "sum": "{acc} += tl.sum(tl.where(mask, {v}, 0.0), axis=1, keep_dims=True)",
    "max": '{acc} = tl.maximum({acc}, tl.max(tl.where(mask, {v}, -float("inf")), axis=1, keep_dims=True))',
    "min": '{acc} = tl.minimum({acc}, tl.min(tl.where(mask, {v}, float("inf")), axis=1, keep_dims=True))'}
LOOP = ["for start in range(0, N, BLOCK_N):",
        "    cols = start + tl.arange(0, BLOCK_N)[None, :]",
        "    mask = (rows < inner) & (cols < N)",
        "    offs = base + cols * inner"]


def _depths(reduces: list[Node]) -> dict[int, int]:
    """Pass number of each reduction: one more than the deepest reduction its input needs."""
    depth: dict[int, int] = {}
    for r in reduces:  # id order: a reduction's inputs come first
        above = [depth[n.id] for n in walk(r.args[0]) if n.op == "reduce"]
        depth[r.id] = 1 + max(above, default=0)
    return depth


def emit_rowwise(out: Node, dim: DimSpec, keepdim: bool) -> tuple[list[str], list[str]]:
    nodes = walk(out)
    x = primary_input(nodes)
    sig = Signature(["N", "inner"])
    sig.register(nodes, shape_of=x.expr)
    block = Block(sig)
    kept: set[str] = set()
    done: set[int] = set()
    body = ["# one program per BLOCK_I rows of N values `inner` apart; one loop over the row per pass",
            "rows = tl.program_id(1) * BLOCK_I + tl.arange(0, BLOCK_I)[:, None]",
            "base = tl.program_id(0) * N * inner + rows"]

    def compute(ready: list[Node]) -> None:
        body.extend(block.lines(ready, keep={n.id for n in ready}, taken=kept))
        done.update(n.id for n in ready)
        kept.update(block.names[n.id] for n in ready if n.id in block.names)

    compute([n for n in nodes if n.op == "load" and n.level == UNIFORM])
    reduces = [n for n in nodes if n.op == "reduce"]
    depth = _depths(reduces)
    for level in sorted(set(depth.values())):
        group = [r for r in reduces if depth[r.id] == level]
        what = ", ".join(f"{r.attrs['kind']}" for r in group)
        body.append(f"# pass {level}: row {what}")
        for r in group:
            block.names[r.id] = unique(r.hint or "acc", kept | sig.taken)
            kept.add(block.names[r.id])
            body.append(f"{block.names[r.id]} = {INIT[r.attrs['kind']]}")
        body.extend(LOOP)
        args = [r.args[0] for r in group]
        body.extend("    " + line for line in block.lines(cone(args, done), {real(a).id for a in args}, kept))
        for r in group:
            body.append("    " + ACCUMULATE[r.attrs["kind"]].format(acc=block.names[r.id],
                                                                     v=block.operand(r.args[0])))
        done.update(r.id for r in group)
        ready = []
        for n in nodes:
            if n.level == ROW and n.op not in ("reduce", "squeeze") and n.id not in done and \
                    all(real(a).id in done or real(a).is_scalar_expr for a in n.args):
                ready.append(n)
                done.add(n.id)
        done.difference_update(n.id for n in ready)
        compute(ready)
    if real(out).level == ROW:
        body.append(f"tl.store(out_ptr + tl.program_id(0) * inner + rows, {block.operand(out)}, "
                    "mask=rows < inner)")
    else:
        body.append(f"# pass {len(set(depth.values())) + 1}: write")
        body.extend(LOOP)
        body.extend("    " + line for line in block.lines(cone([out], done), {real(out).id}, kept))
        body.append(f"    tl.store(out_ptr + offs, {block.operand(out)}, mask=mask)")
    kernel = [kernel_def("row_kernel", sig, ["N", "inner"], ["BLOCK_I", "BLOCK_N"])]
    kernel += ["    " + line for line in body]
    return kernel, _forward(nodes, sig, x.expr, dim, out, keepdim)


def _forward(nodes, sig, x: str, dim: DimSpec, out: Node, keepdim: bool) -> list[str]:
    leaves = [n.attrs["leaf"] for n in nodes if n.op == "load"]
    lines = input_prep(leaves)
    if dim.kind == "single":
        lines += [f"d = {dim.expr} % {x}.ndim",
                  f"outer, N, inner = {x}.shape[:d].numel(), {x}.shape[d], {x}.shape[d + 1:].numel()"]
    else:
        lines += [f"d = {x}.ndim - {dim.expr}",
                  f"outer, N, inner = {x}.shape[:d].numel(), {x}.shape[d:].numel(), 1"]
    if real(out).level != ROW:
        lines.append(f"out = torch.empty_like({x})")
    elif dim.kind == "single":
        mid = " + (1,)" if keepdim else ""
        lines.append(f"out = {x}.new_empty({x}.shape[:d]{mid} + {x}.shape[d + 1:])")
    else:
        tail = f" + (1,) * ({x}.ndim - d)" if keepdim else ""
        lines.append(f"out = {x}.new_empty({x}.shape[:d]{tail})")
    lines += [f"BLOCK_I = min(triton.next_power_of_2(inner), {MAX_BLOCK_I})",
              f"BLOCK_N = min(triton.next_power_of_2(N), {TILE} // BLOCK_I)",
              launch("row_kernel", "(outer, triton.cdiv(inner, BLOCK_I))", sig, "out", ["N", "inner"],
                     ["BLOCK_I=BLOCK_I", "BLOCK_N=BLOCK_N"]),
              "return out"]
    return lines
