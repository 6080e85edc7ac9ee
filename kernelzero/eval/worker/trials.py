"""How a sandbox worker runs the correctness trials (the worker's `run` command).

Runs inside the worker process (worker.Worker.run calls `run_trials` with the candidate's
allocations poisoned). For each trial, in order: fresh inputs from the reference's `get_inputs`
under the trial's seed, written into the previous trial's buffers by every other trial of a
candidate (`reuse`; the judge numbers the trials, `index`, so the rule holds across requests),
a few elements changed in place where the trial says `poke`, a pristine copy and a checksum of
them, one forward, its outputs written (or shared) in the stream's order before a device-wide
synchronize, then the mutation check. The checksum and the mutation check come back in one
transfer per trial; both are computed in chunks, so a trial holds its inputs, their pristine
copy and what the forward allocates, and no scratch the size of an input (KernelBench's inputs
reach 16 GiB).

Inputs larger than COPY_MAX_BYTES in all are never held twice: a candidate's old buffers are
dropped before the new draw (the caching allocator hands the same blocks back: the same
addresses, new values), and the mutation check compares checksums taken before and after the
call instead of a pristine copy. So a trial holds one set of inputs and what the forward
allocates, whatever the inputs' size (a task whose inputs take half the GPU can be judged).

The poke trial follows a trial with the same seed in the same buffers: to the module, the same
input buffers with a few elements changed. A kernel that memoises its result by a sample of its
input (a few values at fixed positions) answers with the stale result there.
"""
from __future__ import annotations

import time
import traceback

from kernelzero.eval.device.footprint import COPY_MAX_BYTES  # inputs never held twice above it
from kernelzero.eval.worker.failures import classify, one_line

CHUNK = 1 << 24          # elements per chunk of the checksum and the mutation check
POKE_ELEMENTS = 8        # elements of each input tensor a poke changes


def run_trials(worker, cmd: dict, results: list) -> dict:
    """Every other trial of a candidate (odd `index`) and every poke trial write their fresh
    values into the buffers of the trial before them (kept by the worker across requests), so
    a result cached by input address (or by buffer identity) is wrong there; the others' fresh
    buffers replace them. A reference (`reuse` false) keeps no buffers."""
    torch = worker.torch
    reuse = bool(cmd.get("reuse", worker.role == "candidate"))
    peak_seen = 0
    for n, trial in enumerate(cmd["trials"]):
        seed, dist = int(trial["seed"]), trial.get("dist", "task")
        index, poke_seed = int(trial.get("index", n)), int(trial.get("poke", 0))
        tag = f"{n}_{seed}_{dist}.bin"  # names the files this trial writes
        t_in = time.perf_counter()
        kept = _previous_buffers_kept(worker)
        into_base = reuse and kept and (index % 2 == 1 or bool(poke_seed))
        try:
            inputs = worker.make_inputs(seed, dist)
        except BaseException as e:  # noqa: BLE001
            return {"ok": False, "status": "input_error", "reason": one_line(e)}
        inputs = _trial_buffers(worker, inputs, into_base, reuse)
        if poke_seed:
            poke(torch, inputs, poke_seed)
        t_drawn = time.perf_counter()
        small = tensor_bytes(torch, inputs) <= COPY_MAX_BYTES
        pristine = _pristine(torch, inputs, small)
        digest = worker.digest_parts(inputs)  # queued before the forward: the values it gets
        entry = {"seed": seed, "dist": dist, "poke": poke_seed,
                 "input_bytes": tensor_bytes(torch, inputs)}
        if cmd.get("return_inputs"):
            entry["inputs"] = worker._write(f"in_{tag}", inputs)
        t0 = time.perf_counter()
        held, peak = _reset_peak(worker)
        peak_seen = max(peak_seen, peak)
        try:
            out = _forward(worker, inputs, entry, bool(cmd.get("log_ops")) and not results,
                           f"out_{tag}", held)
        except BaseException as e:  # noqa: BLE001
            return _failed_trial(worker, e, seed)
        entry["wall_ms"] = (time.perf_counter() - t0) * 1e3
        entry["inputs_ms"] = (t0 - t_in) * 1e3  # fresh inputs, their pristine copy, digest
        entry["draw_ms"] = (t_drawn - t_in) * 1e3  # of which the fresh inputs (host time)
        t1 = time.perf_counter()
        _check_inputs(worker, entry, inputs, pristine, small, digest, f"inafter_{tag}")
        entry["mutation_check_ms"] = (time.perf_counter() - t1) * 1e3
        del out, inputs, pristine
        results.append(entry)
    return _reply(worker, results, peak_seen)


