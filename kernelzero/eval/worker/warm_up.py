"""The `warm` command: a spare worker pays its start-up costs before any untrusted code arrives.

Stages, in WARM_STAGES order: `imports` (Triton; on cuda, the fake-tensor mode a reference's
footprint is measured under), `context` (the CUDA context), `libraries` (warm_libraries.py)
and `dry_run` (the whole `run` path once on a built-in module). The judge holds the GPU (shared) for
each of GPU_WARM_STAGES separately (spares.SparePool), so a timing waits for one short stage,
not a whole start-up.
"""
from __future__ import annotations

import os
import time

from kernelzero.eval.device.footprint import warm_fake_mode
from kernelzero.eval.device.reserve import hand_to_allocator
from kernelzero.eval.worker.warm_libraries import warm_cuda_libraries

WARM_STAGES = ("imports", "context", "libraries", "dry_run")
GPU_WARM_STAGES = ("context", "libraries", "dry_run")  # the judge holds the GPU (shared) for these


def warm(worker, cmd: dict) -> dict:
    """Pay start-up costs before any untrusted code arrives (the Triton import, the CUDA
    context, cuBLAS and cuDNN handles, the common kernels' lazy module loading, the `run`
    path), so a candidate's first correctness trial does not pay them inside the judge's GPU
    phases. `stages` (default: all, in WARM_STAGES order) lets the judge hold the GPU
    (shared) for each GPU stage separately: a timing then waits for one short stage, not a
    whole start-up (spares.SparePool)."""
    torch = worker.torch
    t0 = time.perf_counter()
    cuda = cmd.get("device") == "cuda"
    for stage in cmd.get("stages") or WARM_STAGES:
        try:
            if stage == "imports":
                import triton  # noqa: F401
                if cuda:  # a reference's `load` measures its footprint under FakeTensorMode
                    warm_fake_mode(torch)
            elif cuda and stage == "context":
                torch.cuda.init()
                torch.zeros(1, device="cuda")  # the context is made at the first use
            elif cuda and stage == "libraries":
                warm_cuda_libraries(torch)
            elif cuda and stage == "dry_run":
                dry_run(worker, cmd.get("transfer", "ipc"))
                # RuntimeConfig.spare_reserve_mb: kept by this process's caching allocator
                hand_to_allocator(torch, int(cmd.get("reserve_mb", 0)) << 20)
        except Exception:  # noqa: BLE001 - a warm-up miss only costs time later
            pass
        if cuda and stage in GPU_WARM_STAGES:
            torch.cuda.synchronize()
    return {"ok": True, "warm_ms": (time.perf_counter() - t0) * 1e3}


def dry_run(worker, transfer: str) -> None:
    """The whole `run` path once on a built-in ReLU (fresh inputs, digest, poisoned
    allocations, output sharing, the mutation check), so its one-off costs (lazy kernel
    loading, PyTorch's IPC reference counters) are paid here. Leaves no state behind."""
    torch = worker.torch

    class _Task:
        @staticmethod
        def get_inputs():
            return [torch.randn(256, 256)]

    worker.device, worker.transfer, worker.ref = "cuda", transfer, _Task
    worker.model = torch.nn.ReLU()
    try:
        worker.run({"trials": [{"seed": 0}, {"seed": 1}], "poison": True})
    finally:
        worker.device, worker.transfer, worker.ref, worker.model = "cpu", "host", None, None
        worker._keep.clear()
        worker._base = None
        worker._arena = None
        for name in os.listdir(worker.out_dir):
            if name.startswith("out_"):
                os.remove(os.path.join(worker.out_dir, name))
        torch.cuda.reset_peak_memory_stats()
