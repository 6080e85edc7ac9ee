"""The teacher: a compiler from a family module's text to a verified-ready Triton `ModelNew`.

    from kernelzero.teacher import compile_module
    result = compile_module(source)      # TeacherResult: kernel_source, or a one-line reason

Modules: reader (module text -> constants, parameters, layers, input hints), lower (forward ->
dataflow graph; with values, calls (every spelling of an op) and reductions (norms, softmaxes,
matmuls)), ir (the graph and the ops' Triton forms), emit (names, ModelNew), elementwise /
rowwise / matmul (the three kernels), compiler (the entry point).
"""
from kernelzero.teacher.compiler import TeacherResult, compile_module

__all__ = ["TeacherResult", "compile_module"]
