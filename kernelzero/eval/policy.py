"""Judging policies: what a candidate may do besides running its own kernels.

`strict` (the default for rewards and `kernelzero eval`): `ModelNew.forward` may only do glue in
PyTorch (allocation, views, copies, dtype/device moves, parameter access); compute must happen in
the candidate's own Triton/CUDA kernels. Two checks enforce it:
- a static scan of the source (cheap first filter): inheriting the reference `Model`, calling the
  reference's compute APIs, or a try/except whose handler falls back to PyTorch compute;
- runtime evidence: the worker records every ATen op dispatched during the first forward call
  (including calls made from C++ extensions), and any op outside `GLUE_OPS` is a rejection.

`kernelbench`: KernelBench's rules (torch ops allowed; some custom kernel code must exist).
`none`: no checks at all (for benchmarking the evaluator with the reference as its own candidate).
Every policy but `none` rejects inheriting from `Model`, patching harness modules, and PyTorch
fallbacks in exception handlers.
"""
from __future__ import annotations

import ast

from kernelzero.tasks.task import parse_python

GLUE_OPS = frozenset("""
empty empty_like empty_strided new_empty new_empty_strided zeros zeros_like new_zeros ones ones_like
new_ones full full_like new_full fill_ zero_ arange view _unsafe_view reshape _reshape_alias as_strided
expand expand_as permute transpose t unsqueeze squeeze flatten unflatten slice select narrow split
split_with_sizes chunk unbind contiguous clone copy_ _to_copy to detach alias lift_fresh
lift_fresh_copy view_as resize_ set_ _local_scalar_dense cat stack is_same_size _has_compatible_shallow_copy_type
size stride sym_size sym_stride sym_numel numel dim is_contiguous _copy_from _copy_from_and_resize
record_stream
""".split())

# Compute APIs the static filter looks for (attribute name of a call on torch / F / a tensor).
COMPUTE_CALLS = frozenset("""
matmul mm bmm addmm addbmm baddbmm linear bilinear einsum tensordot conv1d conv2d conv3d
conv_transpose1d conv_transpose2d conv_transpose3d max_pool1d max_pool2d max_pool3d avg_pool1d
avg_pool2d avg_pool3d adaptive_avg_pool1d adaptive_avg_pool2d adaptive_avg_pool3d
adaptive_max_pool2d batch_norm layer_norm group_norm instance_norm rms_norm relu relu_ relu6
leaky_relu gelu silu mish softplus hardtanh hardsigmoid hardswish elu selu celu sigmoid tanh
softmax log_softmax logsumexp sum mean prod amax amin cumsum cumprod argmax argmin
scaled_dot_product_attention mse_loss cross_entropy nll_loss kl_div smooth_l1_loss l1_loss
huber_loss binary_cross_entropy cosine_similarity norm var std exp log sqrt rsqrt clamp
""".split())
TORCH_ROOTS = {"torch", "F", "functional", "nn"}


def forbidden_ops(ops: list[str]) -> list[str]:
    """ATen op names (overload packets, e.g. `aten::mm`) that strict forbids."""
    bad = set()
    for op in ops:
        name = op.split("::")[-1].split(".")[0]
        if name not in GLUE_OPS:
            bad.add(name)
    return sorted(bad)


