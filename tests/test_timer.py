"""The worker's timing loop (kernelzero/eval/worker/timer.py) on the CPU, against a simulated GPU
that runs queued work in order on its own clock: the pipelined loop (the host queues ahead, the GPU
never waits for it between covered calls), fresh inputs at the last call's addresses, the
checked outputs, launch-bound calls and the spin that covers them, and work left running after
the call being caught after a sampled device-wide synchronize (`work_after_stream`)."""
import statistics
from types import SimpleNamespace

import torch

from kernelzero.eval.worker.timer import time_calls
from kernelzero.eval.worker.timing_rules import spread_ok

CYCLES_PER_MS = 1_000_000


class SimGPU:
    """One stream on a virtual clock: each queued piece of work starts once the GPU is free and
    the host has queued it; an event completes when the GPU reaches it. Work on 'another stream'
    (`side_until`) delays nothing but a device-wide synchronize.

    The host's time is virtual too (`now`): it moves only by the costs the test gives it (a
    launch, a draw, a sleep, a wait), never by how fast this machine runs the test, so a test
    reads the same on an idle workstation and on a loaded 2-core CI runner."""

    HOST_CALL_S = 10e-6  # host time a forward takes to launch its work (a small module)
    HOST_READ_S = 1e-6  # host time between two reads of the clock (a few Python statements)

    def __init__(self, off_cpu_ms=None):
        self.now = 0.0
        self.free_at = 0.0
        self.side_until = 0.0
        self.syncs = 0
        # off_cpu_ms(n): ms the host thread waits for a CPU (another process runs there) when the
        # n-th synchronize would return, so it returns that much later; its run-queue delay
        # (the `run_delay` primitive) grows by as much.
        self.off_cpu_ms, self.off_s = off_cpu_ms, 0.0
        self.slept: list[int] = []
        self.slept_s: list[float] = []  # the host's own sleeps (time.sleep)
        self.woke_after_end: list[bool] = []  # per sleep: the queued work was done at waking

    def host(self, seconds: float) -> None:
        """The host spends `seconds` (launching, drawing, sleeping)."""
        self.now += seconds

    def queue(self, ms: float) -> float:
        self.free_at = max(self.free_at, self.now) + ms / 1e3
        return self.free_at

    def _wait_until(self, t: float) -> None:
        self.now = max(self.now, t)

    def _sleep(self, seconds: float) -> None:
        self.slept_s.append(seconds)
        self.host(seconds)
        self.woke_after_end.append(self.now >= self.free_at)

    def primitives(self) -> dict:
        def clock():
            self.host(self.HOST_READ_S)
            return self.now

        def sync():
            self.syncs += 1
            off = self.off_cpu_ms(self.syncs) / 1e3 if self.off_cpu_ms else 0.0
            self.off_s += off
            self._wait_until(max(self.free_at, self.side_until) + off)

        def record(ev, stream):
            ev.t = self.queue(0.0)

        def sleep(cycles):
            self.slept.append(cycles)
            self.queue(cycles / CYCLES_PER_MS)

        return {"clock": clock, "run_delay": lambda: 1e3 * self.off_s,
                "Event": lambda enable_timing, blocking=False: SimpleNamespace(t=0.0),
                "stream": lambda: None, "sync": sync, "l2_reset": None, "record": record,
                "gpu_sleep": sleep, "elapsed": lambda a, b: 1e3 * (b.t - a.t),
                "query": lambda ev: self.now >= ev.t, "sleep": self._sleep,
                "ev_sync": lambda ev: self._wait_until(ev.t)}


