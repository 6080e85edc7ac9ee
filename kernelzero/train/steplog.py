"""Per-step logging of training phases: one JSONL line per optimizer step, plus TensorBoard.

Covers: `StepLogger`, a transformers `TrainerCallback` that appends every `on_log` record (loss,
rewards, the CA-GRPO components, evaluation latency, ...) to `steps.jsonl` with the round, the
phase, the phase step and the run's global step, and mirrors the scalars to a TensorBoard
`SummaryWriter` under `tb/`. Only the main process writes. Does not cover the per-round reports
(loop.py) or what the numbers mean (ca_grpo.py, proposer_grpo.py).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from transformers import TrainerCallback


class StepLogger(TrainerCallback):
    def __init__(self, path: str | Path, round_idx: int, phase: str, step_offset: int,
                 tb_writer=None, extra: callable = None):
        self.path, self.round_idx, self.phase = Path(path), round_idx, phase
        self.step_offset, self.tb, self.extra = step_offset, tb_writer, extra
        self.records: list[dict] = []

    def on_log(self, args, state, control, logs=None, **kwargs):
        if not state.is_world_process_zero or not logs or "train_runtime" in logs:
            return
        rec = {"round": self.round_idx, "phase": self.phase, "phase_step": state.global_step,
               "step": self.step_offset + state.global_step}
        rec.update({k: (v if not (isinstance(v, float) and math.isnan(v)) else None)
                    for k, v in logs.items()})
        if self.extra:
            rec.update(self.extra())
        self.records.append(rec)
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(rec) + "\n")
        if self.tb is not None:
            for k, v in rec.items():
                if isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("round", "step"):
                    self.tb.add_scalar(f"{self.phase}/{k}", v, rec["step"])
            self.tb.flush()


def quiet(trainer) -> None:
    """Stop transformers printing every log dict on stdout (StepLogger keeps them in steps.jsonl),
    so `kernelzero train --json` prints one JSON document and nothing else there."""
    from transformers.trainer_callback import PrinterCallback, ProgressCallback

    trainer.remove_callback(PrinterCallback)
    trainer.remove_callback(ProgressCallback)


def read_steps(path: str | Path) -> list[dict]:
    out = []
    p = Path(path)
    if p.exists():
        for line in p.read_text(encoding="utf-8").splitlines():
            try:
                out.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return out


class PhaseTimerMixin:
    """Mix into a GRPOTrainer: wall time split into generation (`_generate`) and evaluation
    (`_calculate_rewards`); the rest of `train()` is optimisation (forward/backward/step)."""

    def _generate(self, *args, **kwargs):
        import time

        t0 = time.perf_counter()
        try:
            return super()._generate(*args, **kwargs)
        finally:
            self.phase_times["generation_s"] = self.phase_times.get("generation_s", 0.0) + time.perf_counter() - t0

    def _calculate_rewards(self, *args, **kwargs):
        import time

        t0 = time.perf_counter()
        try:
            return super()._calculate_rewards(*args, **kwargs)
        finally:
            self.phase_times["evaluation_s"] = self.phase_times.get("evaluation_s", 0.0) + time.perf_counter() - t0

    def train(self, *args, **kwargs):
        import time

        self.phase_times = {}
        t0 = time.perf_counter()
        out = super().train(*args, **kwargs)
        total = time.perf_counter() - t0
        self.phase_times["total_s"] = total
        self.phase_times["optimisation_s"] = max(
            0.0, total - self.phase_times.get("generation_s", 0.0) - self.phase_times.get("evaluation_s", 0.0))
        return out
