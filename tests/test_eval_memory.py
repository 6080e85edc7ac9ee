"""Memory discipline in the evaluator, on the CPU (issue 24): a task too large to keep is streamed
(its reference runs again beside each candidate, trial by trial) and judged exactly as a kept
one; judgements wait for the memory budget; a reference out of memory alone blames the task with
the figures."""
import os

from kernelzero.eval import EvalConfig, Evaluator, RuntimeConfig
from kernelzero.eval.device import memory_gate
from kernelzero.tasks import Candidate, Task

EX = os.path.join(os.path.dirname(__file__), "..", "kernelzero", "examples")
ADV = os.path.join(os.path.dirname(__file__), "adversarial")
RELU = Task.from_file(os.path.join(EX, "tasks/level1/1_ReLU.py"))
GOOD = open(os.path.join(EX, "candidates/level_1_problem_1_sample_0_kernel.py")).read()
MEMOISE = open(os.path.join(ADV, "exploits/06_memoise_by_sample.py")).read()
WRONG = GOOD.replace("tl.maximum(x, 0.0)", "tl.maximum(x, 0.01)")

OOM_REFERENCE = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB (test)")
def get_inputs():
    return [torch.randn(256, 1024)]
def get_init_inputs():
    return []
"""


def test_a_streamed_task_is_judged_like_a_kept_one():
    assert WRONG != GOOD
    cands = {"good": Candidate(GOOD, "good"), "wrong": Candidate(WRONG, "wrong"),
             "memoise": Candidate(MEMOISE, "memoise")}
    verdicts = {}
    for store_mb in (None, 0):  # kept, then streamed (no reference output may be kept)
        # A fixed schedule: under a random one the poke trial's 8 changed elements hit one of
        # the memoiser's 16 sampled positions (of 16,000) about 1% of the time, and then its
        # recomputed output is rightly correct (CI saw it once, 3 Dec 2026).
        cfg = EvalConfig(device="cpu", policy="none", max_workers=2, seed=1,
                         runtime=RuntimeConfig(reference_store_mb=store_mb))
        with Evaluator(cfg) as ev:
            got = ev.judge_many([(RELU, c) for c in cands.values()])
        verdicts[store_mb] = dict(zip(cands, got))
    kept, streamed = verdicts[None], verdicts[0]
    for name, status in (("good", "correct"), ("wrong", "incorrect"), ("memoise", "incorrect")):
        assert kept[name].status == streamed[name].status == status, \
            (name, kept[name].reason, streamed[name].reason)
    assert streamed["good"].memory["streamed"] and not kept["good"].memory["streamed"]
    assert streamed["good"].trials_run == kept["good"].trials_run == 9
    assert "changed in place" in streamed["memoise"].reason


def test_judgements_wait_for_the_memory_budget():
    in_flight = []  # runs holding memory at each grant (kept reference outputs aside)
    real_admit = memory_gate.MemoryGate.admit

    def admit(gate, nbytes, what="-"):
        grant = real_admit(gate, nbytes, what)
        in_flight.append(gate._transient)
        return grant

    cfg = EvalConfig(device="cpu", policy="none", max_workers=3,
                     runtime=RuntimeConfig(memory_budget_mb=1))
    memory_gate.MemoryGate.admit = admit
    try:
        with Evaluator(cfg) as ev:
            got = ev.judge_many([(RELU, Candidate(GOOD + f"\n# {i}\n", f"g{i}")) for i in range(3)])
    finally:
        memory_gate.MemoryGate.admit = real_admit
    assert all(v.status == "correct" for v in got), [v.reason for v in got]
    # each run needs more than the 1 MiB budget: one at a time
    # the reference, then the three candidates, one at a time (a reference run again for a
    # judgement whose kept outputs were released adds a grant, also alone)
    assert len(in_flight) >= 4 and set(in_flight) == {1}, in_flight
    assert all(v.memory["admitted_bytes"] > 1 << 20 for v in got)


def test_a_reference_out_of_memory_alone_blames_the_task_with_figures():
    task = Task.from_source(OOM_REFERENCE, "oom_reference")
    # a budget (however large): the CPU measures footprints only then
    cfg = EvalConfig(device="cpu", policy="none", runtime=RuntimeConfig(memory_budget_mb=1 << 20))
    with Evaluator(cfg) as ev:
        v = ev.judge(task, Candidate(OOM_REFERENCE.replace("class Model", "class ModelNew"), "c"))
    assert v.status == "invalid_task" and "judged_alone_after_oom" in v.flags, v.reason
    assert "the reference needs ~" in v.reason and "inputs 1 MiB" in v.reason, v.reason
    assert "judged again alone" in v.reason
