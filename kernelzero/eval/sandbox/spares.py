"""Spare workers: sandbox processes started ahead of need, so start-up leaves the critical path.

Each spare is a fresh `python -I` process that has imported torch (and initialised CUDA on a GPU)
but has not seen any untrusted code. Taking one hands it to exactly one reference or candidate;
it is never reused. This is what lets the judge keep the GPU busy: while one candidate is timed,
the next ones are already started, imported and compiled.
"""
from __future__ import annotations

import atexit
import queue
import threading
import time
import weakref

from kernelzero.eval.device.gpu_lock import gpu_lock_for
from kernelzero.eval.sandbox.channel import WorkerDied, WorkerTimeout
from kernelzero.eval.sandbox.sandbox import SandboxLimits, SandboxWorker
from kernelzero.eval.worker.warm_up import GPU_WARM_STAGES


class SparePool:
    def __init__(self, device: str, limits: SandboxLimits, work_root: str | None, size: int,
                 start_method: str = "spawn", reserve_mb: int = 0):
        self.device, self.limits, self.work_root, self.size = device, limits, work_root, size
        self.start_method, self.reserve_mb = start_method, reserve_mb
        self._ready: queue.Queue[SandboxWorker] = queue.Queue()
        self._starting = 0
        self._expected: int | None = None  # takes still expected by the batches in progress
        self._batches = 0  # batches begun (`begin_batch`) and not yet ended
        self._waiting = 0  # takers waiting for a spare
        self._lock = threading.Lock()
        self._closed = False
        self._paused = False  # `pause`: no spare kept (a judgement runs alone)
        # Spares hold temp dirs (on /dev/shm): close them even if the owner forgets to.
        ref = weakref.ref(self)
        atexit.register(lambda: ref() is not None and ref().close())

    def take(self, name: str) -> SandboxWorker:
        """A started, warmed worker: a ready spare, else the next spare whose start is already
        under way, else a new one started here."""
        with self._lock:
            if self._expected:
                self._expected -= 1
            self._waiting += 1
        self._refill()
        w = self._wait_for_spare()
        if w is None:
            w = self._new()
        w.name = name
        self._refill()
        return w

    def _wait_for_spare(self) -> SandboxWorker | None:
        """Wait for a spare while the starts in flight can serve every waiting taker; None when
        they cannot (the caller starts its own). A start already under way ends sooner than
        one begun now, and one more start would only slow the others down (CPU, GPU lock)."""
        counted = True
        try:
            while True:
                try:
                    return self._ready.get(timeout=0.05)
                except queue.Empty:
                    with self._lock:
                        if self._closed or self._paused or self._starting < self._waiting:
                            self._waiting -= 1
                            counted = False
                            return None
        finally:
            if counted:
                with self._lock:
                    self._waiting -= 1

    def expect(self, takes: int | None) -> None:
        """A batch that will take about `takes` workers starts (None: it ended). Until it ends,
        the pool only starts spares the batch will still take: a spare started meanwhile for a
        later batch costs this one CPU time and GPU-lock holds (a start creates a CUDA context),
        while between batches the pool refills to its full size."""
        with self._lock:
            self._expected = None if takes is None else max(0, int(takes))
        self._refill()

    def begin_batch(self, takes: int) -> None:
        """`expect` for batches that may overlap (several threads judging at once): their takes
        add up, and the pool goes back to full size only when the last one ends."""
        with self._lock:
            self._batches += 1
            self._expected = (self._expected or 0) + max(0, int(takes))
        self._refill()

    def end_batch(self) -> None:
        """A batch from `begin_batch` ended. The takes it expected but did not make stay counted
        until the last batch ends (an overestimate, capped by the pool size)."""
        with self._lock:
            self._batches = max(0, self._batches - 1)
            if not self._batches:
                self._expected = None
        self._refill()

    def fill(self, timeout_s: float) -> int:
        """Start spares up to the pool size and wait (at most timeout_s) until they are ready,
        so that a long-lived judge (a trainer, the service) pays start-up before its first batch.
        Returns how many are ready."""
        self._refill()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            with self._lock:
                if self._starting == 0 or self._ready.qsize() >= self.size:
                    break
            time.sleep(0.05)
        return self._ready.qsize()

    def _new(self) -> SandboxWorker:
        w = SandboxWorker(self.device, self.limits, self.work_root, name="w",
                          start_method=self.start_method)
        try:
            w.start()
            w.request({"op": "warm", "device": self.device, "stages": ["imports"]}, 120)
            # Creating a CUDA context and library handles would disturb a timing in progress; it
            # does not disturb other modules' correctness trials (shared). One stage per hold,
            # so a timing that queues waits for one stage, not a whole start-up.
            for stage in GPU_WARM_STAGES if self.device == "cuda" else ():
                with gpu_lock_for(self.device, shared=True, what=f"spare_{stage}"):
                    w.request({"op": "warm", "device": self.device, "stages": [stage],
                               "reserve_mb": self.reserve_mb}, 120)
        except (WorkerDied, WorkerTimeout):
            w.close()
            raise
        return w

    def ready(self) -> int:
        """Spares started and waiting to be taken (each holds its CUDA context on a GPU)."""
        return self._ready.qsize()

    def pause(self) -> None:
        """Close the ready spares and keep none until `resume` (each holds a CUDA context and
        library workspaces: a judgement that must run alone gets that memory back). `take`
        still works: it starts a worker of its own."""
        with self._lock:
            self._paused = True
        self._drain()

    def resume(self) -> None:
        with self._lock:
            self._paused = False
        self._refill()

    def _refill(self) -> None:
        if self.size <= 0:
            return
        with self._lock:
            if self._paused:
                return
            want = self.size if self._expected is None else \
                min(self.size, self._expected + self._waiting)
            missing = want - self._ready.qsize() - self._starting
            if self._closed or missing <= 0:
                return
            self._starting += missing
        for _ in range(missing):
            threading.Thread(target=self._start_one, daemon=True).start()

    def _start_one(self) -> None:
        try:
            w = self._new()
        except (WorkerDied, WorkerTimeout, OSError):
            w = None
        with self._lock:
            self._starting -= 1
            closed = self._closed or self._paused
        if w is not None:
            if closed:
                w.close()
            else:
                self._ready.put(w)

    def close(self) -> None:
        with self._lock:
            self._closed = True
        self._drain()

    def _drain(self) -> None:
        while True:
            try:
                self._ready.get_nowait().close()
            except queue.Empty:
                break
