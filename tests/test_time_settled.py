"""A timed loop that saw work outlive its calls is timed once more (reference.time_settled):
another process's GPU work reads the same way, a module that leaves work behind does it again."""
from kernelzero.eval import EvalConfig
from kernelzero.eval.reference import time_settled, timing_details
from kernelzero.eval.schedule import make_schedule


class Worker:
    def __init__(self, replies):
        self.replies, self.sent = list(replies), []

    def request(self, msg, timeout):
        self.sent.append(msg["op"])
        return self.replies.pop(0)


LATE = {"ok": True, "times_ms": [2.5], "work_after_stream": True}
CLEAN = {"ok": True, "times_ms": [0.17], "work_after_stream": False}


def _settle(replies):
    cfg = EvalConfig(device="cuda")
    schedule = make_schedule(1, "task", cfg.correctness_trials, (), n_timed=cfg.timing_max_trials,
                             n_checked=cfg.timing_checked_calls, check_within=20)
    w = Worker(replies)
    reply, wall_ms = time_settled(w, cfg, schedule, 50 << 20, checked=schedule.checked)
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
