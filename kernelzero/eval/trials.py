"""How a sandbox worker runs the correctness trials (the worker's `run` command).

Runs inside the worker process (worker.Worker.run calls `run_trials` with the candidate's
allocations poisoned). For each trial, in order: fresh inputs from the reference's
`get_inputs` under the trial's seed (every other trial written into the first trial's buffers),
a pristine copy and a checksum of them, one forward, its outputs written (or shared) in the
stream's order before a device-wide synchronize, then the mutation check. The checksum and the
mutation check come back in one transfer per trial.
"""
from __future__ import annotations

import time
import traceback

from kernelzero.eval.failures import classify, one_line


def run_trials(worker, cmd: dict, results: list) -> dict:
    """Every other trial writes its fresh values into the first trial's buffers, so a result
    cached by input address (or by buffer identity) is wrong there."""
    torch = worker.torch
    base, peak_seen = None, 0
    for n, trial in enumerate(cmd["trials"]):
        seed, dist = int(trial["seed"]), trial.get("dist", "task")
        t_in = time.perf_counter()
        try:
            inputs = worker.make_inputs(seed, dist)
        except BaseException as e:  # noqa: BLE001
            return {"ok": False, "status": "input_error", "reason": one_line(e)}
        if base is None:
            base = inputs
        elif n % 2 == 1 and _same_layout(torch, base, inputs):
            for b, f in zip(base, inputs):
                if isinstance(b, torch.Tensor):
                    b.copy_(f)
            inputs = list(base)
        t_drawn = time.perf_counter()
        pristine = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
        digest = worker.digest_parts(inputs)  # queued before the forward: the values it gets
        entry = {"seed": seed, "dist": dist,
                 "input_bytes": sum(x.numel() * x.element_size() for x in inputs
                                    if isinstance(x, torch.Tensor))}
        if cmd.get("return_inputs"):
            entry["inputs"] = worker._write(f"in_{seed}_{dist}.bin", pristine)
        t0 = time.perf_counter()
        cuda = worker.device == "cuda"
        if cuda:  # this forward's own footprint: inputs + what it allocates at its peak
            held, peak = allocated_bytes(torch)
            peak_seen = max(peak_seen, peak)
            torch.cuda.reset_peak_memory_stats()
        try:
            with torch.no_grad():
                if cmd.get("log_ops") and not results:
                    out, entry["aten_ops"] = worker._forward_logged(inputs)
                else:
                    out = worker.model(*inputs)
            if cuda:
                entry["forward_peak_bytes"] = entry["input_bytes"] + allocated_bytes(torch)[1] - held
            # Copy the outputs to the host in the order of the current stream *before* any
            # device-wide synchronize: work left running on an unjoined side stream (which
            # a real consumer of the output would race with) is then caught as wrong values.
            entry["outputs"] = worker._write(f"out_{seed}_{dist}.bin", out, sizes_arena=True)
            worker._sync()
        except BaseException as e:  # noqa: BLE001
            status = "runtime_error"
            if isinstance(e, SystemExit):
                status = "rejected"
                reason = f"the module called sys.exit({e.code}) during forward"
            else:
                status, reason = classify(e, "run"), one_line(e)
                if "out of memory" in str(e).lower():
                    reason = "ran out of memory: " + reason
            return {"ok": False, "status": status, "reason": reason,
                    "detail": traceback.format_exc()[-2000:], "trial": seed}
        entry["wall_ms"] = (time.perf_counter() - t0) * 1e3
        entry["inputs_ms"] = (t0 - t_in) * 1e3  # fresh inputs, their pristine copy, digest
        entry["draw_ms"] = (t_drawn - t_in) * 1e3  # of which the fresh inputs (host time)
        t1 = time.perf_counter()
        # The digest and the mutation check come back in one transfer (each waits for the
        # GPU, which other processes' work shares: fewer of them, shorter GPU-lock holds).
        same = [(i, _same(torch, a, b)) for i, (a, b) in enumerate(zip(inputs, pristine))
                if isinstance(a, torch.Tensor)]
        pending = digest + [f for _, f in same if isinstance(f, torch.Tensor)]
        values = torch.stack([v.to(torch.float64) for v in pending]).tolist() if pending else []
        entry["input_digest"] = sum(values[:len(digest)])
        flags = iter(values[len(digest):])
        mutated = [i for i, f in same if not (next(flags) if isinstance(f, torch.Tensor) else f)]
        entry["mutated"] = mutated
        if mutated:
            entry["inputs_after"] = worker._write(f"inafter_{seed}_{dist}.bin",
                                                [inputs[i] for i in mutated])
        entry["mutation_check_ms"] = (time.perf_counter() - t1) * 1e3
        del out, inputs, pristine
        results.append(entry)
    worker._sync()  # the last copies shared (an arena's carry no event): done before replying
    reply = {"ok": True, "trials": results}
    if worker.device == "cuda":
        reply["peak_mem_bytes"] = int(max(peak_seen, allocated_bytes(torch)[1]))
        reply["forward_peak_bytes"] = max((r.get("forward_peak_bytes", 0) for r in results),
                                          default=0)
    return reply


def allocated_bytes(torch) -> tuple[int, int]:
    """(current, peak) bytes this process has allocated on its CUDA device. From the allocator's
    nested statistics: `torch.cuda.memory_allocated` and `max_memory_allocated` each flatten the
    whole statistics tree in Python (about 0.35 ms)."""
    st = torch.cuda.memory_stats_as_nested_dict().get("allocated_bytes", {}).get("all", {})
    return int(st.get("current", 0)), int(st.get("peak", 0))


def _same_layout(torch, a: list, b: list) -> bool:
    return len(a) == len(b) and all(
        (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and x.shape == y.shape
         and x.dtype == y.dtype and x.stride() == y.stride()) or
        (not isinstance(x, torch.Tensor) and not isinstance(y, torch.Tensor))
        for x, y in zip(a, b))


def _same(torch, a, b):
    """Bitwise-equal values (NaN equals NaN): did the call leave this input unchanged? A 0-d
    bool tensor on the inputs' device (read by the caller), or False when shape or dtype changed."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.is_floating_point() or a.is_complex():
        return ((a == b) | (torch.isnan(a) & torch.isnan(b))).all()
    return (a == b).all()
