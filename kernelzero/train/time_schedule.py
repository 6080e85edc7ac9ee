"""A learning-rate schedule over wall-clock time: warm-up and decay follow the share of a time
budget spent, not of a planned step count.

A run given "train for 8 minutes" cannot know its steps per second in advance, and the rate
changes over the run (new batch shapes, the allocator and data workers warm up over many steps):
a schedule planned in steps from a short calibration ends early, its learning rate at 0 and the
rest of the budget unused, or late, cut before its decay. Here the schedule reads the clock: the
learning rate reaches 0 when the time is spent, at whatever step that is.

    schedule = TimeSchedule(limit_s=480, kind="cosine", warmup=0.03)
    trainer = time_scheduled(SFTTrainer, schedule)(..., callbacks=[schedule.callback(),
                                                                   time_limit_callback(480)])
"""
from __future__ import annotations

import math
import time


class TimeSchedule:
    """factor(step) = the share of the peak learning rate for the next step: a linear warm-up over
    the first `warmup` share of `limit_s`, then `kind` (constant, linear or cosine) down to 0 at
    `limit_s`. Before `start()` (the scheduler's construction) the clock reads 0."""

    def __init__(self, limit_s: float, kind: str = "linear", warmup: float = 0.0, clock=time.perf_counter):
        if limit_s <= 0 or not 0 <= warmup < 1:
            raise ValueError("a time schedule needs limit_s > 0 and 0 <= warmup < 1")
        self.limit_s, self.kind, self.warmup, self.clock = limit_s, kind, warmup, clock
        self.t0: float | None = None

    def start(self) -> None:
        self.t0 = self.clock()

    def spent(self) -> float:
        """The share of the budget spent, in [0, 1]."""
        return 0.0 if self.t0 is None else min(1.0, (self.clock() - self.t0) / self.limit_s)

    def factor(self, _step: int = 0) -> float:
        f = self.spent()
        if f < self.warmup:
            return f / self.warmup
        rest = (f - self.warmup) / (1.0 - self.warmup)
        if self.kind == "constant":
            return 1.0
        if self.kind == "cosine":
            return 0.5 * (1.0 + math.cos(math.pi * rest))
        return 1.0 - rest

    def callback(self):
        """A TrainerCallback that starts the clock when training begins (ending the training at
        `limit_s` is sft.time_limit_callback's)."""
        from transformers import TrainerCallback

        schedule = self

        class StartClock(TrainerCallback):
            def on_train_begin(self, args, state, control, **kw):
                schedule.start()

        return StartClock()


def time_scheduled(base, schedule: TimeSchedule):
    """`base` (a transformers Trainer class) whose learning-rate scheduler is `schedule`."""
    from torch.optim.lr_scheduler import LambdaLR

    class TimeScheduledTrainer(base):
        def create_scheduler(self, num_training_steps, optimizer=None):
            if self.lr_scheduler is None:
                self.lr_scheduler = LambdaLR(optimizer or self.optimizer, schedule.factor)
                self._created_lr_scheduler = True
            return self.lr_scheduler

    return TimeScheduledTrainer