class Kernel(torch.nn.Module):
    """A forward that queues `ms` of GPU work (after `launch_s` of host time, once `slow_after`
    calls have been made)."""

    def __init__(self, gpu: SimGPU, ms: float, launch_s: float = 0.0, slow_after: int = 0,
                 leaves_s: float = 0.0, leaves_on=None):
        super().__init__()
        self.gpu, self.ms, self.launch_s, self.slow_after, self.leaves_s = \
            gpu, ms, launch_s, slow_after, leaves_s
        self.leaves_on = leaves_on  # which calls (1-based) leave work behind (None: all)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        self.gpu.host(SimGPU.HOST_CALL_S)
        if self.launch_s and self.calls > self.slow_after:
            self.gpu.host(self.launch_s)
        self.gpu.queue(self.ms)
        if self.leaves_s and (self.leaves_on is None or self.calls in self.leaves_on):
            # 'still running' on a side stream until a device-wide synchronize
            # (on a side stream that first waits for this stream to reach this point)
            self.gpu.side_until = max(self.gpu.free_at, self.gpu.now) + self.leaves_s
        return x.relu()


def _worker(gpu: SimGPU, model, written: list, draw_ms: float = 0.3):
    def write(name, out):
        written.append(name)
        return {"file": name}

    def make_inputs(seed):
        gpu.queue(draw_ms)  # the draw runs on the GPU, behind whatever is queued
        return [torch.full((64,), float(seed))]

    return SimpleNamespace(torch=torch, primitives=gpu.primitives(), model=model, device="cpu",
                           make_inputs=make_inputs, _write=write)


CMD = {"seeds": list(range(40)), "checked": [3, 7], "min_trials": 10, "max_trials": 40,
       "rel_spread": 0.5, "budget_s": 5.0, "flush_bytes": 4096, "warmup": 3, "warmup_ms": 5.0}


def test_a_plain_module_is_timed_and_its_checked_calls_written():
    gpu, written = SimGPU(), []
    reply = time_calls(_worker(gpu, Kernel(gpu, 2.0), written), CMD)
    assert reply["ok"] and not reply["work_after_stream"]
    times = reply["times_ms"]
    assert 10 <= len(times) <= 40
    # the kernel's 2 ms, no host time (a call the busy host let the GPU overtake reads slower)
    assert min(times) >= 1.9 and 1.9 <= statistics.median(times) <= 2.5
    assert written == ["timed_3.bin", "timed_7.bin"]  # the stopping rule waits for them
    assert reply["warmup_calls"] >= 3 and reply["launch_lead_cycles"] > 0
    # it stops only once 6 unchecked calls were followed by a synchronize (or at the maximum)
    assert reply["synced_calls"] >= 6 or len(reply["times_ms"]) == 40


def test_the_host_queues_ahead_and_synchronises_only_sampled_calls():
    """The pipelined loop: a device-wide synchronize after about one call in 8 (and the last),
    a spin only where nothing queued covers the call, and the GPU goes from one call's end to
    the next call's start with only the draw (0.3 ms here) between them."""
    gpu, written = SimGPU(), []
    cmd = {**CMD, "min_trials": 40, "warmup_ms": 0.0}
    syncs_before = []
    w = _worker(gpu, Kernel(gpu, 3.0), written)
    warm = w.primitives["sync"]
    w.primitives["sync"] = lambda: (syncs_before.append(gpu.syncs), warm())[1]
    reply = time_calls(w, cmd)
    n = len(reply["times_ms"])
    assert n == 40 and 1 <= reply["synced_calls"] <= 20  # ~6 expected; 20+ has p < 1e-5
    assert reply["spun_calls"] <= reply["synced_calls"] + reply["launch_bound_calls"] + 1
    assert reply["launch_bound_calls"] <= 2
    assert 0.25 <= reply["between_calls_ms"] < 0.6
    assert reply["overhead_ms_per_call"] < 1.0


def test_the_warm_up_follows_the_timed_calls_input_pattern():
    """Fresh inputs on every warm-up call too (so the allocator holds every block the timed
    calls need before the first one is timed)."""
    gpu, written, seeds_seen = SimGPU(), [], []
    w = _worker(gpu, Kernel(gpu, 0.2), written)
    make = w.make_inputs
    w.make_inputs = lambda seed: (seeds_seen.append(seed), make(seed))[1]
    reply = time_calls(w, {**CMD, "warmup": 5, "warmup_ms": 0.0})
    assert reply["warmup_calls"] == 5
    assert seeds_seen[:7] == [0, 1, 2, 3, 4, 0, 1]  # one fresh set per warm-up call, then timed


