"""A streamed task's reference for one judgement (`StreamedReference`): the reference run again
in a worker of its own beside the candidate, one trial at a time, each trial's outputs read in
place and compared before the next is asked for (reference.py says which tasks are streamed,
and why).

Does not cover the reference's first run, which finds a task streamed and keeps what its outputs
say about it (reference.py), nor the comparisons (judgement.py).
"""
from __future__ import annotations

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.device.memory_plan import MemoryPlan
from kernelzero.eval.reference import load_module
from kernelzero.eval.schedule import Trial
from kernelzero.eval.transport.cuda_ipc import SharedMappings
from kernelzero.eval.trial_results import TrialResult, decode_trials


class ReferenceFailed(Exception):
    """A streamed task's reference failed beside a candidate (the reason)."""


class StreamedReference:
    """A streamed task's reference for one judgement: a worker of its own that computes one
    trial at a time; each trial's outputs are read in place (not copied) and must be compared
    before the next trial is asked for. `start` may raise WorkerDied / WorkerTimeout."""

    def __init__(self, task_source: str, cfg: EvalConfig, take_worker, init_seed: int = 0):
        self.source, self.cfg, self.init_seed = task_source, cfg, init_seed
        self.w = take_worker("ref")
        self._mapped = SharedMappings(copy=False)

    def start(self) -> str | None:
        """Load it; None, or why it failed."""
        info = load_module(self.w, self.source, self.cfg, self.init_seed, footprint=False)
        return None if info.get("ok") else f"the reference failed to load: {info.get('reason')}"

    def build(self) -> str | None:
        """Move it to the device (the caller holds the GPU); None, or why it failed."""
        info = self.w.request({"op": "build", "init_seed": self.init_seed},
                              self.cfg.load_timeout_s)
        return None if info.get("ok") else f"the reference failed to build: {info.get('reason')}"

    def trial(self, t: Trial, plan: MemoryPlan | None) -> TrialResult:
        """The trial's outputs, views of the worker's memory until the next call (or
        `release`). Raises ReferenceFailed with the reason when the reference fails."""
        self.release()
        reply = self.w.request({"op": "run", "reuse": False, "trials": [t.as_dict()],
                                "share_in_place_bytes": plan.in_place_bytes() if plan else 0,
                                "trim": True}, self.cfg.run_timeout_s * 2)
        if not reply.get("ok"):
            raise ReferenceFailed(str(reply.get("reason")))
        return decode_trials(self.w, reply, mapped=self._mapped, keep_mapped=True)[0]

    def release(self) -> None:
        self._mapped.clear()

    def close(self, wait: bool = False) -> None:
        self.release()
        self.w.close(wait=wait)
