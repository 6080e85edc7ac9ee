"""The elementwise kernel: one program per BLOCK elements of the flattened output.

Every input is read at the flat offset (a broadcast parameter at `offs % size`, or
`offs // inner % size` when its shape ends in ones, e.g. a per-channel (C, 1, 1)), the ops run in
registers in forward order, and one store writes the result: one read of each input and one write
in all, where eager PyTorch reads and writes the whole tensor once per op.
"""
from __future__ import annotations

from kernelzero.teacher.emit import Block, Signature, cone, input_prep, kernel_def, launch, real
from kernelzero.teacher.ir import Node, Unsupported, walk

BLOCK = 1024


def primary_input(nodes: list[Node]):
    """The first forward input read at the output's own shape: the output is shaped like it."""
    for n in nodes:
        leaf = n.attrs.get("leaf") if n.op == "load" else None
        if leaf is not None and leaf.is_input and leaf.layout.kind == "full":
            return leaf
    raise Unsupported("unsupported: no tensor input has the output's shape")


def emit_elementwise(out: Node) -> tuple[list[str], list[str]]:
    """(kernel lines, ModelNew.forward lines)."""
    nodes = walk(out)
    x = primary_input(nodes)
    sig = Signature(["n"])
    sig.register(nodes, shape_of=x.expr)
    block = Block(sig)
    body = block.lines(cone([out], set()), keep={real(out).id}, taken=set())
    kernel = [kernel_def("elementwise_kernel", sig, ["n"], ["BLOCK"]),
              "    # one program per BLOCK elements of the flattened output; all ops stay in registers",
              "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)",
              "    mask = offs < n",
              *("    " + line for line in body),
              f"    tl.store(out_ptr + offs, {block.operand(out)}, mask=mask)"]
    leaves = [n.attrs["leaf"] for n in nodes if n.op == "load"]
    forward = input_prep(leaves) + [
        f"out = torch.empty_like({x.expr})",
        "n = out.numel()",
        launch("elementwise_kernel", f"(triton.cdiv(n, {BLOCK}),)", sig, "out", ["n"], [f"BLOCK={BLOCK}"]),
        "return out"]
    return kernel, forward