def test_each_call_draws_fresh_inputs_after_dropping_the_last_ones():
    """So the caching allocator hands their blocks back: new values at the addresses the last
    call used (an address-keyed cache answers stale), with no copy. Inputs are drawn once the
    previous call's end event is queued (behind it on the stream)."""
    import weakref
    gpu, written, alive, events = SimGPU(), [], [], []
    w = _worker(gpu, Kernel(gpu, 0.5), written)
    record = w.primitives["record"]
    w.primitives["record"] = lambda ev, s: (events.append("rec"), record(ev, s))
    made = w.make_inputs

    def make(seed):
        alive.append(sum(r() is not None for r in refs))
        events.append("inputs")
        x = made(seed)
        refs.append(weakref.ref(x[0]))
        return x

    refs: list = []
    w.make_inputs = make
    reply = time_calls(w, {**CMD, "warmup_ms": 0.0})
    assert alive and max(alive) == 0  # the last call's inputs were gone each time
    drawn = [k for k, e in enumerate(events) if e == "inputs"][-len(reply["times_ms"]):]
    for a, b in zip(drawn, drawn[1:]):  # between two draws: start, end (and after, if synced)
        assert events[a + 1:b] in (["rec", "rec"], ["rec", "rec", "rec"])
    assert reply["loop_ms"] > 0 and "overhead_ms_per_call" in reply
    assert 0 <= reply["same_address_calls"] < len(reply["times_ms"])


def test_a_launch_the_gpu_overtakes_is_counted_and_covered_by_a_spin():
    gpu, written = SimGPU(), []
    model = Kernel(gpu, 0.05, launch_s=0.004, slow_after=8)  # after the warm-up: a busy host
    reply = time_calls(_worker(gpu, model, written, draw_ms=0.05), {**CMD, "warmup_ms": 0.0})
    assert reply["launch_bound_calls"] >= 1
    assert reply["launch_lead_ms"] == 2.0  # grown to cover 4 ms, capped
    assert gpu.slept[-1] >= 1.9 * CYCLES_PER_MS  # and the GPU spins that long (less the flush)
    assert reply["allocator_calls"] == {"device_alloc": 0, "device_free": 0, "alloc_retries": 0}


def test_work_left_running_after_the_call_is_counted_and_flagged():
    gpu, written = SimGPU(), []
    reply = time_calls(_worker(gpu, Kernel(gpu, 0.2, leaves_s=0.005), written), CMD)
    assert reply["work_after_stream"]
    assert 6 <= len(reply["times_ms"]) <= reply["synced_calls"]  # only calls a synchronize closed
    assert min(reply["times_ms"]) >= 4.0  # the 5 ms of unjoined work are inside every time


def test_a_few_late_gaps_early_do_not_decide_alone():
    """Work left behind by the first three timed calls only: the loop sees a late median among
    its first gaps, so it looks at SETTLE_SYNCED (12) before deciding, and then the calls that
    left nothing outnumber them."""
    gpu, written = SimGPU(), []
    model = Kernel(gpu, 0.2, leaves_s=0.005, leaves_on=range(4, 7))  # after 3 warm-up calls
    # Every call synchronised (sync_every 1), none checked: the first six gaps are three late
    # ones (timed calls 0-2) and three clean ones, a late median, where the loop could stop.
    cmd = {**CMD, "warmup_ms": 0.0, "sync_every": 1, "checked": [], "min_trials": 6}
    reply = time_calls(_worker(gpu, model, written), cmd)
    assert not reply["work_after_stream"] and len(reply["times_ms"]) > 6  # went on past six


def test_a_busy_host_is_not_work_after_the_call():
    """Two synchronizes in three return 0.5 ms late because the host thread waited for a CPU
    (a host whose cores are all busy): a late median of gaps, but the clean third says no work
    outlived the call, and the times are the calls' own."""
    gpu, written = SimGPU(off_cpu_ms=lambda n: 0.5 if n % 3 else 0.0), []
    cmd = {**CMD, "warmup_ms": 0.0, "sync_every": 1, "checked": [], "min_trials": 40}
    reply = time_calls(_worker(gpu, Kernel(gpu, 0.2), written), cmd)
    assert reply["disturbed_syncs"] >= 20 and reply["run_delay_ms_max"] >= 0.45
    assert not reply["work_after_stream"] and len(reply["times_ms"]) == 40
    assert reply["after_stream_gap_ms"] < 0.1 and statistics.median(reply["times_ms"]) < 0.3


