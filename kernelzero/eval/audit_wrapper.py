"""The code the degenerate-task audit (audit.py) runs in the sandbox, and the reading of what it
returns.

- `wrapped_source`: the task's source with its `Model` renamed and the wrapper appended, a new
  `Model` that calls the original on the real inputs, on fresh copies of them, with perturbed
  parameters, under another init seed and with each input varied (audit.py's docstring: "How"),
  and returns the outputs and inputs as samples of at most KEEP elements; `_split` undoes its
  output layout.
- `_BUNDLE`: the module that runs several wrapped tasks with one sandbox start (audit_many);
  `_unbundle` splits its outputs back per member.

Does not cover the checks on those outputs (audit_checks.py) nor what each flag means (audit.py).
Nothing of the task is imported here: its source is only parsed and rewritten.
"""
from __future__ import annotations

import ast

from kernelzero.tasks.task import parse_python

_ORIG = "_KZAuditOriginalModel"
# Outputs and inputs larger than this come back as a fixed sample of KEEP elements (the same
# positions in every section), so GPU-sized tasks do not ship gigabytes per probe, and the judge
# never holds a whole input or output; checks use the samples.
KEEP = 1 << 18


_WRAPPER = '''

# ---- appended by kernelzero.eval.audit: the audit wrapper --------------------------------------
import copy as _kz_copy
import torch as _kz_torch


_KZ_K = _KZ_KEEP


def _kz_leaves(out):
    if isinstance(out, _kz_torch.Tensor):
        return [out]
    if isinstance(out, (tuple, list)):
        return [t for o in out for t in _kz_leaves(o)]
    if isinstance(out, (int, float, bool)):
        return [_kz_torch.tensor(float(out))]
    return []


def _kz_pick(t):
    t = t.reshape(-1)
    n = t.numel()
    if n <= _KZ_K:
        return t
    idx = (_kz_torch.arange(_KZ_K, dtype=_kz_torch.int64) * 1000003) % n
    return t[idx.to(t.device)]


def _kz_flat(out):
    return [_kz_pick(t) for t in _kz_leaves(out)]


def _kz_vary(a):
    if not isinstance(a, _kz_torch.Tensor) or a.numel() < 2:
        return None
    n = a.numel()
    perm = (_kz_torch.arange(n, device=a.device, dtype=_kz_torch.int64) * 1000003) % n
    b = a.reshape(-1)[perm].reshape(a.shape)  # a fixed shuffle, cheap on any device
    if a.is_floating_point():
        b = b * 1.25
    return None if _kz_torch.equal(a, b) else b


class Model(_kz_torch.nn.Module):
    def __init__(self, *args, **kwargs):
        super().__init__()
        self.kz_ref = _ORIG(*args, **kwargs)
        self.kz_alt = None
        self.kz_seeded = None
        if any(True for _ in self.kz_ref.parameters()):
            self.kz_alt = _kz_copy.deepcopy(self.kz_ref)
            with _kz_torch.no_grad():
                for p in self.kz_alt.parameters():
                    if p.is_floating_point():
                        p.add_(_kz_torch.randn_like(p) * (p.abs().mean() * 0.5 + 0.05))
            _kz_torch.manual_seed(987654321)
            self.kz_seeded = _ORIG(*args, **kwargs)

    def forward(self, *args):
        T = _kz_torch
        spare = [a.clone() if isinstance(a, T.Tensor) else a for a in args]

        def fresh():
            return [a.clone() if isinstance(a, T.Tensor) else a for a in spare]

        leaves = _kz_leaves(self.kz_ref(*args))
        out1 = [_kz_pick(t) for t in leaves]
        res = [T.tensor([len(out1), len(spare)])]
        res += [T.tensor([t.dim()] + list(t.shape)) for t in leaves] + out1
        del leaves  # from here on one call's outputs at a time
        res += _kz_flat(self.kz_ref(*fresh()))
        for extra in (self.kz_alt, self.kz_seeded):
            if extra is None:
                res += [T.zeros(1)] + [T.zeros_like(o) for o in out1]
            else:
                res += [T.ones(1)] + _kz_flat(extra(*fresh()))
        for i in range(len(spare)):
            varied = _kz_vary(spare[i])
            if varied is None:
                res += [T.zeros(1)] + [T.zeros_like(o) for o in out1]
            else:
                xs = fresh()
                xs[i] = varied
                del varied
                res += [T.ones(1)] + _kz_flat(self.kz_ref(*xs))
                del xs
        for a in spare:  # the inputs, as samples: the judge never holds a whole input
            if isinstance(a, T.Tensor):
                res += [T.tensor([1, a.dim()] + list(a.shape)), _kz_pick(a)]
            else:
                res += [T.tensor([0]), T.zeros(1)]
        return tuple(res)
'''.replace("_ORIG", _ORIG).replace("_KZ_KEEP", str(KEEP))


