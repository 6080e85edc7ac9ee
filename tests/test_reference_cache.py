"""ReferenceCache: outputs shared before the timing ends, one run per task, bounded, no hangs."""
import threading
import time

from kernelzero.eval.reference import ReferenceRun
from kernelzero.eval.reference_cache import ReferenceCache
from kernelzero.tasks import Task


def _task(n: int) -> Task:
    return Task(name=f"t{n}", source=f"# task {n}\n")


class FakeReference:
    """compute(task, publish): publishes outputs, then 'times' until released."""

    def __init__(self, fail_after_publish=False, raise_before=False):
        self.calls: list[str] = []
        self.timing_may_end = threading.Event()
        self.fail_after_publish, self.raise_before = fail_after_publish, raise_before

    def __call__(self, task, publish):
        self.calls.append(task.hash)
        if self.raise_before:
            raise RuntimeError("judge bug")
        run = ReferenceRun(True, phases_s={"build_run_s": 0.0})
        publish(run)
        assert self.timing_may_end.wait(10)
        if self.fail_after_publish:
            return ReferenceRun(False, "the reference crashed: while timing")
        run.timing = "timed"
        return run


def test_outputs_are_shared_before_the_timing_ends():
    ref = FakeReference()
    cache = ReferenceCache(ref, capacity=4)
    handle = cache.get(_task(1))
    run = handle.outputs()  # returns although the timing is still running
    assert run.ok and run.timing is None and not handle.done.is_set()
    ref.timing_may_end.set()
    assert handle.complete() is run and run.timing == "timed"
    assert cache.phases[_task(1).hash] == {"build_run_s": 0.0}


def test_each_task_runs_once_however_many_candidates_ask():
    ref = FakeReference()
    ref.timing_may_end.set()
    cache = ReferenceCache(ref, capacity=4)
    handles = []
    threads = [threading.Thread(target=lambda: handles.append(cache.get(_task(1))))
               for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len({id(h) for h in handles}) == 1
    handles[0].complete()
    assert ref.calls == [_task(1).hash]


def test_a_failure_while_timing_reaches_complete_not_outputs():
    ref = FakeReference(fail_after_publish=True)
    cache = ReferenceCache(ref, capacity=4)
    handle = cache.get(_task(1))
    assert handle.outputs().ok
    ref.timing_may_end.set()
    final = handle.complete()
    assert not final.ok and "while timing" in final.reason


def test_a_bug_in_the_judge_becomes_a_failed_run_not_a_hang():
    cache = ReferenceCache(FakeReference(raise_before=True), capacity=4)
    run = cache.get(_task(1)).outputs()
    assert not run.ok and "RuntimeError: judge bug" in run.reason


def test_bounded_and_pending_references_stay():
    ref = FakeReference()
    ref.timing_may_end.set()
    cache = ReferenceCache(ref, capacity=2)
    cache.expect(_task(0).hash)  # a candidate of task 0 is still pending
    for n in range(5):
        cache.get(_task(n)).complete()
    assert len(cache) <= 2
    assert cache.get(_task(0)).done.is_set()  # kept: no second run of task 0
    assert ref.calls.count(_task(0).hash) == 1
    cache.release(_task(0).hash)
    for n in range(5, 8):
        cache.get(_task(n)).complete()
    assert _task(0).hash not in cache._entries


def test_prefetch_stays_within_the_bound_and_stops():
    ref = FakeReference()
    cache = ReferenceCache(ref, capacity=3)
    tasks = [_task(n) for n in range(6)]
    for t in tasks:
        cache.expect(t.hash)
    stop = threading.Event()
    th = threading.Thread(target=cache.prefetch, args=(tasks, stop.is_set), daemon=True)
    th.start()
    time.sleep(0.5)
    assert len(ref.calls) == 2  # capacity - 1 started; the last slot is for a candidate
    stop.set()
    cache.wake()  # what judge_many does when its batch ends: the prefetch sees it at once
    th.join(timeout=0.3)
    assert not th.is_alive()
    ref.timing_may_end.set()


def test_reclaim_drops_what_no_pending_candidate_needs_and_force_drops_the_rest():
    ref = FakeReference()
    ref.timing_may_end.set()
    cache = ReferenceCache(ref, capacity=8)
    needed, unneeded = _task(1), _task(2)
    cache.expect(needed.hash)
    for t in (needed, unneeded):
        cache.get(t).complete()
    cache.reclaim()
    assert len(cache) == 1 and cache.get(needed) is not None and ref.calls.count(needed.hash) == 1
    cache.reclaim(force=True)  # nothing in flight would free memory: even a pending task's goes
    assert len(cache) == 0
    cache.get(needed).complete()
    assert ref.calls.count(needed.hash) == 2  # its candidate computes it again


def test_clear_keeps_one_task_and_restart_replaces_a_run_in_progress():
    ref = FakeReference()
    cache = ReferenceCache(ref, capacity=8)
    ref.timing_may_end.set()
    a, b = _task(1), _task(2)
    cache.get(a).complete()
    cache.get(b).complete()
    cache.clear(keep=a.hash)
    assert len(cache) == 1 and cache.restart(a) is cache.get(a)  # finished and fine: kept
    ref.timing_may_end.clear()
    slow = cache.get(b)
    slow.outputs()
    fresh = cache.restart(b)  # still timing: a new run in the caller's context replaces it
    assert fresh is not slow and ref.calls.count(b.hash) == 3
    ref.timing_may_end.set()
    assert fresh.complete().ok
