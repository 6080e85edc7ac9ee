"""How a sandbox worker times a module's forward calls (the worker's `time` command).

Runs inside the worker process, on primitives captured before any untrusted code was imported
(`capture_primitives`, timing_primitives.py), so a candidate that patches `torch.cuda.Event` or
`time.perf_counter` changes nothing here. The judge cross-checks the result against its own wall
clock (evaluator.py) and re-checks the outputs of some timed calls.

The loop is pipelined: the host queues call after call without waiting for the GPU, so the GPU
goes from one call straight to the next one's fresh inputs and L2 flush, and the host's own
work (the reference's `get_inputs`, the launch) runs while the GPU is still busy with an
earlier call. Per call, in stream order:

    draw of fresh inputs | [spin] | L2 flush | start event | forward | end event

- Fresh inputs for every call, drawn once the last call's inputs are dropped: the caching
  allocator hands their blocks back in stream order, so the new values land at addresses an
  earlier call used (a cache keyed on addresses answers stale, which the checked calls catch)
  without a copy (`same_address_calls` counts the draws that did).
- Launch cover: right after queueing a call the host asks whether the GPU has already passed the
  call's start event. If it has not, the whole call was queued before the GPU reached it, so its
  time holds no launch latency. If it has, the call is counted `launch_bound` (kept: it can only
  read slower) and the next calls get a spin of about twice that launch, as does every call the
  GPU could reach with nothing queued ahead of it (the first, the one after a synchronize, one
  whose predecessor already finished).
- Work left running: after a random one call in `sync_every` (more where the loop may stop
  early; at least MIN_SYNCED unchecked calls, and the last), the host synchronises the whole
  device and records a third event. When the median gap from the end event to it exceeds the
  synchronize latency (calibrated the same way behind an L2 flush) by LATE_MS or 5% (judged on
  SETTLE_SYNCED gaps before the loop may stop on it), work outlived the call (an unjoined side
  stream, a background thread): the reply says `work_after_stream` and only those calls' times
  count, each including that work. (Not every call is synchronised: that would leave the GPU
  waiting for the host between calls, 0.6-0.85 ms per call measured on the H200.)
- A busy host is not work after the call: a gap also holds any time the host thread spent
  waiting for a CPU (other processes ran there) when the GPU finished, and on a host whose
  cores are all busy that read like late work (0.17x-0.44x for identical candidates on the
  H200). A driver that spins through a long wait is preempted there, so for a call longer than
  SPIN_MS the host sleeps until the GPU reaches the call's start event (a blocking event: a
  woken thread runs soon), sleeps on for all but SPIN_MS of the call, and only then
  synchronizes the device (spinning). It reads how long it waited for a CPU meanwhile (the
  kernel's run-queue delay for this thread, /proc schedstat): a synchronize that waited more
  than RUN_DELAY_MS, or one whose call had already ended when it began (the host overslept),
  is disturbed. Once one is, calls are synchronised more often, so that MIN_SYNCED undisturbed
  ones are seen before the loop ends. The loop judges on the gaps of undisturbed synchronizes,
  and a late loop's times are those calls', whenever MIN_SYNCED of them exist; otherwise on
  every gap and call as before, and the reply says `host_busy` (the times are then an upper
  bound: a module that keeps the host's CPUs busy gains nothing by it; a host without
  schedstat is judged as before). A reference's loop (`late_counts` false) always reports its
  calls' own times: an upper bound of the reference's time would inflate every speedup against
  it (14x for an identical candidate on a busy host). Sleeping through the whole wait instead
  (a blocking end event) woke 0.1-0.3 ms late on an idle host, read as late work in 22 of 30
  loops.
- `cudaCtxResetPersistingL2Cache` before every call, so persisting L2 lines cannot survive the
  flush (its host time is reported, `l2_reset_ms`).

Here: the loop (`TimedLoop`) and its reply. What it measures before the first timed call is
timing_calibration.py's; the rules it decides by (which calls are synchronised, when it stops,
whether work was late) are timing_rules.py's.
"""
from __future__ import annotations

import math
import random
import statistics

