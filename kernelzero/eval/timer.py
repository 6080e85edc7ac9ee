"""How a sandbox worker times a module's forward calls (the worker's `time` command).

Runs inside the worker process, on primitives captured before any untrusted code was imported
(`capture_primitives`), so a candidate that patches `torch.cuda.Event` or `time.perf_counter`
changes nothing here. The judge cross-checks the result against its own wall clock
(evaluator.py) and re-checks the outputs of some timed calls.

Each call gets fresh inputs; even-numbered calls copy them into the first call's buffers (so a
cache keyed on addresses is wrong there), odd-numbered calls use new buffers. Before each call:
the L2 cache is flushed (and persisting lines reset), then the GPU spins long enough to cover the
host's launch of the call (`launch_lead`). The call is bracketed by a start and an end event on
the timing stream, so neither launch latency nor a synchronize's latency is inside; a third
event after a device-wide synchronize catches work left running after the call returned (an
unjoined side stream, a background thread): when its gap exceeds the synchronize latency,
calibrated on empty calls (`sync_latency_ms`), the times include that work and the reply says
`work_after_stream`.
"""
from __future__ import annotations

import statistics
import time


def capture_primitives(torch) -> dict:
    """Timing primitives taken before untrusted code loads. The C-level methods of
    `_CudaEventBase` cannot be monkeypatched (built-in type), unlike `torch.cuda.Event`'s."""
    base = getattr(torch._C, "_CudaEventBase", None)
    return {"clock": time.perf_counter, "Event": torch.cuda.Event, "l2_reset": None,
            "stream": torch.cuda.current_stream,
            "sync": getattr(torch._C, "_cuda_synchronize", torch.cuda.synchronize),
            "gpu_sleep": getattr(torch._C, "_cuda_sleep", None),  # spin `cycles` on the stream
            "record": getattr(base, "record", None) or (lambda ev, s: ev.record(s)),
            "elapsed": getattr(base, "elapsed_time", None) or (lambda a, b: a.elapsed_time(b)),
            "ev_sync": getattr(base, "synchronize", None) or (lambda ev: ev.synchronize())}


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


def time_calls(worker, cmd: dict) -> dict:
    """The `time` command: `worker` holds the built model, its inputs and the primitives.
    Exceptions propagate (the worker turns them into a failed reply)."""
    torch, prim = worker.torch, worker.primitives
    model = torch.compile(worker.model) if cmd.get("compile") else worker.model
    seeds, checked = cmd["seeds"], set(cmd.get("checked", []))
    min_n, max_n = int(cmd["min_trials"]), min(int(cmd["max_trials"]), len(seeds))
    rel_spread, budget = float(cmd["rel_spread"]), float(cmd["budget_s"])
    flush = torch.empty(int(cmd.get("flush_bytes", 256 * 2**20)) // 4, dtype=torch.int32,
                        device=worker.device)
    base = worker.make_inputs(int(seeds[0]))
    # Warm up by count and by time: the first calls after an idle spell run at idle clocks, and
    # a fixed count of a fast kernel ends before the clocks are up.
    warm_n, warm_s = int(cmd.get("warmup", 3)), float(cmd.get("warmup_ms", 0.0)) / 1e3
    t_warm, n, host_ms = prim["clock"](), 0, []
    with torch.no_grad():
        while n < warm_n or (prim["clock"]() - t_warm < warm_s and n < 10_000):
            t_call = prim["clock"]()
            model(*base)
            host_ms.append(1e3 * (prim["clock"]() - t_call))
            n += 1
            if n % 8 == 0:
                prim["sync"]()  # so the wall clock tracks GPU time, not launch speed
    prim["sync"]()
    stream = prim["stream"]()
    lead = launch_lead(prim, stream, host_ms[1:] or host_ms)
    start, end, after = (prim["Event"](enable_timing=True) for _ in range(3))
    latency = sync_latency_ms(prim, stream, end, after)
    t_stream, t_all, gaps, outputs = [], [], [], {}
    t_start = prim["clock"]()
    for i in range(max_n):
        fresh = worker.make_inputs(int(seeds[i]))
        if i % 2 == 0:
            for b, f in zip(base, fresh):
                if isinstance(b, torch.Tensor):
                    b.copy_(f)
            args = base
        else:
            args = fresh
        if prim["l2_reset"] is not None:
            prim["l2_reset"]()  # persisting-L2 lines would survive the flush
        prim["sync"]()
        flush.zero_()
        if lead:  # the GPU spins while the host launches the call
            prim["gpu_sleep"](lead)
        with torch.no_grad():
            prim["record"](start, stream)
            out = model(*args)
            prim["record"](end, stream)
        if i in checked:  # a stream-ordered copy, before any synchronize (see Worker.run)
            outputs[str(i)] = worker._write(f"timed_{i}.bin", out)
        prim["sync"]()
        prim["record"](after, stream)
        prim["ev_sync"](after)
        t_stream.append(prim["elapsed"](start, end))
        t_all.append(prim["elapsed"](start, after))
        if i not in checked:
            gaps.append(t_all[-1] - t_stream[-1])
        del out
        if len(t_stream) >= min_n and (i + 1) > max(checked, default=-1):
            if prim["clock"]() - t_start > budget or spread_ok(t_stream, rel_spread):
                break
    gap = statistics.median(gaps) if gaps else 0.0
    late = gap > latency + max(0.02, 0.05 * statistics.median(t_stream))
    times = [max(s, a - latency) for s, a in zip(t_stream, t_all)] if late else t_stream
    return {"ok": True, "times_ms": times, "outputs": outputs, "work_after_stream": late,
            "warmup_calls": n, "launch_lead_cycles": lead,
            "sync_latency_ms": latency, "after_stream_gap_ms": gap}


def launch_lead(prim, stream, host_ms: list[float]) -> int:
    """GPU cycles to spin before each timed call's start event: about twice the host time the
    module's forward takes to launch (measured in the warm-up), 20 us to 2 ms.

    Without it the GPU may reach the start event before the host has launched the call's first
    kernel, and the launch latency is timed as if it were GPU work: for a Python launcher
    (Triton) on a busy host, tens to hundreds of microseconds, as much as a fast kernel itself.
    A forward that synchronises the host pays for it anyway (its events wait for the spin)."""
    if prim["gpu_sleep"] is None or not host_ms:
        return 0
    want_ms = min(2.0, max(0.02, 2.0 * statistics.median(host_ms) + 0.02))
    start, end = prim["Event"](enable_timing=True), prim["Event"](enable_timing=True)
    probe = 1_000_000
    prim["record"](start, stream)
    prim["gpu_sleep"](probe)
    prim["record"](end, stream)
    prim["ev_sync"](end)
    ms = prim["elapsed"](start, end)
    return int(probe * want_ms / ms) if ms > 0 else 0


def sync_latency_ms(prim, stream, end, after, n: int = 11) -> float:
    """Median gap between an event recorded on an idle stream and one recorded right after a
    device-wide synchronize: what the third event of a timed call adds when no work is left."""
    gaps = []
    for _ in range(n):
        prim["sync"]()
        prim["record"](end, stream)
        prim["sync"]()
        prim["record"](after, stream)
        prim["ev_sync"](after)
        gaps.append(prim["elapsed"](end, after))
    return statistics.median(gaps)


def spread_ok(times: list[float], rel: float) -> bool:
    """The stopping rule: the inter-quartile range is within `rel` of the median."""
    q = statistics.quantiles(times, n=4, method="inclusive")
    med = statistics.median(times)
    return med > 0 and (q[2] - q[0]) / med <= rel