def test_the_host_sleeps_through_most_of_a_long_synchronised_call():
    """A 4 ms call: before each synchronize (but the first, when no call time is known yet) the
    host sleeps until the call starts, then for all but SPIN_MS of it, and spins the rest; the
    gaps stay clean and no sleep overshoots the call's end."""
    from kernelzero.eval.worker.timer import SPIN_MS
    gpu, written = SimGPU(), []
    cmd = {**CMD, "warmup_ms": 0.0, "sync_every": 2, "checked": [], "min_trials": 20, "max_trials": 20}
    reply = time_calls(_worker(gpu, Kernel(gpu, 4.0), written), cmd)
    assert not reply["work_after_stream"] and len(reply["times_ms"]) == 20
    assert len(gpu.slept_s) >= reply["synced_calls"] - 1
    assert all(abs(x - (4.0 - SPIN_MS) / 1e3) < 0.5e-3 for x in gpu.slept_s)
    # disturbed: the synchronizes whose sleep overshot the call's end (the OS woke the host
    # late; none on an idle machine, many on a loaded one). One more may be seen by the loop
    # a few microseconds after the simulation's own look.
    assert reply["disturbed_syncs"] <= sum(gpu.woke_after_end) + 1, gpu.woke_after_end


def test_work_after_the_call_is_caught_on_a_busy_host_too():
    """Work left behind by every call: the clean synchronizes show it (when a few are clean) and
    so do the disturbed ones (when none is): late either way."""
    for off in (lambda n: 0.5 if n % 3 else 0.0, lambda n: 0.5):
        gpu, written = SimGPU(off_cpu_ms=off), []
        cmd = {**CMD, "warmup_ms": 0.0, "sync_every": 1, "checked": [], "min_trials": 40}
        reply = time_calls(_worker(gpu, Kernel(gpu, 0.2, leaves_s=0.002), written), cmd)
        assert reply["work_after_stream"] and min(reply["times_ms"]) >= 1.5
        # judged on the clean synchronizes when there were enough, else on all: host_busy
        assert reply["host_busy"] == (reply["disturbed_syncs"] == reply["synced_calls"])


def test_synchronizes_come_more_often_once_one_was_disturbed():
    """One synchronize in 8, but two in three disturbed: the loop synchronises more often, so
    MIN_SYNCED clean ones are in before its 100 calls end, and it is judged on them."""
    from kernelzero.eval.worker.timing_rules import MIN_SYNCED
    gpu, written = SimGPU(off_cpu_ms=lambda n: 0.5 if n % 3 else 0.0), []
    cmd = {**CMD, "seeds": list(range(100)), "warmup_ms": 0.0, "checked": [],
           "min_trials": 100, "max_trials": 100}
    reply = time_calls(_worker(gpu, Kernel(gpu, 0.2), written), cmd)
    clean = reply["synced_calls"] - reply["disturbed_syncs"]
    assert clean >= MIN_SYNCED and reply["synced_calls"] > 100 / 8 + 6
    assert not reply["work_after_stream"] and not reply["host_busy"]


def test_a_reference_loop_reports_its_calls_own_times_even_when_late():
    """late_counts false (the judge's reference timing): work after the call is reported, but the
    times are the calls' own, never an upper bound that would inflate speedups against it."""
    gpu, written = SimGPU(), []
    cmd = {**CMD, "late_counts": False}
    reply = time_calls(_worker(gpu, Kernel(gpu, 0.2, leaves_s=0.005), written), cmd)
    assert reply["work_after_stream"] and max(reply["times_ms"]) < 1.0


def test_the_stopping_rule():
    assert spread_ok([1.0, 1.0, 1.01, 1.0], 0.02)
    assert not spread_ok([1.0, 2.0, 1.0, 2.0], 0.02)