from kernelzero.eval.worker.timing_calibration import (flush_gpu_ms, lead_ms_for,
                                                       spin_cycles_per_ms, sync_latency_ms,
                                                       warm_up)
from kernelzero.eval.worker.timing_rules import (MIN_SYNCED, SETTLE_SYNCED, SYNC_EVERY,
                                                 evidence_calls, is_late, is_undisturbed,
                                                 spread_ok, sync_chance, sync_gaps)

SPIN_MS = 1.0       # the host spins through the last this much of a synchronised call, no more


def time_calls(worker, cmd: dict) -> dict:
    """The `time` command: `worker` holds the built model, its inputs and the primitives.
    Exceptions propagate (the worker turns them into a failed reply)."""
    t_command = worker.primitives["clock"]()
    loop = TimedLoop(worker, cmd)
    loop.calibrate()
    loop.run()
    return loop.reply(t_command)


class TimedLoop:
    """One `time` command: its calibration (warm-up, spin rate, launch lead, flush time and
    synchronize latency), the pipelined loop of timed calls (the module docstring), and the
    reply built from the events the loop recorded."""

    def __init__(self, worker, cmd: dict):
        self.worker, self.torch, self.prim = worker, worker.torch, worker.primitives
        torch = self.torch
        self.model = torch.compile(worker.model) if cmd.get("compile") else worker.model
        self.cmd, self.seeds, self.checked = cmd, cmd["seeds"], set(cmd.get("checked", []))
        self.min_n = int(cmd["min_trials"])
        self.max_n = min(int(cmd["max_trials"]), len(self.seeds))
        self.rel_spread, self.budget = float(cmd["rel_spread"]), float(cmd["budget_s"])
        # The stopping rule waits until every checked call, and one unchecked call after them, ran,
        # and until MIN_SYNCED unchecked calls were followed by a synchronize (a loop that stops
        # early synchronises more often).
        self.first_stop = max(self.min_n, max(self.checked, default=-1) + 2)
        self.p_sync = max(1.0 / max(1, int(cmd.get("sync_every", SYNC_EVERY))),
                          MIN_SYNCED / self.first_stop)
        self.flush = torch.empty(int(cmd.get("flush_bytes", 256 * 2**20)) // 4, dtype=torch.int32,
                                 device=worker.device)
        self.afters: dict[int, object] = {}  # synchronised call -> its event after the synchronize
        self.pick = random.SystemRandom()  # which calls are synchronised: not from the seeds
        self.launch_bound, self.same_address, self.spins, self.l2_reset_s = 0, 0, [], 0.0
        self.outputs: dict[str, dict] = {}
        # unchecked synchronised call -> (its gap, ms its host thread waited for a CPU meanwhile)
        self.sampled: dict[int, tuple[float, float]] = {}
        self.covered = False  # whether queued GPU work lies ahead of the next call (then no spin)
        self.t_done: list[float] = []  # the times of the calls up to the last synchronised one
        self.n = 0  # calls queued so far

    def calibrate(self) -> None:
        """Warm up, then measure what the loop needs: the GPU's spin rate, the launch lead, the
        time of one L2 flush and the latency of a synchronize; make the events."""
        prim, cmd = self.prim, self.cmd
        self.host_ms, self.warm_n = warm_up(self.worker, self.model, self.seeds,
                                            int(cmd.get("warmup", 3)),
                                            float(cmd.get("warmup_ms", 0.0)))
        prim["sync"]()
        self.stream = prim["stream"]()
        self.rate = spin_cycles_per_ms(prim, self.stream)
        self.lead_ms = lead_ms_for(self.host_ms[1:] or self.host_ms) if self.rate else 0.0
        # a host waiting for a start event sleeps (see the docstring: busy hosts)
        self.starts = [prim["Event"](enable_timing=True, blocking=True) for _ in range(self.max_n)]
        self.ends = [self._event() for _ in range(self.max_n)]
        probe = self._event(), self._event()
        self.flush_ms = flush_gpu_ms(prim, self.stream, self.flush, *probe)  # never timed events
        self.latency = sync_latency_ms(prim, self.stream, self.flush, *probe)

    def _event(self):
        return self.prim["Event"](enable_timing=True)

    def _settled(self) -> bool:
        """Whether enough calls and gaps were seen for the stopping rule to apply."""
        return self.n >= self.first_stop and len(self.sampled) >= MIN_SYNCED and (
            len(self.sampled) >= SETTLE_SYNCED
            or not is_late(sync_gaps(self.sampled, evidence_calls(self.sampled)), self.t_done, self.latency))

    def run(self) -> None:
        """Queue call after call until the stopping rule, the budget or max_trials ends it."""
        prim, torch, worker = self.prim, self.torch, self.worker
        self.allocs = _allocator_counts(torch, worker.device)
        args = worker.make_inputs(int(self.seeds[0]))
        seen = _addresses(torch, args)
        self.t_start = prim["clock"]()
        while self.n < self.max_n:
            i = self.n
            out = self._queue_call(i, args)
            if i in self.checked:  # a stream-ordered copy, before any synchronize (see Worker.run)
                self.outputs[str(i)] = worker._write(f"timed_{i}.bin", out)
            self.n = i + 1
            last = self.n == self.max_n or (
                self._settled() and prim["clock"]() - self.t_start > self.budget)
            if last or self.pick.random() < sync_chance(self.p_sync, self.sampled,
                                                         self.max_n - self.n):
                self._synchronize(i)
            # This call's inputs are dropped before the next are drawn (same blocks, new values);
            # the draw is queued behind the call's end event, and the GPU runs it there.
            out = args = None
            if last or (i in self.afters and self._settled()
                        and spread_ok(self.t_done, self.rel_spread)):
                break
            args = worker.make_inputs(int(self.seeds[self.n]))
            now = _addresses(torch, args)
            self.same_address += bool(now) and now <= seen
            seen |= now
        prim["sync"]()
        self.loop_ms = 1e3 * (prim["clock"]() - self.t_start)

    def _queue_call(self, i: int, args):
        """Queue call `i` between its events, behind a spin where nothing queued covers its
        launch; note whether the GPU reached it before the host was done launching it."""
        prim = self.prim
        if prim["l2_reset"] is not None:
            t = prim["clock"]()
            prim["l2_reset"]()  # persisting-L2 lines would survive the flush
            self.l2_reset_s += prim["clock"]() - t
        t_launch = prim["clock"]()
        if self.covered and prim["query"](self.ends[i - 1]):
            self.covered = False  # the GPU caught up: at most this call's draw is ahead of it
        spin_ms = max(0.0, self.lead_ms - self.flush_ms) if not self.covered and self.rate else 0.0
        self.spins.append(spin_ms)
        if spin_ms > 0:  # the GPU spins, then flushes, while the host launches the call
            prim["gpu_sleep"](int(self.rate * spin_ms))
        self.flush.zero_()
        with self.torch.no_grad():
            prim["record"](self.starts[i], self.stream)
            out = self.model(*args)
            prim["record"](self.ends[i], self.stream)
        launch_ms = 1e3 * (prim["clock"]() - t_launch)
        self.covered = not prim["query"](self.starts[i])
        if not self.covered:
            # The GPU passed the start event before (or just as) the host finished queueing
            # the call, so this time can include launch latency (never less than the true
            # time: kept). Cover the next calls with a spin.
            self.launch_bound += 1
            self.lead_ms = max(self.lead_ms, lead_ms_for([launch_ms]))
        return out

    def _synchronize(self, i: int) -> None:
        """Synchronise the device after call `i`, record the event after it, and read the
        calls' times so far and (for an unchecked call) its gap and its host's wait for a CPU."""
        prim, starts, ends = self.prim, self.starts, self.ends
        self.afters[i] = self._event()
        delay = prim["run_delay"]()
        # asleep while the call has more than SPIN_MS to go (by the fastest call so far) ...
        overslept = _sleep_into(prim, starts[i], ends[i], min(self.t_done, default=0.0))
        prim["sync"]()  # ... then everything queued so far, on every stream, is done
        prim["record"](self.afters[i], self.stream)
        waited = math.inf if overslept else prim["run_delay"]() - delay
        self.covered = False
        prim["ev_sync"](self.afters[i])  # at once: the GPU has nothing else left
        self.t_done += [prim["elapsed"](starts[k], ends[k])
                        for k in range(len(self.t_done), self.n)]
        if i not in self.checked:
            self.sampled[i] = (prim["elapsed"](starts[i], self.afters[i]) - self.t_done[i], waited)

    def reply(self, t_command: float) -> dict:
        """The `time` command's reply: the times that count, and the loop's diagnostics."""
        prim, n, sampled, starts = self.prim, self.n, self.sampled, self.starts
        t_stream = [prim["elapsed"](starts[k], self.ends[k]) for k in range(n)]
        t_after = {k: prim["elapsed"](starts[k], ev) for k, ev in self.afters.items()}
        evidence = evidence_calls(sampled)
        gap = statistics.median(sync_gaps(sampled, evidence)) if evidence else 0.0
        late = is_late(sync_gaps(sampled, evidence), t_stream, self.latency)
        waits = [w for _, w in sampled.values()]
        # Work that outlived its call is only seen after a synchronize: then only those calls count.
        times = [max(t_stream[k], t_after[k] - self.latency) for k in evidence] \
            if late and self.cmd.get("late_counts", True) else t_stream
        between = [prim["elapsed"](self.ends[k - 1], starts[k]) for k in range(1, n)
                   if k - 1 not in self.afters]
        after_allocs = _allocator_counts(self.torch, self.worker.device)
        spins = self.spins
        return {"ok": True, "times_ms": times, "outputs": self.outputs, "work_after_stream": late,
                "host_busy": late and len(evidence) > sum(map(is_undisturbed, waits)),
                "warmup_calls": self.warm_n, "launch_lead_cycles": int(self.rate * self.lead_ms),
                "launch_lead_ms": self.lead_ms, "spin_ms_median": statistics.median(spins),
                "spun_calls": sum(s > 0 for s in spins), "synced_calls": len(self.afters),
                "between_calls_ms": statistics.median(between) if between else None,
                "flush_ms": self.flush_ms, "l2_reset_ms": 1e3 * self.l2_reset_s,
                "launch_bound_calls": self.launch_bound, "same_address_calls": self.same_address,
                "allocator_calls": {k: after_allocs[k] - self.allocs[k] for k in self.allocs},
                "sync_latency_ms": self.latency, "after_stream_gap_ms": gap,
                "disturbed_syncs": sum(not is_undisturbed(w) for w in waits),
                "run_delay_ms_max": max((w for w in waits if w < math.inf), default=0.0),
                "calls": n, "loop_ms": self.loop_ms,
                # the whole command in the worker (warm-up and calibration too): what the judge's
                # timing_s holds beyond it is the request's round trip
                "command_ms": 1e3 * (prim["clock"]() - t_command),
                "overhead_ms_per_call": self.loop_ms / n - statistics.median(times)}


