"""Sharing a worker's CUDA output with the judge through CUDA IPC, without pickle.

Worker side: `share(t)` exports the tensor's CUDA allocation (`cudaIpcGetMemHandle` through
PyTorch's storage sharing) and describes it as JSON-able data; the tensor is a copy of the
output in a slice of the worker's `Arena`, or in an allocation of its own. Judge side: `open_shared(desc)`
checks every field, maps the allocation, and immediately copies the tensor into the judge's own
GPU memory (device-to-device), so the candidate cannot change what is compared afterwards.

Large outputs never cross the PCIe bus or the CPU this way: comparison happens on the GPU in the
judge. A forged handle fails to open (the judge then reports an unreadable output).
"""
from __future__ import annotations

import contextlib
import math
import time
from dataclasses import dataclass


class SharedMappings:
    """The worker allocations one decode has mapped (see `open_shared`): one storage of each is
    kept until `clear`, which keeps it mapped for the other outputs cut from it. Also the host
    time spent mapping them (`map_s`): diagnostics."""

    def __init__(self, copy: bool = True):
        """copy=False: `open_shared` returns views of the worker's memory, not copies (a
        reference's outputs compared at once, before the worker's next command frees them)."""
        self._kept: dict = {}  # allocation handle -> a storage of it
        self.map_s = 0.0
        self.copy = copy

    def keep(self, handle: str, storage) -> None:
        self._kept.setdefault(handle, storage)

    def clear(self) -> None:
        """Unmap (once no other storage of the allocations lives)."""
        self._kept.clear()


@dataclass
class Sharing:
    """How a worker hands its CUDA outputs to the judge: `keep`, the copies it shares, alive
    until the judge has copied them; `pool`, where those copies are allocated (`output_pool`;
    None: the ordinary pool); `min_bytes`, the size under which an output goes through host
    memory instead (a small device-to-host copy costs microseconds, while mapping even a small
    allocation is a driver call, which other processes' allocations and frees can hold up);
    `arena`, the worker's `Arena`, tried before a copy of its own (None: none); `in_place_bytes`,
    the size from which an output is shared as it is, not copied (0: never; a reference's large
    outputs: the copy would double what the worker holds, and only a candidate's outputs need
    the stream-ordered copy that catches unjoined work)."""
    keep: list
    pool: object = None
    min_bytes: int = 0
    arena: "Arena | None" = None
    in_place_bytes: int = 0


ARENA_ALIGN = 512  # bytes: every slice of an arena starts at a multiple of this


