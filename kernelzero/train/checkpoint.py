"""Checkpoints of the alternating loop: run state, RNG states, optimizer states, step-log offsets.

Covers: `RunState` (which phases are complete, where the latest Coder / Proposer weights are,
the step count, the step log's length at the end of the last complete phase), written atomically
after every phase; saving and restoring the python / numpy / torch RNG states; the optimizer carry
(`OptimizerCarryMixin`) that saves a trainer's optimizer state after a phase and loads it into the
next phase's optimizer of the same model.

Does not cover: the model weights' format (save_pretrained) or the verdicts (judging.py keeps
them in their own append-only file, never rolled back).

Known limit: the optimizer carry saves `optimizer.state_dict()` of each process; under DeepSpeed
ZeRO-3 that is each rank's shard (restored by the same rank count only).
"""
from __future__ import annotations

import json
import os
import random
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch

PHASES = ("proposer", "coder")


@dataclass
class RunState:
    """Progress of a run; `done` lists complete phases as "r{round}-{phase}" in order."""

    done: list[str] = field(default_factory=list)
    coder_model: str = ""
    proposer_model: str = ""
    coder_optimizer: str = ""
    proposer_optimizer: str = ""
    steps: int = 0                 # optimizer steps completed in complete phases
    steplog_bytes: int = 0         # length of steps.jsonl after the last complete phase
    reported_rounds: list[int] = field(default_factory=list)
    heldout: list[dict] = field(default_factory=list)   # summary.json's entries, round 0 first
    cold_start: dict = field(default_factory=dict)      # the cold start's figures, when it ran

    @staticmethod
    def phase_id(round_idx: int, phase: str) -> str:
        return f"r{round_idx}-{phase}"

    def is_done(self, round_idx: int, phase: str) -> bool:
        return self.phase_id(round_idx, phase) in self.done

    def save(self, path: str | Path) -> None:
        path = Path(path)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=1) + "\n")
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | Path) -> "RunState":
        return cls(**json.loads(Path(path).read_text()))


def rng_state() -> dict:
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def save_rng(path: str | Path) -> None:
    torch.save(rng_state(), path)


def restore_rng(path: str | Path) -> None:
    st = torch.load(path, weights_only=False)
    random.setstate(st["python"])
    np.random.set_state(st["numpy"])
    torch.set_rng_state(st["torch"])
    if st.get("cuda") is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(st["cuda"])


class OptimizerCarryMixin:
    """Mix into a transformers Trainer: `optimizer_state_in` (a path) is loaded into the optimizer
    as soon as it is created; `save_optimizer(path)` writes the state after training."""

    optimizer_state_in: str | None = None

    def create_optimizer(self, *args, **kwargs):
        opt = super().create_optimizer(*args, **kwargs)
        if self.optimizer_state_in and Path(self.optimizer_state_in).exists():
            state = torch.load(self.optimizer_state_in, map_location="cpu", weights_only=False)
            self.optimizer.load_state_dict(state)
        return opt

    def save_optimizer(self, path: str | Path) -> None:
        opt = getattr(self.optimizer, "optimizer", self.optimizer)  # unwrap AcceleratedOptimizer
        torch.save(opt.state_dict(), path)