def _sleep_into(prim, start, end, call_ms: float) -> bool:
    """For a call expected to take more than SPIN_MS: sleep until the GPU reaches its start
    event, then for all but SPIN_MS of it. Whether its end had already passed when the host
    woke (the sleep overshot: the gap then holds the host's lateness)."""
    if call_ms <= SPIN_MS:
        return False
    prim["ev_sync"](start)
    prim["sleep"]((call_ms - SPIN_MS) / 1e3)
    return bool(prim["query"](end))


def _addresses(torch, args) -> set:
    return {x.data_ptr() for x in args if isinstance(x, torch.Tensor) and x.numel()}


def _allocator_counts(torch, device: str) -> dict:
    """cudaMalloc / cudaFree calls and allocation retries so far (diagnostics: any inside the
    timed loop means the allocator went to the driver during a timed call). Top-level entries
    of the nested statistics: `memory_stats()` would flatten the whole tree in Python (about
    0.35 ms, twice per timing, inside the timing hold; trials.allocated_bytes reads them the
    same way)."""
    if device != "cuda":
        return {"device_alloc": 0, "device_free": 0, "alloc_retries": 0}
    st = torch.cuda.memory_stats_as_nested_dict()
    return {"device_alloc": int(st.get("num_device_alloc", 0)),
            "device_free": int(st.get("num_device_free", 0)),
            "alloc_retries": int(st.get("num_alloc_retries", 0))}