def _previous_buffers_kept(worker) -> bool:
    """Whether the previous trial's inputs are held for this trial to write into. Inputs too
    large to hold twice are dropped here, before the new draw, whether it would write into them
    or replace them (the caching allocator hands the same blocks to the new draw: the same
    addresses, new values)."""
    if worker._base is not None and tensor_bytes(worker.torch, worker._base) > COPY_MAX_BYTES:
        worker._base = None
    return worker._base is not None


def _trial_buffers(worker, fresh: list, into_base: bool, reuse: bool) -> list:
    """The inputs a trial runs on: the fresh values copied into the previous trial's buffers
    (`into_base`, where the layouts match), or else the fresh buffers, which a candidate keeps
    (`reuse`) as the buffers the next trial writes into."""
    torch, base = worker.torch, worker._base
    if into_base and _same_layout(torch, base, fresh):
        for b, f in zip(base, fresh):
            if isinstance(b, torch.Tensor):
                b.copy_(f)
        return list(base)
    if reuse:
        worker._base = fresh
    return fresh


def _pristine(torch, inputs: list, small: bool) -> list:
    """What the mutation check compares the inputs with after the call: a copy of each (compared
    bitwise), or, for inputs too large to copy, two checksums of each."""
    if small:
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    return [_checksums(torch, x) for x in inputs]


def _reset_peak(worker) -> tuple[int | None, int]:
    """Before a forward on CUDA: (bytes allocated now, their peak so far), the peak then reset so
    that what the forward allocates at its own peak can be read after it. (None, 0) on the CPU."""
    if worker.device != "cuda":
        return None, 0
    held, peak = allocated_bytes(worker.torch)
    worker.torch.cuda.reset_peak_memory_stats()
    return held, peak


def _forward(worker, inputs: list, entry: dict, log_ops: bool, out_name: str, held: int | None):
    """One forward without grad, its outputs written (or shared) as `out_name`, then a
    device-wide synchronize; returns the outputs. `entry` gains `aten_ops` (`log_ops`),
    `forward_peak_bytes` (CUDA, where `held` is the bytes allocated before it: the forward's own
    footprint is its inputs and what it allocates at its peak) and `outputs`."""
    torch = worker.torch
    with torch.no_grad():
        if log_ops:
            out, entry["aten_ops"] = worker._forward_logged(inputs)
        else:
            out = worker.model(*inputs)
    if held is not None:
        entry["forward_peak_bytes"] = entry["input_bytes"] + allocated_bytes(torch)[1] - held
    # Copy the outputs to the host in the order of the current stream *before* any
    # device-wide synchronize: work left running on an unjoined side stream (which
    # a real consumer of the output would race with) is then caught as wrong values.
    entry["outputs"] = worker._write(out_name, out, sizes_arena=True)
    worker._sync()
    return out


def _check_inputs(worker, entry: dict, inputs: list, pristine: list, small: bool, digest: list,
                  after_name: str) -> None:
    """The input digest and the mutation check: `entry` gains `input_digest`, `mutated` (the
    positions of the inputs the call changed) and, if any, `inputs_after` (written as
    `after_name`). Both come back in one transfer: each read waits for the GPU, which other
    processes' work shares, so fewer reads hold the GPU lock for less."""
    torch = worker.torch
    same = [(i, _same(torch, a, b) if small else _same_checksums(torch, a, b))
            for i, (a, b) in enumerate(zip(inputs, pristine)) if isinstance(a, torch.Tensor)]
    pending = digest + [f for _, f in same if isinstance(f, torch.Tensor)]
    values = torch.stack([v.to(torch.float64) for v in pending]).tolist() if pending else []
    entry["input_digest"] = sum(values[:len(digest)])
    flags = iter(values[len(digest):])
    mutated = [i for i, f in same if not (next(flags) if isinstance(f, torch.Tensor) else f)]
    entry["mutated"] = mutated
    if mutated:
        entry["inputs_after"] = worker._write(after_name, [inputs[i] for i in mutated])


def _reply(worker, results: list, peak_seen: int) -> dict:
    """The reply once every trial ran; on CUDA with the peak bytes this process held and the
    largest forward's own footprint."""
    worker._sync()  # the last copies shared (an arena's carry no event): done before replying
    reply = {"ok": True, "trials": results}
    if worker.device == "cuda":
        reply["peak_mem_bytes"] = int(max(peak_seen, allocated_bytes(worker.torch)[1]))
        reply["forward_peak_bytes"] = max((r.get("forward_peak_bytes", 0) for r in results),
                                          default=0)
    return reply


