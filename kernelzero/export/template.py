"""The text of an exported op module (`_NAME.py` in the user's package), filled in by package.py.

The module it becomes depends on torch alone (and on what the kernel file imports: triton, or
torch's C++ extension builder): a user's model needs no KernelZero to run it. How it works:

- `torch.ops.PKG.NAME(handle, inputs, weights)` is a `torch.library.custom_op`. Its real
  implementation calls the kernel's `ModelNew` (held by a live layer, found by `handle`) on the
  inputs; the op is opaque to torch.compile, which calls it as it is and never traces the
  kernel's launch.
- Its fake implementation (torch.compile, meta tensors, shape propagation) runs the reference
  `Model` on the fake inputs: a copy built on the meta device (no memory) given tensors in place
  of its parameters and buffers. So output shapes and dtypes follow the inputs' shapes as the
  reference's do, dynamic shapes included.
- The reference's parameters come from the kernel's own when the kernel holds a tensor of each
  reference parameter's name and shape (KernelBench kernels usually keep the reference's layers):
  they are then the op's `weights`, and its backward is the reference's, recomputed in PyTorch
  (torch.func.vjp) with those weights, so a model that trains through the op gets exact
  gradients. Otherwise the op has no weights and no backward (it raises, asking for no_grad),
  and the fake implementation uses empty tensors of the reference's shapes, floating-point ones
  in the dtype of the first floating-point input.
- Outputs are contiguous (a real one that is not is copied; the fake ones are made so), and one
  that shares an input's storage is copied: a custom op may not return a view of its input.
- The function NAME runs a layer built at import (a first call inside torch.compile must not
  trace a construction); a kernel that holds weights has no function form, only the layer.
"""
from __future__ import annotations