_BUNDLE = '''
import torch as _kz_bt

_KZ_SOURCES = _KZ_MEMBERS
_KZ_NS = []
for _kz_src in _KZ_SOURCES:
    _kz_ns = {"__name__": "kz_audit_member"}
    exec(compile(_kz_src, "<kz-audit-member>", "exec"), _kz_ns)
    _KZ_NS.append(_kz_ns)
_KZ_COUNTS = []


class Model(_kz_bt.nn.Module):
    def __init__(self):
        super().__init__()
        self.kz_members = _kz_bt.nn.ModuleList(
            [ns["Model"](*ns["get_init_inputs"]()) for ns in _KZ_NS])

    def forward(self, *xs):
        res, pos = [], 0
        for m, k in zip(self.kz_members, _KZ_COUNTS):
            out = list(m(*xs[pos:pos + k]))
            pos += k
            res += [_kz_bt.tensor([len(out)])] + out
        return tuple(res)


def get_inputs():
    out = []
    _KZ_COUNTS.clear()
    for ns in _KZ_NS:
        xs = list(ns["get_inputs"]())
        _KZ_COUNTS.append(len(xs))
        out += xs
    return out


def get_init_inputs():
    return []
'''


class _Rename(ast.NodeTransformer):
    def visit_Name(self, node: ast.Name) -> ast.Name:
        if node.id == "Model":
            node.id = _ORIG
        return node

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.ClassDef:
        if node.name == "Model":
            node.name = _ORIG
        self.generic_visit(node)
        return node


def wrapped_source(source: str) -> str:
    """The task's source with `Model` renamed and the audit wrapper appended."""
    tree = _Rename().visit(parse_python(source))
    return ast.unparse(tree) + "\n" + _WRAPPER


def _split(flat: list) -> dict:
    """Undo the wrapper's layout: header [k, n_inputs], k shapes, then sections of k outputs,
    then per input its header [is_tensor, dim, *shape] and sample (`inputs_seen`: (shape,
    sample) or None for a non-tensor input)."""
    k, n_in = (int(v) for v in flat[0].tolist())
    pos = 1

    def take(n):
        nonlocal pos
        part = flat[pos:pos + n]
        pos += n
        return part

    shapes = [tuple(int(v) for v in t.tolist()[1:]) for t in take(k)]
    out = {"shapes": shapes, "out": take(k), "again": take(k)}
    for name in ("alt", "seeded"):
        flag, part = bool(take(1)[0].item()), take(k)
        out[name] = part if flag else None
    out["inputs"] = []
    for _ in range(n_in):
        flag, part = bool(take(1)[0].item()), take(k)
        out["inputs"].append(part if flag else None)
    out["inputs_seen"] = []
    for _ in range(n_in):
        head, sample = take(2)
        head = [int(v) for v in head.tolist()]
        out["inputs_seen"].append((tuple(head[2:2 + head[1]]), sample) if head[0] else None)
    if pos != len(flat):
        raise ValueError(f"{len(flat) - pos} unexpected trailing outputs")
    return out


def _unbundle(flat: list) -> list[list]:
    """Bundle outputs -> per member, its wrapped outputs."""
    members, pos = [], 0
    while pos < len(flat):
        n = int(flat[pos].item())
        members.append(flat[pos + 1:pos + 1 + n])
        pos += 1 + n
    return members
