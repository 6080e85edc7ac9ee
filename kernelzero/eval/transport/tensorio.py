"""Moving outputs from a sandboxed worker to the judge without trusting the worker.

The worker writes raw tensor bytes into a file in its private directory (on /dev/shm when there is
one, so this is shared memory) and sends a JSON description of them. The judge rebuilds tensors
with `torch.frombuffer` after checking every field against an allow-list. No pickle, no
`torch.load`: nothing the worker sends can run code in the judge.

What is encoded: a module's output, which is a tensor, a Python scalar, or a (possibly nested, up
to 4 levels) tuple/list of those. Anything else is described by its type name only, and the judge
treats it as a contract violation.
"""
from __future__ import annotations

import math
import os
import stat

import torch

ALLOWED_DTYPES = {
    "float64": torch.float64, "float32": torch.float32, "float16": torch.float16,
    "bfloat16": torch.bfloat16, "int64": torch.int64, "int32": torch.int32, "int16": torch.int16,
    "int8": torch.int8, "uint8": torch.uint8, "bool": torch.bool,
    "complex64": torch.complex64, "complex128": torch.complex128,
}
MAX_DEPTH = 4
MAX_ENTRIES = 4096


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


# ----------------------------------------------------------------------------- worker side
def encode(obj, fh, depth: int = 0, sharing=None) -> dict:
    """Describe `obj` as JSON-able data, appending tensor bytes to the binary file `fh`.

    With `sharing` (a cuda_ipc.Sharing), CUDA tensors of at least `sharing.min_bytes` are
    shared through CUDA IPC instead of copied to the host: copied into the worker's arena where
    they fit, else into allocations of their own, which the worker keeps (`sharing.keep`) alive
    until the judge has copied them.
    """
    if isinstance(obj, torch.Tensor):
        t = obj.detach()
        desc = {"kind": "tensor", "dtype": dtype_name(t.dtype), "shape": list(t.shape),
                "device": t.device.type, "exact_type": type(obj) is torch.Tensor,
                "instance_attrs": sorted(k for k in getattr(obj, "__dict__", {}) if not k.startswith("_kz"))}
        if desc["dtype"] not in ALLOWED_DTYPES:
            return {"kind": "other", "type": f"tensor of {desc['dtype']}"}
        if sharing is not None and t.is_cuda and t.numel() * t.element_size() >= \
                max(1, sharing.min_bytes):
            from kernelzero.eval.transport.cuda_ipc import copy_to_share, share
            if 0 < sharing.in_place_bytes <= t.numel() * t.element_size():
                desc["ipc"] = share(t)  # as it is (a reference's large output: see Sharing)
                sharing.keep.append(t)
                return desc
            # A copy made in the current stream's order, before any device-wide synchronize (as
            # the host path does): work still running on an unjoined side stream races with it.
            placed = sharing.arena.place(torch, t) if sharing.arena is not None else None
            if placed is not None:
                desc["ipc"] = share(placed, event=False)
                return desc
            plain = copy_to_share(torch, t, sharing.pool)
            desc["ipc"] = share(plain)
            sharing.keep.append(plain)
            return desc
        data = torch.Tensor.contiguous(torch.Tensor.cpu(t)) if t.numel() else t.cpu()
        raw = memoryview(data.reshape(-1).view(torch.uint8).numpy()).cast("B") if data.numel() else b""
        desc["offset"] = fh.tell()
        desc["nbytes"] = len(raw)
        fh.write(raw)
        return desc
    if isinstance(obj, bool):
        return {"kind": "scalar", "type": "bool", "value": obj}
    if isinstance(obj, (int, float)):
        v = float(obj) if isinstance(obj, float) else int(obj)
        if isinstance(v, float) and not math.isfinite(v):
            v = repr(v)  # JSON has no inf/nan; the judge turns the string back
        return {"kind": "scalar", "type": type(obj).__name__, "value": v}
    if isinstance(obj, (tuple, list)) and depth < MAX_DEPTH:
        return {"kind": "seq", "type": type(obj).__name__,
                "items": [encode(x, fh, depth + 1, sharing) for x in obj]}
    if obj is None:
        return {"kind": "none"}
    return {"kind": "other", "type": type(obj).__name__}


