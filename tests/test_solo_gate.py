"""SoloGate (kernelzero/eval/solo_gate.py): a judgement that ran out of GPU memory beside others
is judged again alone, so its verdict does not blame the candidate for its neighbours."""
import os
import threading
import time

from kernelzero.eval import EvalConfig, Evaluator
from kernelzero.eval.sandbox import SandboxLimits
from kernelzero.eval.solo_gate import SoloGate, out_of_memory
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
    gate, log = SoloGate(), []

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
    gate = SoloGate()
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


def test_a_candidate_out_of_memory_beside_others_is_judged_again_alone(tmp_path):
    once = Candidate(OOM.format(always=False, marker=str(tmp_path / "once")), "oom_once")
    always = Candidate(OOM.format(always=True, marker=str(tmp_path / "always")), "oom_always")
    pairs = [(RELU, once), (RELU, Candidate(GOOD, "good")), (RELU, Candidate(GOOD + "\n#2", "good2"))]
    # Unjailed: the candidate remembers its first judgement in a file outside its worker,
    # which a jail (rightly) hides from the second one.
    unjailed = SandboxLimits(isolation="none")
    with Evaluator(EvalConfig(device="cpu", policy="none", max_workers=3), limits=unjailed) as ev:
        v_once, v_good, _ = ev.judge_many(pairs)
        v_alone = ev.judge(RELU, always)  # nothing beside it: its out-of-memory stands
    assert (tmp_path / "once").exists()
    assert v_once.status == "correct" and "judged_alone_after_oom" in v_once.flags, v_once.reason
    assert "judged again alone" in v_once.reason
    assert v_good.status == "correct" and "judged_alone_after_oom" not in v_good.flags
    assert v_alone.status == "runtime_error" and "judged_alone_after_oom" not in v_alone.flags
    assert "out of memory" in v_alone.reason.lower()
