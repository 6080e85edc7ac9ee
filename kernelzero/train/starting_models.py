"""Where a run's first Coder and Proposer come from: the `coder_model` / `proposer_model` specs
of a TrainConfig resolved to checkpoint directories.

A spec is a checkpoint directory, `tiny` (a small random model built in the run directory),
`shipped` (the model inside the package) or `scratch` (a cold start: the Coder distilled from
the teacher compiler and fine-tuned, the Proposer from the op family's generator). Rank 0 builds
what has to be built; the other ranks wait for the file it writes last.
"""
from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from kernelzero.train.checkpoint import RunState
from kernelzero.train.config import TrainConfig


def resolve_models(cfg: TrainConfig, state: RunState, out: Path, rank: int, evaluator,
                   log=print) -> None:
    """Set `state.coder_model` and `state.proposer_model` to checkpoint directories, leaving any
    already set (a resumed run). `evaluator` judges the Coder cold start's teacher kernels when
    the run judges on the CPU."""
    for role in ("coder", "proposer"):
        attr = f"{role}_model"
        if getattr(state, attr):
            continue
        spec = getattr(cfg, attr)
        if spec == "tiny":
            spec = str(tiny_model(cfg, out, role, rank))
        elif spec == "shipped":
            from kernelzero.models.shipped import shipped_model
            spec = str(shipped_model(role))
        elif spec == "scratch" and role == "coder":
            spec = coder_cold_start(cfg, state, out, rank, evaluator, log)
        elif spec == "scratch" and role == "proposer":
            spec = proposer_cold_start(cfg, out, rank, log)
        if not Path(spec).exists():
            raise FileNotFoundError(f"{attr}={spec!r}: no such checkpoint directory")
        setattr(state, attr, spec)


def tiny_model(cfg: TrainConfig, out: Path, role: str, rank: int) -> Path:
    """A small random model for `role`, with positions for its longest prompt and answer."""
    from kernelzero.models.tiny import build_tiny_model
    path = out / "models" / f"{role}-init"
    done = path / "kernelzero_tiny.json"  # written last by build_tiny_model
    if rank == 0 and not done.exists():
        phase = getattr(cfg, role)  # positions for its longest prompt + answer
        positions = max(4096, phase.max_prompt_tokens + phase.max_completion_tokens)
        build_tiny_model(path, seed=cfg.seed + (0 if role == "coder" else 1),
                         hidden_size=cfg.tiny_size[0], num_layers=cfg.tiny_size[1],
                         max_position_embeddings=positions)
    wait_for(done)
    return path


def coder_cold_start(cfg: TrainConfig, state: RunState, out: Path, rank: int, evaluator,
                     log=print) -> str:
    """A Coder from zero (cold_start.py): distil the teacher, build, fine-tune. Rank 0 does it;
    the others wait for the model. Its figures go to state.json and summary.json."""
    from kernelzero.train.cold_start import run_cold_start
    where = out / "cold_start"
    if rank == 0:
        log("cold start: the Coder is made from zero (teacher distillation, then SFT)")
        with distill_pool(cfg, evaluator) as pool:
            figures = run_cold_start(cfg.cold_start, where, pool, log=log, curve_config={
                "prompt": cfg.coder.prompt_config(), "target": cfg.heldout.family_target,
                "max_new_tokens": cfg.coder.max_completion_tokens})
        state.cold_start = {k: v for k, v in figures.items() if k != "config"}
    wait_for(where / "cold_start.json")
    return str(where / "model")


def proposer_cold_start(cfg: TrainConfig, out: Path, rank: int, log=print) -> str:
    """A Proposer from zero: distilled from the op family's generator, then fine-tuned."""
    if cfg.proposer.kind != "family":
        raise ValueError("proposer_model: scratch needs proposer.kind: family (a Proposer from "
                         "zero learns the op family's modules)")
    from kernelzero.train.family_proposer import make_proposer
    where = out / "proposer_cold_start"
    if rank == 0:
        log("proposer cold start: distilled from the family generator, then SFT")
        make_proposer(cfg, where, log=log)
    wait_for(where / "proposer_cold_start.json")
    return str(where / "model")


@contextlib.contextmanager
def distill_pool(cfg: TrainConfig, evaluator):
    """The teacher's kernels are small training modules: judged on the CPU (the Triton
    interpreter), with as many workers as the machine has cores to spare, whatever device
    the run's rollouts are judged on."""
    from kernelzero.eval import EvalConfig, Evaluator
    if cfg.eval.get("device", "cpu") == "cpu":
        yield evaluator
        return
    workers = max(1, (os.cpu_count() or 2) - 2)
    with Evaluator(EvalConfig(device="cpu", tolerance=cfg.eval.get("tolerance", "strict"),
                              max_workers=workers)) as ev:
        yield ev


def wait_for(path: Path, timeout_s: float = 3600) -> None:
    """Ranks other than 0 wait for what rank 0 writes (a model, the cold start)."""
    deadline = time.time() + timeout_s
    while not path.exists() and time.time() < deadline:
        time.sleep(0.5)