# ----------------------------------------------------------------------------- judge side
class DecodeError(ValueError):
    """The worker's description does not match the allow-list or the bytes it wrote."""


def open_regular(path: str | os.PathLike):
    """Open a file the worker wrote, for reading, only if it is a regular file: never through a
    symbolic link it made (to a file of the judge's), never a FIFO (which would block the judge).
    Raises DecodeError."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as e:
        raise DecodeError(f"output file unreadable: {e.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise DecodeError("output file is not a regular file")
    return os.fdopen(fd, "rb")


def decode(desc, path: str | os.PathLike, _buf: list | None = None, mapped=None):
    """Rebuild what `encode` described. Tensors come back on the CPU, owning their memory (CUDA
    IPC outputs: in the judge's own GPU memory; `mapped`: see cuda_ipc.open_shared)."""
    if _buf is None:
        with open_regular(path) as f:
            size = os.fstat(f.fileno()).st_size
            data = bytearray(size)
            if f.readinto(data) != size:
                raise DecodeError("output file changed while it was read")
        _buf = [data, 0]  # file bytes, entry counter
    _buf[1] += 1
    if _buf[1] > MAX_ENTRIES or not isinstance(desc, dict):
        raise DecodeError("output description is malformed or too large")
    kind = desc.get("kind")
    if kind == "tensor":
        dt = ALLOWED_DTYPES.get(desc.get("dtype"))
        shape, off, nb = desc.get("shape"), desc.get("offset"), desc.get("nbytes")
        if dt is None or not isinstance(shape, list) or not all(isinstance(s, int) and s >= 0 for s in shape):
            raise DecodeError("tensor description has a bad dtype or shape")
        numel = math.prod(shape)
        if isinstance(desc.get("ipc"), dict):
            from kernelzero.eval.transport.cuda_ipc import open_shared
            try:
                t = open_shared(desc["ipc"], shape, dt, mapped)
            except (ValueError, TypeError, KeyError) as e:
                raise DecodeError(f"shared CUDA output could not be opened: {e}") from None
            except RuntimeError as e:  # the driver refused a well-formed handle
                raise DecodeError(
                    f"shared CUDA output could not be opened: {str(e).splitlines()[0]} (the "
                    "judge could not map the worker's GPU memory: a failure of this machine's "
                    "jail or driver as likely as of the module; "
                    "EvalConfig.runtime.transfer='host' avoids CUDA IPC)") from None
            return TensorOut(t, device=str(desc.get("device")), exact_type=bool(desc.get("exact_type")),
                             instance_attrs=list(desc.get("instance_attrs") or []))
        itemsize = torch.empty((), dtype=dt).element_size()
        if not (isinstance(off, int) and isinstance(nb, int) and nb == numel * itemsize
                and 0 <= off and off + nb <= len(_buf[0])):
            raise DecodeError("tensor bytes do not match its description")
        if numel == 0:
            t = torch.empty(shape, dtype=dt)
        else:
            # Shares the judge's private copy of the file bytes: no further copy.
            t = torch.frombuffer(_buf[0], dtype=dt, count=numel, offset=off).reshape(shape)
        return TensorOut(t, device=str(desc.get("device")), exact_type=bool(desc.get("exact_type")),
                         instance_attrs=list(desc.get("instance_attrs") or []))
    if kind == "scalar":
        v = desc.get("value")
        if isinstance(v, str):
            v = float(v)
        return v
    if kind == "seq":
        items = [decode(x, path, _buf, mapped) for x in desc.get("items", [])]
        return tuple(items) if desc.get("type") == "tuple" else items
    if kind == "none":
        return None
    return OtherOut(str(desc.get("type", "?"))[:80])


class TensorOut:
    """A tensor that came back from a worker, with what the worker saw of the original object."""

    __slots__ = ("tensor", "device", "exact_type", "instance_attrs")

    def __init__(self, tensor, device, exact_type, instance_attrs):
        self.tensor, self.device = tensor, device
        self.exact_type, self.instance_attrs = exact_type, instance_attrs


class OtherOut:
    """An output that is not a tensor, scalar or sequence (the contract forbids it)."""

    __slots__ = ("type_name",)

    def __init__(self, type_name):
        self.type_name = type_name
