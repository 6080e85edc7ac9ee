"""A candidate's worker as the judge holds it while the candidate is judged.

`HeldCandidate` is what one judgement holds (the worker, the shared-memory arena its outputs are
mapped into, its `CandidateJudgement` and a streamed task's reference worker), all released
together after the verdict. Besides it: writing the sources the worker loads into its
directory, and the verdicts a worker that runs out of time or dies earns.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.judgement import CandidateJudgement
from kernelzero.eval.sandbox.channel import WorkerDied
from kernelzero.eval.sandbox.sandbox import SandboxWorker
from kernelzero.eval.streamed_reference import StreamedReference
from kernelzero.tasks.task import Candidate, Task
from kernelzero.eval.transport.cuda_ipc import SharedMappings
from kernelzero.eval.verdict import Verdict

GERUND = {"load": "loading", "run": "running", "time": "timing"}


@dataclass
class HeldCandidate:
    """What one candidate's judgement holds, for the judge to release after it."""

    worker: SandboxWorker
    arena: SharedMappings = field(default_factory=SharedMappings)  # mapped while it is judged
    judgement: CandidateJudgement | None = None
    oracle: StreamedReference | None = None  # a streamed task's reference, run beside it

    @property
    def phase(self) -> str:
        return self.judgement.phase if self.judgement else "load"


def write_sources(w: SandboxWorker, task: Task, cand: Candidate) -> dict:
    """The candidate's source, and the worker's own copy of the reference's (nothing a candidate
    writes can change what another worker imports), in its directory: the `load` paths."""
    cand_path = os.path.join(w.dir, f"candidate_{cand.hash}.py")
    Path(cand_path).write_text(cand.source, encoding="utf-8")
    task_path = os.path.join(w.dir, f"task_{task.hash}.py")
    Path(task_path).write_text(task.source, encoding="utf-8")
    return {"task_path": task_path, "candidate_path": cand_path}


def timeout_verdict(held: HeldCandidate, config: EvalConfig, backend: str) -> Verdict:
    """The candidate's worker did not answer within its phase's limit (and was killed)."""
    limit = config.load_timeout_s if held.phase == "load" else config.run_timeout_s
    return Verdict(status="timeout", backend=backend, log_tail=held.worker.log_tail(),
                   reason=f"the candidate did not finish {GERUND[held.phase]} "
                          f"within {limit:g} s; its process group was killed")


def died_verdict(e: WorkerDied, phase: str, w: SandboxWorker, backend: str) -> Verdict:
    """The candidate's worker ended during `phase`: by its own exit 0, or by a crash or signal."""
    if e.exit_code == 0:  # ended itself before the checks could finish
        return Verdict(status="rejected", backend=backend, flags=["harness_exit"],
                       log_tail=w.log_tail(),
                       reason=f"while {GERUND[phase]}, the candidate ended its own "
                              "process (exit code 0) before the checks finished")
    return Verdict(status="runtime_error", backend=backend, log_tail=w.log_tail(),
                   reason=f"while {GERUND[phase]}, {e}")
