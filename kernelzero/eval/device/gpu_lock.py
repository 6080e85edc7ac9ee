"""Who may use a GPU when: shared for running modules, exclusive for timing them.

Correctness trials, model builds and spare workers' CUDA start-up only need the GPU to compute the
right values, so several may run at once (`GpuLock(shared=True)`). A timing needs a quiet GPU, so
it takes the lock exclusively (`GpuLock()`): it waits for the shared holders to finish.

Timings first: while any timing waits, new shared holders wait, and they go only once no timing
is left waiting (timings that queue up behind each other run back to back). Each timing needs a
shared phase before it (its candidate's correctness trials), so the timings' queue drains and
shared holders are never starved; meanwhile they pile up, and then run side by side in one
burst. A lock that let a shared holder in between two queued timings would spend the GPU in many
short bursts of one or two holders, each as long as a whole correctness phase, which is mostly
host work (measured on the H200: docs/history/perf-log.md).

Held by the judge (never by a worker, so a candidate cannot hold it), as `fcntl` file locks per
visible device set, which also order evaluators in other processes on the same machine (several
trainers, Ray actors). Each acquisition opens its own file descriptions, so threads of one
process exclude each other exactly like processes do. The kernel releases a file lock when its
holder dies, so a crashed judge never blocks the GPU.

Diagnostics: with `KZ_GPU_LOCK_TRACE=FILE` every acquisition appends `time pid thread mode
event what` lines (event: wait, hold, free; what: the holder's label, e.g. `ref_run`) to FILE,
from every judge process; bench/eval_throughput.py turns them into how much of a batch's wall
time the GPU was timed, shared or idle, and what held it.

How waiting timings are counted across processes: a second file, `<lock>.timings`. A timing
holds it shared from the moment it starts waiting until it holds the main lock. A shared
acquirer takes it exclusively (and lets go at once) before it asks for the main lock, which it
can only do while no timing waits, and checks it again once it holds the main lock: if a timing
started waiting in between, it lets go of the main lock and waits again.
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
        self._fh = self._enter_shared() if self.shared else self._enter_exclusive()
        _trace(self.shared, "hold", self.what)
        return self

    def _enter_exclusive(self):
        waiting = open(self.path + ".timings", "a+")
        try:
            fcntl.flock(waiting, fcntl.LOCK_SH)  # counted among the waiting timings ...
            return _flocked(self.path, fcntl.LOCK_EX)
        finally:
            waiting.close()  # ... until it holds the lock

    def _enter_shared(self):
        while True:
            with open(self.path + ".timings", "a+") as waiting:
                fcntl.flock(waiting, fcntl.LOCK_EX)  # passes once no timing waits
            fh = _flocked(self.path, fcntl.LOCK_SH)
            # A timing that queued while this one waited for the lock goes first. (Another
            # shared acquirer's check at the same instant also fails this: it only costs a retry.)
            with open(self.path + ".timings", "a+") as waiting:
                try:
                    fcntl.flock(waiting, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return fh
                except BlockingIOError:
                    fh.close()

    def __exit__(self, *exc):
        fh, self._fh = self._fh, None
        if fh is not None:
            fh.close()  # closing releases the lock
            _trace(self.shared, "free", self.what)


def _flocked(path: str, mode: int):
    fh = open(path, "a+")
    try:
        fcntl.flock(fh, mode)
    except BaseException:
        fh.close()
        raise
    return fh


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
