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

Diagnostics: with `KZ_GPU_LOCK_TRACE=FILE` every acquisition appends `time pid thread mode
event what` lines (event: wait, hold, free; what: the holder's label, e.g. `ref_run`) to FILE,
from every judge process; bench/eval_throughput.py turns them into how much of a batch's wall
time the GPU was timed, shared or idle, and what held it.

Writer preference across processes uses a second file, the gate: every acquirer passes through it
(exclusively), but an exclusive acquirer keeps the gate until it holds the main lock, so shared
acquirers that arrive later queue behind it.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import threading
import time


class GpuLock:
    def __init__(self, shared: bool = False, name: str | None = None, what: str = "-"):
        devices = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_") or "none"
        self.name = name or f"kernelzero-gpu-{os.getuid()}-{devices}.lock"
        self.path = os.path.join(tempfile.gettempdir(), self.name)
        self.shared, self.what = shared, what
        self._fh = None

    def __enter__(self):
        _trace(self.shared, "wait", self.what)
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
        _trace(self.shared, "hold", self.what)
        return self

    def __exit__(self, *exc):
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()  # closing releases the lock
            _trace(self.shared, "free", self.what)


def _trace(shared: bool, event: str, what: str) -> None:
    path = os.environ.get("KZ_GPU_LOCK_TRACE")
    if not path:
        return
    line = f"{time.time():.6f} {os.getpid()} {threading.get_ident()} " \
           f"{'shared' if shared else 'exclusive'} {event} {what}\n"
    try:  # one short O_APPEND write: lines from several processes never interleave
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)
    except OSError:
        pass


class _NoLock:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def gpu_lock_for(device: str, shared: bool = False, what: str = "-"):
    """The GPU lock on cuda (shared: running modules; exclusive: timing); nothing on the CPU.
    `what` labels the hold in the trace (diagnostics only)."""
    return GpuLock(shared=shared, what=what) if device == "cuda" else _NoLock()
