"""`compile_module(source)`: a family module's text in, a self-contained Triton `ModelNew` out.

The text is parsed, never run: `reader` finds the constants, parameters and layers, `lower` turns
`forward` into a dataflow graph, and the graph's shape picks the kernel: a matmul (with its
epilogue), row reductions, or a plain elementwise chain, each one fused kernel. A module outside
what the teacher compiles gets a one-line reason instead (`unsupported: torch.cumsum`).
"""
from __future__ import annotations

import ast
from dataclasses import dataclass

from kernelzero.teacher.elementwise import emit_elementwise
from kernelzero.teacher.emit import module_text
from kernelzero.teacher.ir import Unsupported, walk
from kernelzero.teacher.lower import lower
from kernelzero.teacher.values import squeezed
from kernelzero.teacher.matmul import emit_matmul
from kernelzero.teacher.reader import read_module
from kernelzero.teacher.rowwise import emit_rowwise


@dataclass
class TeacherResult:
    """kernel_source: the ModelNew file, or None. reason: why not, in one line (`unsupported:
    ...` for constructs outside the family, `internal error: ...` for a teacher bug).
    kind: which kernel it wrote (`elementwise`, `rowwise`, `matmul`)."""

    kernel_source: str | None = None
    reason: str | None = None
    kind: str | None = None

    @property
    def ok(self) -> bool:
        return self.kernel_source is not None


def compile_module(source: str) -> TeacherResult:
    try:
        return _compile(source)
    except Unsupported as e:
        return TeacherResult(reason=str(e).splitlines()[0])
    except RecursionError:
        return TeacherResult(reason="unsupported: expressions nested too deeply")
    except Exception as e:  # noqa: BLE001 - a teacher bug still gets one line, never a traceback
        return TeacherResult(reason=f"internal error: {type(e).__name__}: {str(e)[:120]}")


def _compile(source: str) -> TeacherResult:
    info = read_module(source)
    out, lo = lower(info)
    if lo.matmuls:
        kind = "matmul"
        kernel, forward = emit_matmul(out, lo.matmuls[0])
    elif any(n.op == "reduce" for n in walk(out)):
        kind = "rowwise"
        kernel, forward = emit_rowwise(out, lo.dim, keepdim=not squeezed(out))
    else:
        kind = "elementwise"
        kernel, forward = emit_elementwise(out)
    keep = set(lo.self_used)
    text = module_text(info, kernel, keep, forward)
    ast.parse(text)  # a teacher bug that writes bad Python is caught here, not by the judge
    return TeacherResult(kernel_source=text, kind=kind)
