"""GpuLock: shared for running modules, exclusive for timing, timings first, across processes."""
from __future__ import annotations

import subprocess
import sys
import threading
import time
import uuid

from kernelzero.eval.device.gpu_lock import GpuLock


def _name() -> str:
    return f"kz-test-{uuid.uuid4().hex}.lock"


def _holder(name: str, shared: bool, events: list, label: str, hold_s: float,
            started: threading.Event | None = None):
    def run():
        if started is not None:
            started.set()
        with GpuLock(shared=shared, name=name):
            events.append(("in", label, time.monotonic()))
            time.sleep(hold_s)
            events.append(("out", label, time.monotonic()))
    t = threading.Thread(target=run)
    t.start()
    return t


def _staggered(plan) -> list:
    """Holders started one after another: plan = [(label, shared, hold_s, then_wait_s), ...];
    returns the events once all are done."""
    name, events, threads = _name(), [], []
    for label, shared, hold_s, then_wait_s in plan:
        threads.append(_holder(name, shared, events, label, hold_s))
        time.sleep(then_wait_s)
    for t in threads:
        t.join()
    return events


def _interval(events, label):
    t_in = next(t for kind, lab, t in events if kind == "in" and lab == label)
    t_out = next(t for kind, lab, t in events if kind == "out" and lab == label)
    return t_in, t_out


def test_shared_holders_overlap():
    name, events = _name(), []
    a = _holder(name, True, events, "a", 0.4)
    b = _holder(name, True, events, "b", 0.4)
    a.join(), b.join()
    (a_in, a_out), (b_in, b_out) = _interval(events, "a"), _interval(events, "b")
    assert a_in < b_out and b_in < a_out, "two shared holders must run at the same time"


def test_exclusive_excludes_shared_and_waits_for_them():
    name, events = _name(), []
    r = _holder(name, True, events, "reader", 0.4)
    time.sleep(0.1)
    w = _holder(name, False, events, "writer", 0.2)
    r.join(), w.join()
    r_in, r_out = _interval(events, "reader")
    w_in, w_out = _interval(events, "writer")
    assert w_in >= r_out, "the exclusive holder must wait for the shared one to leave"


def test_writer_preference_late_reader_waits_for_waiting_writer():
    # the writer is queued behind `first` when `late` arrives
    events = _staggered([("first", True, 0.5, 0.1), ("writer", False, 0.3, 0.1),
                         ("late", True, 0.05, 0)])
    w_in, w_out = _interval(events, "writer")
    late_in, _ = _interval(events, "late")
    assert late_in >= w_out, "a shared acquirer arriving after a waiting writer must queue behind it"


def test_queued_timings_all_go_before_a_shared_acquirer_that_waits():
    """Timings first: two timings queued behind a shared holder both run before a shared
    acquirer that arrived after them, even though it could have slipped in between them."""
    events = _staggered([("first", True, 0.4, 0.1), ("w1", False, 0.3, 0.05),
                         ("w2", False, 0.3, 0.05), ("late", True, 0.05, 0)])
    (w1_in, w1_out), (w2_in, w2_out) = _interval(events, "w1"), _interval(events, "w2")
    late_in, _ = _interval(events, "late")
    assert w1_in >= _interval(events, "first")[1] and w2_in >= _interval(events, "first")[1]
    assert late_in >= max(w1_out, w2_out), "a waiting shared acquirer must let every queued timing go first"


def test_a_timing_goes_before_a_shared_acquirer_already_waiting_for_the_lock():
    """A shared acquirer waits for a timing's hold; a second timing queues meanwhile: the second
    timing goes first (it would have waited behind the shared holder under a plain gate)."""
    events = _staggered([("w1", False, 0.4, 0.1), ("reader", True, 0.3, 0.1), ("w2", False, 0.2, 0)])
    _, w1_out = _interval(events, "w1")
    w2_in, w2_out = _interval(events, "w2")
    r_in, _ = _interval(events, "reader")
    assert w2_in >= w1_out and r_in >= w2_out, "the queued timing must run before the reader"


def test_shared_acquirers_that_waited_run_side_by_side():
    """The shared holders held back by a timing enter together once it is done (one burst)."""
    events = _staggered([("timing", False, 0.4, 0.1)] + [(f"r{i}", True, 0.3, 0) for i in range(3)])
    _, w_out = _interval(events, "timing")
    spans = [_interval(events, f"r{i}") for i in range(3)]
    assert all(a >= w_out for a, _ in spans)
    assert max(a for a, _ in spans) < min(b for _, b in spans), "they must overlap"


def test_exclusive_held_by_another_process_blocks_shared():
    name = _name()
    code = ("import sys, time; from kernelzero.eval.device.gpu_lock import GpuLock\n"
            f"with GpuLock(name={name!r}):\n"
            "    print('held', flush=True); time.sleep(1.0)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "held"
        t0 = time.monotonic()
        with GpuLock(shared=True, name=name):
            waited = time.monotonic() - t0
        assert waited > 0.5, f"acquired after {waited:.2f} s while another process held it"
    finally:
        p.wait(timeout=30)


def test_lock_released_when_holder_dies():
    name = _name()
    code = ("import os, time; from kernelzero.eval.device.gpu_lock import GpuLock\n"
            f"l = GpuLock(name={name!r}); l.__enter__(); print('held', flush=True); time.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "held"
    p.kill()
    p.wait(timeout=30)
    t0 = time.monotonic()
    with GpuLock(name=name):
        pass
    assert time.monotonic() - t0 < 5


def test_lock_trace_gives_the_timeline_of_timed_shared_and_idle_time(tmp_path, monkeypatch):
    """KZ_GPU_LOCK_TRACE: the throughput benchmark's account of where a batch's wall time went."""
    import importlib.util
    import time
    from pathlib import Path

    spec = importlib.util.spec_from_file_location(
        "eval_throughput", Path(__file__).resolve().parents[1] / "bench" / "eval_throughput.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    trace = tmp_path / "lock.trace"
    monkeypatch.setenv("KZ_GPU_LOCK_TRACE", str(trace))
    lock = _name()
    t0 = time.time()
    with GpuLock(shared=True, name=lock, what="ref_run"):
        time.sleep(0.2)
    time.sleep(0.2)
    with GpuLock(name=lock, what="cand_time"):
        time.sleep(0.3)
    t1 = time.time()
    tl = bench.lock_timeline(str(trace), t0, t1)
    assert set(tl["holders"]) == {"ref_run", "cand_time"}
    assert tl["holders"]["ref_run"]["holds"] == 1 and 0.18 <= tl["holders"]["ref_run"]["max_s"] < 0.35
    assert tl["timings"] == 1 and tl["shared_holds"] == 1
    assert 0.28 <= tl["timing_held_s"] <= 0.5
    assert 0.18 <= tl["shared_only_s"] <= 0.35
    assert 0.18 <= tl["idle_s"] <= 0.4
    assert abs(tl["timing_held_s"] + tl["shared_only_s"] + tl["idle_s"] - (t1 - t0)) < 1e-6
    states = [s for a, b, s in tl["segments"] if b - a > 0.05]  # (a few ms idle at the ends)
    assert states == ["shared", "idle", "timing"]  # in order, merged
    assert tl["segments"][0][0] == 0 and abs(tl["segments"][-1][1] - (t1 - t0)) < 1e-3
    assert 0.38 <= tl["before_first_timing_s"] <= 0.6 and tl["after_last_timing_s"] < 0.1
