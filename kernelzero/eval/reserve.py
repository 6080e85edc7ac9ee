"""Device memory a worker takes from the driver before the judge lets it use the GPU.

A fresh worker's first correctness trial allocates its inputs, their pristine copies and its
outputs with `cudaMalloc`, and that call is slow while other processes use the GPU: on one H200
with 8 candidates at once, the first trials' fresh inputs cost 0.8-1.2 s summed over 20
candidates, against 0.07 s when the memory was already in the worker's caching allocator
(seventh and eighth sessions, docs/perf.md). That time is spent holding the GPU lock (shared),
so every timing waiting for the GPU waits for it too.

So `load` (outside the lock) asks the caching allocator once for about what the trials will
need and hands it straight back: PyTorch keeps the block, and the trials' allocations are cut
from it. What the trials will need is estimated from the task's own `get_inputs`, run under
`FakeTensorMode`: shapes and dtypes only, no memory, no kernels (a device named inside
`get_inputs` is faked too), so nothing touches the GPU outside the lock. Allocating memory is
not GPU work: nothing is queued on any stream.
"""
from __future__ import annotations

import itertools
import random


def input_bytes(torch, get_inputs, device: str) -> int:
    """Bytes of one call's tensor inputs, from `get_inputs` under FakeTensorMode; 0 when it
    cannot run that way (it reads values, builds tensors from NumPy, ...). Python's and NumPy's
    random states are left as they were."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    state = random.getstate()
    np_state = _numpy_state()
    try:
        with FakeTensorMode(), torch.device(device):
            inputs = list(get_inputs())
        return sum(x.numel() * x.element_size() for x in inputs if isinstance(x, torch.Tensor))
    except BaseException:  # noqa: BLE001 - an estimate only: the trials report real errors
        return 0
    finally:
        random.setstate(state)
        if np_state is not None:
            import numpy
            numpy.random.set_state(np_state)


def weight_bytes(torch, model) -> int:
    """Bytes of a module's parameters and buffers (moved to the device by `build`)."""
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(t.numel() * t.element_size()
               for t in itertools.chain(model.parameters(), model.buffers()))


def hand_to_allocator(torch, nbytes: int) -> int:
    """Allocate `nbytes` on the current CUDA device and free it at once: the caching allocator
    keeps the block for this process's later allocations. Returns the bytes kept (0 when the
    GPU has no room: then the trials allocate as they go, as without a reserve)."""
    if nbytes <= 0:
        return 0
    try:
        block = torch.empty(int(nbytes), dtype=torch.uint8, device="cuda")
    except torch.OutOfMemoryError:
        return 0
    del block
    torch.cuda.reset_peak_memory_stats()  # the reserve is not a trial's footprint
    return int(nbytes)


def warm_fake_mode(torch) -> None:
    """FakeTensorMode's first use costs 0.3-1.1 s (lazy set-up): paid while a spare warms."""
    input_bytes(torch, lambda: [torch.empty(2)], "cpu")


def _numpy_state():
    import sys
    numpy = sys.modules.get("numpy")
    return numpy.random.get_state() if numpy is not None else None
