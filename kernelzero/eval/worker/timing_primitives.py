"""The timing primitives a sandbox worker captures before any untrusted code loads
(`capture_primitives`), with the two it finds in the system: the CUDA runtime's
cudaCtxResetPersistingL2Cache (`l2_reset_function`) and the calling thread's run-queue delay
(`run_delay_reader`).

The timed loop (timer.py) calls only these, so a candidate that patches `torch.cuda.Event` or
`time.perf_counter` changes nothing there. Does not cover the loop itself (timer.py), nor what
it measures before its first timed call (timing_calibration.py).
"""
from __future__ import annotations

import os
import time


def capture_primitives(torch) -> dict:
    """Timing primitives taken before untrusted code loads. The C-level methods of
    `_CudaEventBase` cannot be monkeypatched (built-in type), unlike `torch.cuda.Event`'s."""
    base = getattr(torch._C, "_CudaEventBase", None)
    return {"clock": time.perf_counter, "run_delay": run_delay_reader(),
            "Event": torch.cuda.Event, "l2_reset": None,
            "stream": torch.cuda.current_stream,
            "sync": getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize),
            "gpu_sleep": getattr(torch._C, "_cuda_sleep", None),  # spin `cycles` on the stream
            "record": getattr(base, "record", None) or (lambda ev, s: ev.record(s)),
            "elapsed": getattr(base, "elapsed_time", None) or (lambda a, b: a.elapsed_time(b)),
            "query": getattr(base, "query", None) or (lambda ev: ev.query()),
            "ev_sync": getattr(base, "synchronize", None) or (lambda ev: ev.synchronize()),
            "sleep": time.sleep}


def l2_reset_function():
    """cudaCtxResetPersistingL2Cache from the CUDA runtime torch already loaded (best effort)."""
    import ctypes
    for name in ("libcudart.so", "libcudart.so.13", "libcudart.so.12"):
        try:
            fn = ctypes.CDLL(name).cudaCtxResetPersistingL2Cache
            fn.restype = ctypes.c_int
            return fn
        except (OSError, AttributeError):
            continue
    return None


def run_delay_reader():
    """A function giving the milliseconds the calling thread has waited on a run queue so far
    (ready to run, no CPU free), from /proc/thread-self/schedstat; where that cannot be read it
    gives 0 (no synchronize counts as disturbed: every gap is judged, as before)."""
    try:
        fd = os.open("/proc/thread-self/schedstat", os.O_RDONLY)
        pread = os.pread
        int(pread(fd, 128, 0).split()[1])
    except (OSError, ValueError, IndexError):
        return lambda: 0.0
    # The file names the thread that opened it: read from another thread, it says nothing of the
    # caller. The worker opens it in the thread that runs its commands.

    def read() -> float:
        try:
            return int(pread(fd, 128, 0).split()[1]) / 1e6
        except (OSError, ValueError, IndexError):  # the module closed or replaced the descriptor
            return 0.0
    return read
