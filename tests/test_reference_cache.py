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
    th.join(timeout=3)
    assert not th.is_alive()
    ref.timing_may_end.set()


# -- the spare pool during a batch (same concern: nothing started that the batch won't use) --

class _FakeWorker:
    name = "w"

    def close(self):
        pass


def _pool(size):
    from kernelzero.eval.sandbox import SandboxLimits
    from kernelzero.eval.spares import SparePool

    class CountingPool(SparePool):
        started = 0

        def _new(self):
            type(self).started += 1
            return _FakeWorker()

    return CountingPool("cpu", SandboxLimits(), None, size=size)


def _settle(pool):
    deadline = time.monotonic() + 5
    while pool._starting and time.monotonic() < deadline:
        time.sleep(0.01)


def test_during_a_batch_the_pool_starts_only_what_the_batch_will_take():
    pool = _pool(size=6)
    assert pool.fill(5) == 6
    pool.expect(10)  # a batch of 10 takes: 6 are ready, 4 more are worth starting
    for _ in range(10):
        pool.take("cand")
        _settle(pool)
    assert type(pool).started == 6 + 4
    pool.expect(None)  # batch over: back to full size for the next one
    _settle(pool)
    assert pool._ready.qsize() == 6 and type(pool).started == 16
    pool.close()


def test_a_batch_smaller_than_the_pool_starts_nothing_while_it_runs():
    pool = _pool(size=6)
    pool.fill(5)
    pool.expect(3)
    for _ in range(3):
        pool.take("cand")
    _settle(pool)
    assert type(pool).started == 6
    pool.expect(None)
    _settle(pool)
    assert type(pool).started == 9
    pool.close()