OP_MODULE = '''\
"""$name: a KernelZero-verified $backend kernel as a PyTorch custom op, `torch.ops.$package.$name`.

Written by `kernelzero export`; regenerate it rather than edit it. Provenance in VERIFIED.

    from $package import $name, $cls
    y = $name(*inputs)              # the kernel as verified: the reference's get_init_inputs()
    layer = $cls(*init_inputs)      # an nn.Module holding the kernel's parameters (state_dict
                                    # keys `kernel.*`); with no arguments, get_init_inputs()

Works eagerly, under torch.compile (the op is opaque: the kernel runs as it is) and on meta
tensors (output shapes and dtypes from the reference module run on fake tensors). Gradients are
the reference's, recomputed in PyTorch, when the kernel's weights carry the reference's names
and shapes (`layer.has_backward`); otherwise call it under torch.no_grad(). Verified for the
reference's get_inputs() shapes and dtypes; other shapes run the same kernel unverified. forward
takes and returns tensors only (one output is returned as a tensor, several as a tuple).
"""
from __future__ import annotations

import itertools
import weakref

import torch
from torch import nn

from . import $kernel_module as _kernel
from . import $reference_module as _reference

VERIFIED = $verified

_LIVE: "weakref.WeakValueDictionary[int, $cls]" = weakref.WeakValueDictionary()
_HANDLES = itertools.count()


def _as_list(out) -> list:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def _state(module: nn.Module) -> dict:
    return dict(itertools.chain(module.named_parameters(), module.named_buffers()))


def _shares_storage(t: torch.Tensor, inputs: list) -> bool:
    ptr = t.untyped_storage().data_ptr()
    return any(ptr == x.untyped_storage().data_ptr() for x in inputs)


@torch.library.custom_op("$package::$name", mutates_args=())
def _op(handle: int, inputs: list[torch.Tensor], weights: list[torch.Tensor]) -> list[torch.Tensor]:
    outs = _as_list(_LIVE[handle].kernel(*inputs))
    return [o.clone(memory_format=torch.contiguous_format)
            if _shares_storage(o, inputs) or not o.is_contiguous() else o for o in outs]


def _reference_outputs(handle: int, inputs: list, weights: list) -> list:
    """The reference's outputs on `inputs`, its tensors replaced by `weights` (or, without
    them, by empty ones of its shapes on the inputs' device)."""
    layer, like = _LIVE[handle], inputs[0]
    if layer.weight_names is not None:
        state = {n: w if w.device == like.device else like.new_empty(w.shape, dtype=w.dtype)
                 for n, w in zip(layer.weight_names, weights)}
    else:
        dtype = next((x.dtype for x in inputs if x.is_floating_point()), None)
        state = {n: like.new_empty(t.shape, dtype=dtype if t.is_floating_point() and dtype
                                   else t.dtype)
                 for n, t in _state(layer._reference).items()}
    return _as_list(torch.func.functional_call(layer._reference, state, tuple(inputs)))


@_op.register_fake
def _(handle, inputs, weights):
    return [o.new_empty(o.shape) for o in _reference_outputs(handle, inputs, weights)]


def _setup_context(ctx, inputs, output) -> None:
    handle, xs, ws = inputs
    ctx.handle, ctx.n_inputs = handle, len(xs)
    ctx.save_for_backward(*xs, *ws)


def _backward(ctx, grads):
    if _LIVE[ctx.handle].weight_names is None:
        raise RuntimeError("$name has no backward: the kernel's weights do not carry the "
                           "reference's names and shapes; call it under torch.no_grad()")
    saved, n = list(ctx.saved_tensors), ctx.n_inputs
    wrt = [i for i, t in enumerate(saved) if t.is_floating_point()]

    def reference(*diff):
        full = list(saved)
        for i, t in zip(wrt, diff):
            full[i] = t
        return tuple(_reference_outputs(ctx.handle, full[:n], full[n:]))

    _, vjp = torch.func.vjp(reference, *(saved[i] for i in wrt))
    got = dict(zip(wrt, vjp(tuple(grads))))
    grad = [got.get(i) for i in range(len(saved))]
    return None, grad[:n], grad[n:]


_op.register_autograd(_backward, setup_context=_setup_context)


class $cls(nn.Module):
    """The verified kernel as a layer: `$cls(*init_inputs)` builds the kernel's ModelNew (and,
    for shapes and gradients only, the reference Model on the meta device) from the same
    arguments."""

    def __init__(self, *init_inputs):
        super().__init__()
        if not init_inputs:
            init_inputs = tuple(_reference.get_init_inputs())
        self.kernel = _kernel.ModelNew(*init_inputs)
        with torch.device("meta"):
            reference = _reference.Model(*init_inputs)
        # Not a submodule: .to(), .half() and state_dict() leave it alone.
        object.__setattr__(self, "_reference", reference)
        ours = _state(self.kernel)
        theirs = _state(reference)
        same = all(n in ours and ours[n].shape == t.shape for n, t in theirs.items())
        # The reference's tensors that the kernel holds under the same names: the op's weights.
        self.weight_names = list(theirs) if same else None
        self._register()

    @property
    def has_backward(self) -> bool:
        return self.weight_names is not None

    def _register(self) -> None:
        self._handle = next(_HANDLES)
        _LIVE[self._handle] = self

    def __setstate__(self, state) -> None:  # a copy (deepcopy, pickle) is a layer of its own
        super().__setstate__(state)
        self._register()

    def forward(self, *inputs: torch.Tensor):
        ours = _state(self.kernel)
        weights = [ours[n] for n in self.weight_names or ()]
        outs = _op(self._handle, list(inputs), weights)
        return outs[0] if len(outs) == 1 else tuple(outs)


def _default_layer():
    """The layer the function $name runs: built as verified, at import (so that a first call
    inside torch.compile traces no construction); None when the kernel holds weights."""
    layer = $cls()
    return None if _state(layer.kernel) else layer


_DEFAULT = _default_layer()


def $name(*inputs: torch.Tensor):
    """The kernel on `inputs`, built as it was verified (the reference's get_init_inputs())."""
    if _DEFAULT is None:
        raise TypeError("$name: the kernel holds weights; build $cls(*init_inputs), load your "
                        "weights into it and call that")
    return _DEFAULT(*inputs)
'''

PACKAGE_INIT = '''\
"""Kernels exported by `kernelzero export`, each a verified PyTorch custom op.

This file is rewritten by every export into this folder: add nothing to it.
"""
# kernelzero-export-package
$imports
__all__ = $names
'''