def _failed_trial(worker, e: BaseException, seed: int) -> dict:
    """The reply for a trial that raised. Out of memory: with the bytes this process held at
    its peak, so the judge can say what the module needed."""
    if isinstance(e, SystemExit):
        return {"ok": False, "status": "rejected", "trial": seed,
                "reason": f"the module called sys.exit({e.code}) during forward"}
    reply = {"ok": False, "status": classify(e, "run"), "reason": one_line(e),
             "detail": traceback.format_exc()[-2000:], "trial": seed}
    if "out of memory" in str(e).lower():
        reply["reason"] = "ran out of memory: " + reply["reason"]
        if worker.device == "cuda":
            try:
                reply["peak_mem_bytes"] = allocated_bytes(worker.torch)[1]
            except Exception:  # noqa: BLE001 - a figure for the message only
                pass
    return reply


def poke(torch, inputs: list, seed: int) -> None:
    """Change up to POKE_ELEMENTS elements of each input tensor in place, at positions drawn from
    `seed`: each takes the value of another element of the same tensor, so it stays within the
    input's own values (indices stay valid indices, probabilities stay probabilities)."""
    g = torch.Generator().manual_seed(seed)
    for x in inputs:
        if not isinstance(x, torch.Tensor) or x.numel() < 2:
            continue
        dst, src = poke_positions(torch, x.numel(), g)
        dst = torch.unravel_index(torch.tensor(dst, device=x.device), x.shape)
        src = torch.unravel_index(torch.tensor(src, device=x.device), x.shape)
        x.index_put_(dst, x[src])


def poke_positions(torch, numel: int, g) -> tuple[list[int], list[int]]:
    """(destinations, sources) as flat positions: POKE_ELEMENTS draws, each destination kept once
    (its first draw). On CUDA, `index_put_` with a repeated destination stores any one of its
    values, so the reference's and the candidate's processes could hold different inputs and an
    honest kernel be rejected for tampering (seen on the H200 with a 300-element input)."""
    at = torch.randint(numel, (2, POKE_ELEMENTS), generator=g).tolist()
    first: dict[int, int] = {}
    for d, s in zip(*at):
        first.setdefault(d, s)
    return list(first), list(first.values())


def tensor_bytes(torch, xs) -> int:
    return sum(x.numel() * x.element_size() for x in xs if isinstance(x, torch.Tensor))


def _checksums(torch, x):
    """Two float64 checksums of a tensor, as a 2-element tensor on its device (None for a
    non-tensor): the sum of |x| and a position-weighted sum (a move or a sign change shows in
    one of them). A change that keeps both takes a deliberate effort; the inputs too large to
    copy (COPY_MAX_BYTES) are checked this way."""
    if not isinstance(x, torch.Tensor):
        return None
    flat = x.detach().reshape(-1)
    if flat.is_complex():
        flat = torch.view_as_real(flat).reshape(-1)
    parts = []
    for i in range(0, flat.numel(), CHUNK):
        c = flat[i:i + CHUNK].to(torch.float64)
        w = torch.arange(i, i + c.numel(), device=c.device, dtype=torch.float64) \
            .mul_(0.6180339887).remainder_(1.0).add_(0.5)
        parts.append(torch.stack([c.abs().sum(), c.mul_(w).sum()]))
    return torch.stack(parts).sum(0) if parts else torch.zeros(2, dtype=torch.float64,
                                                                 device=x.device)


def _same_checksums(torch, a, before):
    """Whether `a` still has the checksums `before` (NaN matching NaN), as a 0-d bool tensor."""
    if before is None:
        return False
    after = _checksums(torch, a)
    return ((after == before) | (torch.isnan(after) & torch.isnan(before))).all()


def abs_sum(torch, x):
    """The sum of |x| in float64 as a 0-d tensor on x's device, in chunks of CHUNK elements
    (a whole-tensor `abs().sum(dtype=float64)` makes an |x| and a float64 copy of it)."""
    flat = x.reshape(-1)
    parts = [_abs_sum_part(torch, flat[i:i + CHUNK]) for i in range(0, flat.numel(), CHUNK)]
    if not parts:
        return torch.zeros((), dtype=torch.float64, device=x.device)
    return parts[0] if len(parts) == 1 else torch.stack(parts).sum()


def _abs_sum_part(torch, c):
    if c.is_complex() or c.dtype == torch.bool:
        return c.double().abs().sum()
    return c.abs().sum(dtype=torch.float64)


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
    bool tensor on the inputs' device (read by the caller), or False when shape or dtype
    changed. Compared in chunks of CHUNK elements (no whole-input boolean scratch)."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    fa, fb = a.reshape(-1), b.reshape(-1)
    if not fa.numel():
        return True
    parts = [_same_part(torch, fa[i:i + CHUNK], fb[i:i + CHUNK])
             for i in range(0, fa.numel(), CHUNK)]
    return parts[0] if len(parts) == 1 else torch.stack(parts).all()


def _same_part(torch, a, b):
    if a.is_floating_point() or a.is_complex():
        return ((a == b) | (torch.isnan(a) & torch.isnan(b))).all()
    return (a == b).all()
