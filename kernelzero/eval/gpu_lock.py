"""Who may use a GPU when: shared for running modules, exclusive for timing them.

Correctness trials, model builds and spare workers' CUDA start-up only need the GPU to compute the
right values, so several may run at once (`GpuLock(shared=True)`). A timing needs a quiet GPU, so
it takes the lock exclusively (`GpuLock()`): it waits for the shared holders to finish, and new
shared holders wait for it (writer preference, so a steady stream of correctness phases never
starves timing).

Held by the judge (never by a worker, so a candidate cannot hold it), as `fcntl` file locks per
visible device set, which also order evaluators in other processes on the same machine (several
trainers, Ray actors). Each acquisition opens its own file description, so threads of one process
exclude each other exactly like processes do. The kernel releases a file lock when its holder
dies, so a crashed judge never blocks the GPU.

Writer preference across processes uses a second file, the gate: every acquirer passes through it
(exclusively), but an exclusive acquirer keeps the gate until it holds the main lock, so shared
acquirers that arrive later queue behind it.
"""
from __future__ import annotations

import fcntl
import os
import tempfile


class GpuLock:
    def __init__(self, shared: bool = False, name: str | None = None):
        devices = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_") or "none"
        self.name = name or f"kernelzero-gpu-{os.getuid()}-{devices}.lock"
        self.path = os.path.join(tempfile.gettempdir(), self.name)
        self.shared = shared
        self._fh = None

    def __enter__(self):
        gate = open(self.path + ".gate", "a+")
        try:
            fcntl.flock(gate, fcntl.LOCK_EX)
            fh = open(self.path, "a+")
            try:
                fcntl.flock(fh, fcntl.LOCK_SH if self.shared else fcntl.LOCK_EX)
            except BaseException:
                fh.close()
                raise
        finally:
            gate.close()  # closing releases the gate
        self._fh = fh
        return self

    def __exit__(self, *exc):
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()  # closing releases the lock


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def gpu_lock_for(device: str, shared: bool = False):
    """The GPU lock on cuda (shared: running modules; exclusive: timing); nothing on the CPU."""
    return GpuLock(shared=shared) if device == "cuda" else _NoLock()