def static_policy_check(source: str, task_source: str, policy: str) -> tuple[str, list[str]] | None:
    """(reason, flags) when the source is refused before running, else None.

    Every policy but `none`: inheriting or instantiating the reference `Model`; assigning to
    attributes of harness modules (time, torch, sys, gc, ...; `torch.backends` flags excepted);
    PyTorch compute inside an exception handler (a fallback that hides a failing kernel).
    `kernelbench` also needs a custom kernel in the source; `strict` forbids PyTorch compute.
    """
    if policy == "none":
        return None
    try:
        tree = parse_python(source)
    except SyntaxError:
        return None  # reported as compile_error elsewhere
    cls = next((n for n in ast.walk(tree) if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    if cls is not None:
        for base in cls.bases:
            if isinstance(base, ast.Name) and base.id == "Model" or \
                    isinstance(base, ast.Attribute) and base.attr == "Model":
                return "ModelNew inherits from the reference `Model`", ["passthrough_inherit"]
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "Model":
            return "the candidate instantiates the reference `Model`", ["passthrough_reference"]
    patched = _harness_tampering(tree)
    if patched:
        return (f"the candidate patches `{patched}`: code under judgement may not change the "
                "harness's modules", ["harness_tampering"])
    module_names = _module_level_names(tree)
    jit_funcs = {id(f) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                 and any(_is_triton_jit(d) for d in f.decorator_list)}
    calls = []
    for fn in ast.walk(tree):
        if isinstance(fn, ast.FunctionDef) and id(fn) not in jit_funcs:
            calls += [(fn, c) for c in ast.walk(fn) if isinstance(c, ast.Call)]
    compute = []
    for fn, call in calls:
        name = _compute_call(call, module_names)
        if name:
            in_handler = any(isinstance(t, ast.Try) and any(call in ast.walk(h) for h in t.handlers)
                             for t in ast.walk(fn))
            if in_handler:
                return (f"a PyTorch fallback (`{name}`) in an exception handler: the kernel's "
                        "failure would be hidden", ["passthrough_fallback"])
            compute.append(name)
    if policy == "kernelbench":
        from kernelzero.tasks.task import detect_backend
        if detect_backend(source) == "none":
            return ("kernelbench policy: the candidate contains no custom kernel (a Triton "
                    "`@triton.jit` function or CUDA code through load_inline)", ["no_custom_kernel"])
        return None
    if compute:
        return (f"strict policy: `{compute[0]}` is a PyTorch compute op; ModelNew must compute in "
                "its own kernels", ["forbidden_op"])
    return None


HARNESS_MODULES = frozenset("time torch sys os builtins gc inspect numpy np triton subprocess "
                            "signal threading json importlib random".split())


def _root_chain(node) -> list[str]:
    names = []
    while isinstance(node, ast.Attribute):
        names.append(node.attr)
        node = node.value
    if isinstance(node, ast.Name):
        names.append(node.id)
    return names[::-1]


def _harness_tampering(tree: ast.Module) -> str | None:
    """The first `module.attr = ...` / `setattr(module, ...)` on a harness module, if any."""
    targets = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets += node.targets if isinstance(node, ast.Assign) else [node.target]
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and \
                node.func.id in ("setattr", "delattr") and node.args:
            targets.append(ast.Attribute(value=node.args[0], attr="?"))
    for t in targets:
        if isinstance(t, ast.Subscript) and isinstance(t.value, ast.Attribute) and \
                t.value.attr == "__dict__":
            t = t.value
        chain = _root_chain(t) if isinstance(t, ast.Attribute) else []
        if len(chain) >= 2 and chain[0] in HARNESS_MODULES and chain[:2] != ["torch", "backends"]:
            return ".".join(chain)
    return None


def _is_triton_jit(dec) -> bool:
    target = dec.func if isinstance(dec, ast.Call) else dec
    return isinstance(target, ast.Attribute) and target.attr in ("jit", "autotune", "heuristics") \
        or isinstance(target, ast.Name) and target.id in ("jit",)


def _module_level_names(tree: ast.Module) -> set[str]:
    """Names bound at module level (imports, extension handles, helpers): not tensors."""
    names = set()
    for node in tree.body:
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            names |= {(a.asname or a.name).split(".")[0] for a in node.names}
        elif isinstance(node, ast.Assign):
            names |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            names.add(node.name)
    return names


def _compute_call(call: ast.Call, module_names: set[str] = frozenset()) -> str | None:
    f = call.func
    if not isinstance(f, ast.Attribute) or f.attr not in COMPUTE_CALLS:
        return None
    root = f.value
    while isinstance(root, ast.Attribute):
        root = root.value
    # torch.relu(x), F.relu(x), torch.nn.functional.relu(x): module-level compute.
    if isinstance(root, ast.Name) and root.id in TORCH_ROOTS:
        return f.attr
    # x.relu(), x.sum(): tensor methods with compute names. `self.x.sum()` etc. too, but not
    # calls into a loaded extension module (`ext.relu_cuda`) whose names we do not list.
    if isinstance(root, ast.Name) and root.id not in module_names and \
            root.id not in ("self", "triton", "tl", "math", "np", "numpy"):
        return f.attr if f.attr in _TENSOR_METHODS else None
    return None


_TENSOR_METHODS = frozenset("""
matmul mm bmm relu relu_ sigmoid tanh softmax log_softmax sum mean prod amax amin cumsum argmax
argmin exp log sqrt rsqrt clamp norm var std logsumexp
""".split())
