"""Sharing a worker's CUDA output with the judge through CUDA IPC, without pickle.

Worker side: `share(t)` exports the tensor's CUDA allocation (`cudaIpcGetMemHandle` through
PyTorch's storage sharing) and describes it as JSON-able data. Judge side: `open_shared(desc)`
checks every field, maps the allocation, and immediately copies the tensor into the judge's own
GPU memory (device-to-device), so the candidate cannot change what is compared afterwards.

Large outputs never cross the PCIe bus or the CPU this way: comparison happens on the GPU in the
judge. A forged handle fails to open (the judge then reports an unreadable output).
"""
from __future__ import annotations

import math


def share(t) -> dict:
    import torch
    storage = t.untyped_storage()
    (device, handle, size_bytes, offset_bytes, rc_handle, rc_offset, ev_handle,
     ev_sync) = storage._share_cuda_()
    return {"device": int(device), "handle": _hex(handle), "size_bytes": int(size_bytes),
            "storage_offset_bytes": int(offset_bytes), "ref_counter_handle": _hex(rc_handle),
            "ref_counter_offset": int(rc_offset), "event_handle": _hex(ev_handle),
            "event_sync_required": bool(ev_sync), "offset": int(t.storage_offset()),
            "stride": [int(s) for s in t.stride()], "itemsize": t.element_size(),
            "torch": torch.__version__}


def _hex(b):
    return b.hex() if isinstance(b, (bytes, bytearray)) else None


def _unhex(s):
    return bytes.fromhex(s) if isinstance(s, str) else None


def open_shared(ipc: dict, shape: list[int], dtype, mapped: list | None = None):
    """Map and copy. Raises ValueError on an inconsistent description. With `mapped` (a list),
    the mapping is kept there, alive as long as the list: PyTorch maps an allocation once while
    any storage of it lives, so the other outputs of one reply, often cut from the same
    allocation (a worker's memory reserve: reserve.py), are copied without mapping it again
    (mapping and unmapping a large allocation costs milliseconds while the GPU is shared)."""
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
    torch.cuda._lazy_init()
    storage = torch.UntypedStorage._new_shared_cuda(
        int(ipc["device"]), _unhex(ipc["handle"]), size_bytes, int(ipc["storage_offset_bytes"]),
        _unhex(ipc["ref_counter_handle"]), int(ipc["ref_counter_offset"]),
        _unhex(ipc["event_handle"]), bool(ipc["event_sync_required"]))
    view = torch.empty(0, dtype=dtype, device=storage.device)
    view.set_(storage, offset, shape, stride)
    copy = view.clone()  # the judge's own memory from here on
    if mapped is not None:
        mapped.append(storage)
    del view, storage
    return copy