def aligned(nbytes: int) -> int:
    return -(-int(nbytes) // ARENA_ALIGN) * ARENA_ALIGN


class Arena:
    """One allocation a worker shares with the judge once, into which it copies the outputs it
    shares (a slice each, in stream order) instead of giving each its own allocation.

    Why: every allocation the judge maps is a driver call, and under load those calls take
    tens to hundreds of milliseconds (measured on the H200: docs/history/perf-log.md); when they
    happen inside a GPU-lock hold, every timing waits for them. A candidate's arena is sized
    from the reference's outputs and mapped by the judge before it takes the GPU lock (the
    `arena` command, judgement.CandidateJudgement._map_arena), so its trials' and timed calls'
    outputs are then read without any mapping. A reference's arena is made at its first shared
    output (its size is only known then), so the judge maps it once per reply instead of once
    per output.

    Slices are handed out from the start again at every command (`reset`): by then the judge
    has copied everything the last command shared. An output that does not fit falls back to
    an allocation of its own."""

    def __init__(self, buf):
        self.buf = buf  # a 1-D uint8 tensor
        self.used = 0

    @classmethod
    def allocate(cls, torch, nbytes: int, pool):
        """An arena of `nbytes` in `pool` (its own segment: the judge maps exactly it), or None
        when the memory is not there (outputs then get allocations of their own)."""
        try:
            with in_pool(torch, pool):
                buf = torch.empty(int(nbytes), dtype=torch.uint8, device="cuda")
        except (torch.OutOfMemoryError, RuntimeError):
            return None
        return cls(buf)

    def place(self, torch, t):
        """A contiguous copy of `t` in the next free slice (queued on the current stream), or
        None when it does not fit."""
        n = t.numel() * t.element_size()
        start = aligned(self.used)
        if n == 0 or start + n > self.buf.numel():
            return None
        view = self.buf[start:start + n].view(t.dtype).view(t.shape)
        torch.Tensor.copy_(view, t)
        self.used = start + n
        return view

    def reset(self) -> None:
        self.used = 0


def shared_bytes(obj, min_bytes: int, depth: int = 0, in_place_bytes: int = 0) -> int:
    """The arena bytes one output tree takes: each tensor of at least `min_bytes` (`TensorOut`s
    on the judge's side, CUDA tensors on the worker's), aligned as `Arena.place` aligns it, less
    those shared in place (`in_place_bytes`, see `Sharing`)."""
    t = getattr(obj, "tensor", obj)
    if getattr(t, "is_cuda", False) is True:
        n = t.numel() * t.element_size()
        in_place = 0 < in_place_bytes <= n
        return aligned(n) if n and n >= max(1, min_bytes) and not in_place else 0
    if isinstance(obj, (tuple, list)) and depth < 4:  # tensorio.MAX_DEPTH
        return sum(shared_bytes(x, min_bytes, depth + 1, in_place_bytes) for x in obj)
    return 0


def output_pool(torch):
    """A private memory pool for the copies a worker shares (`torch.cuda.MemPool`), or None
    where this torch has none. Allocations from it get segments of their own, sized to them:
    the judge maps a shared allocation whole, and a copy made in the worker's ordinary pool
    is often cut from a far larger allocation (its memory reserve, reserve.py), which costs up
    to a hundred milliseconds to map and unmap where an output-sized one costs under one."""
    if not (hasattr(torch.cuda, "MemPool") and hasattr(torch.cuda, "use_mem_pool")):
        return None
    try:
        return torch.cuda.MemPool()
    except Exception:  # noqa: BLE001 - only saves time: shared copies then use the ordinary pool
        return None


def in_pool(torch, pool):
    """Allocations inside the block come from `pool` (None: the ordinary pool)."""
    return torch.cuda.use_mem_pool(pool) if pool is not None else contextlib.nullcontext()


def copy_to_share(torch, t, pool):
    """A plain copy of `t` in `pool` (None: the ordinary pool; also when the pool cannot get
    new memory from the driver, where the ordinary pool may still have room cached)."""
    if pool is not None:
        try:
            with in_pool(torch, pool):
                return torch.Tensor.clone(t).as_subclass(torch.Tensor)
        except torch.OutOfMemoryError:
            pass
    return torch.Tensor.clone(t).as_subclass(torch.Tensor)


def share(t, event: bool = True) -> dict:
    """`event=False` for a slice of an arena: PyTorch records a storage's IPC event once, at its
    first sharing, so it says nothing about later copies into the arena; the worker synchronizes
    before it replies, and the judge then skips opening the event (a driver call)."""
    import torch
    storage = t.untyped_storage()
    (device, handle, size_bytes, offset_bytes, rc_handle, rc_offset, ev_handle,
     ev_sync) = storage._share_cuda_()
    return {"device": int(device), "handle": _hex(handle), "size_bytes": int(size_bytes),
            "storage_offset_bytes": int(offset_bytes), "ref_counter_handle": _hex(rc_handle),
            "ref_counter_offset": int(rc_offset), "event_handle": _hex(ev_handle),
            "event_sync_required": bool(ev_sync) and event, "offset": int(t.storage_offset()),
            "stride": [int(s) for s in t.stride()], "itemsize": t.element_size(),
            "torch": torch.__version__}


def _hex(b):
    return b.hex() if isinstance(b, (bytes, bytearray)) else None


def _unhex(s):
    return bytes.fromhex(s) if isinstance(s, str) else None


def open_shared(ipc: dict, shape: list[int], dtype, mapped: SharedMappings | None = None):
    """Map and copy. Raises ValueError on an inconsistent description. With `mapped`, the
    mapping is kept there until it is cleared: PyTorch maps an allocation once while any storage
    of it lives, so the other outputs of one reply cut from the same allocation are copied
    without mapping it again (mapping and unmapping costs milliseconds, more while the GPU is
    shared; workers share output-sized allocations: `output_pool`)."""
    import torch
    itemsize = torch.empty((), dtype=dtype).element_size()
    stride, offset, size_bytes = ipc.get("stride"), ipc.get("offset"), ipc.get("size_bytes")
    if not (isinstance(stride, list) and len(stride) == len(shape)
            and all(isinstance(s, int) and s >= 0 for s in stride)
            and isinstance(offset, int) and offset >= 0 and isinstance(size_bytes, int)):
        raise ValueError("shared tensor description is malformed")
    numel = math.prod(shape)
    if numel:
        last = offset + sum((n - 1) * s for n, s in zip(shape, stride))
        if (last + 1) * itemsize > size_bytes:
            raise ValueError("shared tensor exceeds its allocation")
    if numel == 0 or size_bytes == 0:
        return torch.empty(shape, dtype=dtype, device="cuda")
    t0 = time.perf_counter()
    storage = _open_storage(torch, ipc, size_bytes)
    if mapped is not None:
        mapped.map_s += time.perf_counter() - t0
    view = torch.empty(0, dtype=dtype, device=storage.device)
    view.set_(storage, offset, shape, stride)
    if mapped is not None and not mapped.copy:
        mapped.keep(ipc["handle"], storage)
        return view
    copy = view.clone()  # the judge's own memory from here on
    if mapped is not None:
        mapped.keep(ipc["handle"], storage)
    del view, storage
    return copy


def _open_storage(torch, ipc: dict, size_bytes: int):
    torch.cuda._lazy_init()
    return torch.UntypedStorage._new_shared_cuda(
        int(ipc["device"]), _unhex(ipc["handle"]), size_bytes, int(ipc["storage_offset_bytes"]),
        _unhex(ipc["ref_counter_handle"]), int(ipc["ref_counter_offset"]),
        _unhex(ipc["event_handle"]), bool(ipc["event_sync_required"]))


def hold_arena(ipc: dict):
    """Map a worker's arena (its `share` description) and return a storage of it: while the
    caller keeps that storage, PyTorch keeps the allocation mapped, and `open_shared` finds the
    mapping instead of making one. Raises ValueError on a malformed description."""
    import torch
    size_bytes = ipc.get("size_bytes") if isinstance(ipc, dict) else None
    if not (isinstance(size_bytes, int) and size_bytes > 0 and isinstance(ipc.get("handle"), str)
            and isinstance(ipc.get("storage_offset_bytes"), int)):
        raise ValueError("arena description is malformed")
    return _open_storage(torch, ipc, size_bytes)
