"""Device memory a worker takes from the driver before the judge lets it use the GPU.

A fresh worker's first correctness trial allocates its inputs, their pristine copies and its
outputs with `cudaMalloc`, and that call is slow while other processes use the GPU: on one H200
with 8 candidates at once, the first trials' fresh inputs cost 0.8-1.2 s summed over 20
candidates, against 0.07 s when the memory was already in the worker's caching allocator
(docs/history/perf-log.md). That time is spent holding the GPU lock (shared), so every timing
waiting for the GPU waits for it too.

So once the judgement is admitted (memory_gate.py) and before it takes the GPU lock, the judge
sends the worker a `reserve` command: it asks the caching allocator once for about what the
trials will need (memory_plan.MemoryPlan.reserve_bytes, from the task's footprint) and hands it
straight back: PyTorch keeps the block, and the trials' allocations are cut from it. Allocating
memory is not GPU work: nothing is queued on any stream.
"""
from __future__ import annotations


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
