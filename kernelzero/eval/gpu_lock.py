"""Exclusive use of a GPU while a module runs or is timed.

Held by the judge (never by a worker, so a candidate cannot hold it): a thread lock for workers
started by this process, plus an `fcntl` lock file per visible device set for evaluators in other
processes on the same machine (several trainers, Ray tasks). The kernel releases a file lock when
its holder dies, so a crashed judge never blocks the GPU.
"""
from __future__ import annotations

import fcntl
import os
import tempfile
import threading

_THREAD_LOCKS: dict[str, threading.Lock] = {}
_GUARD = threading.Lock()


class GpuLock:
    def __init__(self, name: str | None = None):
        devices = os.environ.get("CUDA_VISIBLE_DEVICES", "all").replace(",", "_") or "none"
        self.name = name or f"kernelzero-gpu-{os.getuid()}-{devices}.lock"
        self.path = os.path.join(tempfile.gettempdir(), self.name)
        with _GUARD:
            self._thread_lock = _THREAD_LOCKS.setdefault(self.path, threading.Lock())
        self._fh = None

    def __enter__(self):
        self._thread_lock.acquire()
        try:
            self._fh = open(self.path, "a+")
            fcntl.flock(self._fh, fcntl.LOCK_EX)
        except BaseException:
            self._thread_lock.release()
            raise
        return self

    def __exit__(self, *exc):
        try:
            fcntl.flock(self._fh, fcntl.LOCK_UN)
            self._fh.close()
        finally:
            self._fh = None
            self._thread_lock.release()
