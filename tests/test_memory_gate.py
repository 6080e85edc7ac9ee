"""MemoryGate (kernelzero/eval/device/memory_gate.py): judgements and reference runs admitted
while their footprints fit the budget, and a judgement that ran out of memory judged again alone,
so its verdict does not blame the candidate (or the task) for its neighbours."""
import contextvars
import os
import threading
import time

from kernelzero.eval import EvalConfig, Evaluator
from kernelzero.eval.device.memory_gate import MemoryGate, out_of_memory
from kernelzero.tasks import Candidate, Task

EX = os.path.join(os.path.dirname(__file__), "..", "kernelzero", "examples")
RELU = Task.from_file(os.path.join(EX, "tasks/level1/1_ReLU.py"))
GOOD = open(os.path.join(EX, "candidates/level_1_problem_1_sample_0_kernel.py")).read()

OOM = """
import os, torch, torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        if {always} or not os.path.exists({marker!r}):
            open({marker!r}, "w").close()
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB (test)")
        return torch.relu(x)
"""


def test_alone_waits_for_the_judgements_in_flight_and_holds_new_ones_back():
    gate, log = MemoryGate(), []

    def judgement(name, hold_s):
        with gate.shared():
            log.append(f"{name}+")
            time.sleep(hold_s)
            log.append(f"{name}-")

    first = threading.Thread(target=judgement, args=("a", 0.3))
    first.start()
    time.sleep(0.05)

    def solo():
        with gate.alone():
            log.append("solo+")
            time.sleep(0.2)
            log.append("solo-")

    s = threading.Thread(target=solo)
    s.start()
    time.sleep(0.05)
    late = threading.Thread(target=judgement, args=("b", 0.0))  # arrives while solo waits
    late.start()
    for t in (first, s, late):
        t.join(5)
    assert log == ["a+", "a-", "solo+", "solo-", "b+", "b-"]


def test_a_judgement_knows_whether_another_ran_beside_it():
    gate = MemoryGate()
    with gate.shared() as crowded:
        pass
    assert not crowded()
    with gate.shared() as outer:
        with gate.shared() as inner:
            pass
    assert outer() and inner()


def test_out_of_memory_verdicts_are_recognised():
    assert out_of_memory("runtime_error", "raised during the correctness trials: OutOfMemoryError: x")
    assert out_of_memory("invalid_task", "the reference failed to run: CUDA out of memory.")
    assert out_of_memory("incorrect", "the candidate's outputs could not be read: shared CUDA "
                                      "output could not be opened: CUDA out of memory. Tried")
    assert not out_of_memory("incorrect", "output 0 differs: CUDA out of memory")
    assert not out_of_memory("runtime_error", "the worker died: SIGKILL (killed; out of memory?)")
    assert not out_of_memory("runtime_error", "raised: ValueError: boom")


def test_a_candidate_out_of_memory_beside_others_is_judged_again_alone(tmp_path, monkeypatch):
    # The candidate runs out of memory the first time only, which it learns from a marker file
    # outside its worker; a jail forbids exactly that (the jail's tests cover it), so unjailed.
    monkeypatch.setenv("KZ_SANDBOX", "none")
    once = Candidate(OOM.format(always=False, marker=str(tmp_path / "once")), "oom_once")
    always = Candidate(OOM.format(always=True, marker=str(tmp_path / "always")), "oom_always")
    pairs = [(RELU, once), (RELU, Candidate(GOOD, "good")), (RELU, Candidate(GOOD + "\n#2", "good2"))]
    with Evaluator(EvalConfig(device="cpu", policy="none", max_workers=3)) as ev:
        v_once, v_good, _ = ev.judge_many(pairs)
        v_alone = ev.judge(RELU, always)  # nothing beside it: its out-of-memory stands
    assert (tmp_path / "once").exists()
    assert v_once.status == "correct" and "judged_alone_after_oom" in v_once.flags, v_once.reason
    assert "judged again alone" in v_once.reason
    assert v_good.status == "correct" and "judged_alone_after_oom" not in v_good.flags
    # alone already, it is still judged again with the judge's memory released; it stands
    assert v_alone.status == "runtime_error" and "judged_alone_after_oom" in v_alone.flags
    assert "out of memory" in v_alone.reason.lower() and "judged again alone" in v_alone.reason


def _in_thread(fn, *args):
    t = threading.Thread(target=fn, args=args, daemon=True)
    t.start()
    return t


def test_grants_wait_until_they_fit_and_are_served_in_order():
    gate, log = MemoryGate(capacity=100), []
    first = gate.admit(60, "a")

    def ask(name, n, hold_s=0.0):
        with gate.admit(n, name):
            log.append(name)
            time.sleep(hold_s)

    big = _in_thread(ask, "big", 70)
    time.sleep(0.05)
    small = _in_thread(ask, "small", 10)  # would fit now, but the big one asked first
    time.sleep(0.1)
    assert log == [] and gate.free_bytes() == 40
    first.release()
    first.release()  # idempotent
    for t in (big, small):
        t.join(5)
    assert log == ["big", "small"] and gate.free_bytes() == 100


def test_a_request_larger_than_the_budget_goes_once_no_run_holds_memory():
    gate = MemoryGate(capacity=100)
    kept = gate.admit(30, "cached outputs").keep(30)  # kept memory does not hold it back
    running = gate.admit(10, "run")
    done = []
    t = _in_thread(lambda: done.append(gate.admit(500, "huge")))
    time.sleep(0.1)
    assert not done
    running.release()
    t.join(5)
    assert done and gate.free_bytes() == 100 - 30 - 500
    done[0].release()
    kept.release()
    assert gate.free_bytes() == 100


def test_reclaim_is_asked_for_kept_memory_before_a_request_waits():
    calls = []
    gate = MemoryGate(capacity=100)
    kept = gate.admit(80, "cached").keep(80)
    gate.reclaim = lambda force: (calls.append(force), kept.release())
    with gate.admit(50, "needs room"):
        pass
    assert calls == [True]  # no run in flight: everything kept may go
    running = gate.admit(60, "run")
    kept = gate.admit(30, "cached").keep(30)
    gate.reclaim = lambda force: (calls.append(force), kept.release())
    with gate.admit(30, "needs room"):
        pass
    assert calls == [True, False]
    running.release()


def test_alone_waits_for_runs_and_passes_its_own_work_only():
    gate = MemoryGate(capacity=100)
    running = gate.admit(10, "run")
    log, inside, other_waits = [], threading.Event(), threading.Event()

    def solo():
        with gate.alone():
            log.append("solo+")
            inside.set()
            other_waits.wait(5)
            time.sleep(0.1)  # the other task's request is held back meanwhile
            ctx = contextvars.copy_context()  # its reference, computed in another thread
            helper = threading.Thread(target=ctx.run, args=(lambda: log.append(
                ("helper", gate.admit(90, "its reference").nbytes)),))
            helper.start()
            helper.join(5)
            log.append("solo-")

    s = _in_thread(solo)
    time.sleep(0.1)
    assert log == []  # the run in flight first
    running.release()
    assert inside.wait(5)
    other = _in_thread(lambda: (gate.admit(5, "another task").release(), log.append("other")))
    other_waits.set()
    for t in (s, other):
        t.join(5)
    assert log == ["solo+", ("helper", 90), "solo-", "other"]