def test_the_throughput_bench_sums_the_timed_loops_once_per_reference():
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "eval_throughput", Path(__file__).resolve().parents[1] / "bench" / "eval_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    ref = {"loop_ms": 500.0, "overhead_ms_per_call": 0.5, "same_address_calls": 99,
           "between_calls_ms": 0.4, "synced_calls": 12, "disturbed_syncs": 5,
           "run_delay_ms_max": 1.5, "retimed": True}
    verdicts = [SimpleNamespace(task_hash="t", timing_details={
        "candidate": {"loop_ms": 100.0 * k, "overhead_ms_per_call": 0.1 * k,
                      "same_address_calls": 90, "between_calls_ms": 0.1 * k},
        "reference": dict(ref)}) for k in (1, 2, 3)]
    tl = bench.timed_loops(verdicts + [SimpleNamespace(task_hash="u", timing_details={})])
    assert tl["loops"] == 4 and abs(tl["loop_s"] - 1.1) < 1e-9
    assert tl["overhead_ms_per_call_median"] == 0.25 and tl["overhead_ms_per_call_max"] == 0.5
    assert tl["same_address_calls"] == 3 * 90 + 99 and tl["synced_calls"] == 12
    assert abs(tl["between_calls_ms_median"] - 0.25) < 1e-9
    assert tl["disturbed_syncs"] == 5 and tl["run_delay_ms_max"] == 1.5 and tl["retimed_loops"] == 1


def test_the_late_margin_covers_host_noise_but_not_real_work():
    """Gaps 0.03-0.04 ms beyond the calibrated latency came from honest loops on a loaded H200
    host; work left behind for 0.1 ms (or 5% of a long call) still counts as late."""
    from kernelzero.eval.worker.timing_rules import is_late
    fast = [0.2] * 12
    assert not is_late([0.008 + 0.04] * 12, fast, 0.008)
    assert is_late([0.008 + 0.1] * 12, fast, 0.008)
    slow = [4.0] * 12  # 5% of a 4 ms call: 0.2 ms
    assert not is_late([0.008 + 0.15] * 12, slow, 0.008)
    assert is_late([0.008 + 0.3] * 12, slow, 0.008)


def test_the_throughput_bench_reports_round_trips_and_late_wake_ups():
    import importlib.util
    import time
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "eval_throughput", Path(__file__).resolve().parents[1] / "bench" / "eval_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    verdicts = [SimpleNamespace(phases_s={"timing_s": 0.05 * k},
                                timing_details={"candidate": {"command_ms": 40.0 * k}})
                for k in (1, 2)] + [SimpleNamespace(phases_s={}, timing_details={})]
    retimed = SimpleNamespace(phases_s={"timing_s": 0.3},  # two commands, the second reported
                              timing_details={"candidate": {"command_ms": 40.0, "retimed": True}})
    rt = bench._round_trips(verdicts + [retimed])
    assert rt["n"] == 2 and abs(rt["sum_ms"] - 30.0) < 1e-9 and abs(rt["max_ms"] - 20.0) < 1e-9
    assert bench._round_trips(verdicts[2:]) == {}
    with bench.InterpreterLag(period_s=0.001) as lag:
        t = time.perf_counter()
        while time.perf_counter() - t < 0.05:  # this thread keeps the interpreter lock busy
            pass
    s = lag.summary()
    assert s["wakeups"] >= 2 and 0 <= s["median_ms"] <= s["p90_ms"] <= s["p99_ms"] <= s["max_ms"]


def test_the_run_queue_delay_is_read_for_the_calling_thread_or_taken_as_zero(monkeypatch):
    """/proc/thread-self/schedstat where the kernel has it (a count that only grows); 0 where it
    cannot be read, so every synchronize counts as undisturbed and every gap is judged."""
    import os

    from kernelzero.eval.worker.timing_primitives import run_delay_reader
    read = run_delay_reader()
    first = read()
    sum(range(200_000))
    assert 0.0 <= first <= read()

    def refuse(*a, **k):
        raise OSError("no /proc here")
    monkeypatch.setattr(os, "open", refuse)
    assert run_delay_reader()() == 0.0
