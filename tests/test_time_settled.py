"""A timed loop that saw work outlive its calls is timed once more (reference.time_settled):
another process's GPU work reads the same way, a module that leaves work behind does it again."""
from kernelzero.eval import EvalConfig
from kernelzero.eval.time_command import time_settled, timing_details
from kernelzero.eval.schedule import make_schedule


class Worker:
    def __init__(self, replies):
        self.replies, self.sent = list(replies), []

    def request(self, msg, timeout):
        self.sent.append(msg["op"])
        self.late_counts = msg.get("late_counts")
        return self.replies.pop(0)


LATE = {"ok": True, "times_ms": [2.5], "work_after_stream": True}
CLEAN = {"ok": True, "times_ms": [0.17], "work_after_stream": False}


def _settle(replies, **kw):
    cfg = EvalConfig(device="cuda")
    schedule = make_schedule(1, "task", cfg.correctness_trials, (), n_timed=cfg.timing_max_trials,
                             n_checked=cfg.timing_checked_calls, check_within=20)
    w = Worker(replies)
    reply, wall_ms = time_settled(w, cfg, schedule, 50 << 20, checked=schedule.checked, **kw)
    assert wall_ms >= 0
    return w, reply


def test_a_clean_loop_is_kept():
    w, reply = _settle([CLEAN, LATE])
    assert w.sent == ["time"] and reply is CLEAN and "retimed" not in timing_details(reply)


def test_a_late_loop_is_timed_again_and_the_second_kept():
    w, reply = _settle([LATE, CLEAN])
    assert w.sent == ["time", "time"] and reply["times_ms"] == [0.17]
    assert timing_details(reply)["retimed"] is True


def test_late_twice_stays_late():
    w, reply = _settle([LATE, dict(LATE, times_ms=[2.6])])
    assert reply["work_after_stream"] and reply["times_ms"] == [2.6] and reply["retimed"]


def test_a_failed_loop_is_not_repeated():
    w, reply = _settle([{"ok": False, "status": "runtime_error", "reason": "x"}, CLEAN])
    assert w.sent == ["time"] and not reply["ok"]


def test_a_reference_loop_asks_for_its_calls_own_times():
    """The judge times a reference with late_counts false, both loops (timer.py: an upper bound
    of a reference's time would inflate every speedup against it); a candidate's count."""
    w, _ = _settle([LATE, CLEAN], late_counts=False)
    assert w.sent == ["time", "time"] and w.late_counts is False
    w, _ = _settle([CLEAN])
    assert w.late_counts is True


def test_a_busy_host_is_flagged_on_the_verdict():
    from kernelzero.eval.reference import ReferenceRun
    from kernelzero.eval.rulings import timed_verdict
    from kernelzero.eval.verdict import Timing
    ref = ReferenceRun(True, timing=Timing(median_ms=1.0, iqr_ms=0.01, mean_ms=1.0, min_ms=0.99,
                                           n=100))
    reply = {"ok": True, "times_ms": [1.2] * 12, "work_after_stream": True, "host_busy": True,
             "outputs": {}}
    v = timed_verdict(EvalConfig(device="cuda"), "H200", ref, "triton", (5, 0.0, 0.0), reply,
                      1e4, {})
    assert v.status == "correct" and {"work_after_stream", "busy_host"} <= set(v.flags)
