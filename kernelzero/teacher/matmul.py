"""The matmul kernel: one program per (BLOCK_M, BLOCK_N) tile of the output, the epilogue fused.

`acc = a @ b` is accumulated over K in BLOCK_K steps with `tl.dot(..., input_precision="ieee")`:
fp32 `tl.dot` otherwise uses TF32 on the GPU, whose ~1e-3 error fails the evaluator's fp32
tolerance. The epilogue (bias, activation, scale) runs on the accumulator before the one store,
so the output is written once. The left operand is viewed as (M, K) (leading dims flattened);
the right one is read through its strides, so nn.Linear's (N, K) weight needs no transpose copy.
"""
from __future__ import annotations

from kernelzero.teacher.emit import Block, Signature, cone, input_prep, kernel_def, launch, real
from kernelzero.teacher.ir import Layout, Leaf, Node, Unsupported, walk

BLOCK_M, BLOCK_N, BLOCK_K = 64, 64, 32
SIZES = ["M", "N", "K", "stride_bk", "stride_bn"]


def emit_matmul(out: Node, mm: Node) -> tuple[list[str], list[str]]:
    nodes = walk(out)
    a_leaf, b_leaf = (n.attrs["leaf"] for n in mm.args)
    if sum(1 for n in nodes for arg in n.args if arg is mm.args[0]) > 1:
        raise Unsupported("unsupported: the matmul's left operand is also used in the epilogue")
    sig = Signature(SIZES)
    a = sig.leaf(Leaf(a_leaf.name, a_leaf.expr, Layout("full"), True))
    b = sig.leaf(Leaf(b_leaf.name, b_leaf.expr, Layout("full"), b_leaf.is_input))
    sig.register([n for n in nodes if n is not mm.args[0] and n is not mm.args[1]], shape_of="out")
    block = Block(sig, {mm.id: "acc"})
    epilogue = block.lines(cone([out], {mm.id}), {real(out).id}, {"acc"})
    kernel = [kernel_def("matmul_kernel", sig, SIZES, ["BLOCK_M", "BLOCK_N", "BLOCK_K"]),
              "    # one program per (BLOCK_M, BLOCK_N) output tile; acc = a @ b over K, then the epilogue",
              "    rm = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]",
              "    rn = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]",
              "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
              "    for k0 in range(0, K, BLOCK_K):",
              "        rk = k0 + tl.arange(0, BLOCK_K)",
              f"        a = tl.load({a}_ptr + rm * K + rk[None, :], mask=(rm < M) & (rk[None, :] < K), other=0.0)",
              f"        b = tl.load({b}_ptr + rk[:, None] * stride_bk + rn * stride_bn, "
              "mask=(rk[:, None] < K) & (rn < N), other=0.0)",
              '        acc += tl.dot(a, b, input_precision="ieee")  # full fp32, not tf32',
              "    offs = rm * N + rn",
              "    mask = (rm < M) & (rn < N)",
              *("    " + line for line in epilogue),
              f"    tl.store(out_ptr + offs, {block.operand(out)}, mask=mask)"]
    x, w = a_leaf.expr, b_leaf.expr
    trans = mm.attrs["trans"]
    leaves = [a_leaf] + [n.attrs["leaf"] for n in nodes if n.op == "load" and n is not mm.args[0]]
    strides = [f"{w}.stride(1)", f"{w}.stride(0)"] if trans else [f"{w}.stride(0)", f"{w}.stride(1)"]
    forward = input_prep(leaves) + [
        f"N = {w}.shape[{0 if trans else 1}]",
        f"out = {x}.new_empty({x}.shape[:-1] + (N,))",
        f"{x} = {x}.reshape(-1, {x}.shape[-1])",
        f"M, K = {x}.shape",
        launch("matmul_kernel", f"(triton.cdiv(M, {BLOCK_M}), triton.cdiv(N, {BLOCK_N}))", sig, "out",
               ["M", "N", "K", *strides], [f"BLOCK_M={BLOCK_M}", f"BLOCK_N={BLOCK_N}", f"BLOCK_K={BLOCK_K}"]),
        "return out"]
    return kernel, forward
