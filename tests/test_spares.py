"""SparePool: during a batch it starts only what the batch will take, and a taker waits for a
start already under way rather than beginning another (fake workers, no processes); the memory
reserve reaches every GPU warm-up stage."""
import threading
import time

import pytest


class _FakeWorker:
    name = "w"

    def close(self):
        pass


def _pool(size, start_s=0.0):
    from kernelzero.eval.sandbox.sandbox import SandboxLimits
    from kernelzero.eval.sandbox.spares import SparePool

    class CountingPool(SparePool):
        started = 0

        def _new(self):
            type(self).started += 1
            time.sleep(start_s)
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


def test_takers_wait_for_starts_under_way_instead_of_starting_more():
    """A cold batch: 4 takers at once, nothing ready. Each gets one of the 4 starts the pool
    began, none starts a fifth (which would only slow the others down)."""
    pool = _pool(size=4, start_s=0.3)
    pool.expect(4)
    got, t0 = [], time.monotonic()
    threads = [threading.Thread(target=lambda: got.append(pool.take("cand"))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=5)
    assert len(got) == 4 and time.monotonic() - t0 < 1.5
    _settle(pool)
    assert type(pool).started == 4 and pool._waiting == 0
    pool.expect(None)
    pool.close()


def test_a_taker_starts_its_own_when_no_start_is_under_way():
    pool = _pool(size=0)  # prestart off: every take starts its own worker
    assert isinstance(pool.take("cand"), _FakeWorker) and type(pool).started == 1
    assert pool._waiting == 0


def test_a_failed_start_under_way_does_not_leave_a_taker_waiting():
    from kernelzero.eval.sandbox.sandbox import SandboxLimits, WorkerDied
    from kernelzero.eval.sandbox.spares import SparePool

    class FirstStartFails(SparePool):
        calls = 0

        def _new(self):
            type(self).calls += 1
            time.sleep(0.1)
            if type(self).calls == 1:
                raise WorkerDied("could not start")
            return _FakeWorker()

    pool = FirstStartFails("cpu", SandboxLimits(), None, size=1)
    pool.expect(1)
    assert isinstance(pool.take("cand"), _FakeWorker)  # its own start, once the first failed
    assert pool._waiting == 0
    pool.close()


def test_overlapping_batches_add_up_and_the_pool_refills_after_the_last():
    """Several threads judging at once (the service): the first batch to end must not put the
    pool back to full size while another still runs."""
    pool = _pool(size=6)
    pool.fill(5)
    pool.begin_batch(2)
    pool.begin_batch(3)
    assert pool._expected == 5
    for _ in range(2):
        pool.take("a")
    pool.end_batch()  # the other batch still expects 3
    _settle(pool)
    assert pool._expected == 3 and type(pool).started == 6
    for _ in range(3):
        pool.take("b")
    pool.end_batch()
    _settle(pool)
    assert pool._expected is None and pool._ready.qsize() == 6 and type(pool).started == 11
    pool.close()


def test_spare_reserve_is_validated_and_sent_with_every_gpu_warm_stage(monkeypatch):
    from kernelzero.eval.sandbox import spares
    from kernelzero.eval.config import RuntimeConfig
    from kernelzero.eval.sandbox.sandbox import SandboxLimits
    with pytest.raises(ValueError, match="spare_reserve_mb"):
        RuntimeConfig(spare_reserve_mb=-1)
    sent = []

    class FakeWorker:
        def __init__(self, *a, **k):
            pass

        def start(self):
            pass

        def request(self, msg, timeout):
            sent.append(msg)
            return {"ok": True}

    monkeypatch.setattr(spares, "SandboxWorker", FakeWorker)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "kz-test-reserve")  # a lock file of its own
    pool = spares.SparePool("cuda", SandboxLimits(), None, size=0, reserve_mb=64)
    pool._new()
    gpu_stages = [m for m in sent if m["stages"] != ["imports"]]
    assert [m["stages"] for m in gpu_stages] == [["context"], ["libraries"], ["dry_run"]]
    assert all(m["reserve_mb"] == 64 for m in gpu_stages)
