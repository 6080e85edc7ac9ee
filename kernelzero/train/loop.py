"""The alternating Proposer–Coder loop: R rounds of (Proposer phase, Coder phase), checkpointed
after every phase, resumable, with a report per round.

Layout of a run directory (runs/NAME):
    config.yaml          the resolved config
    state.json           RunState: complete phases, latest weights and optimizer states, offsets
    steps.jsonl          one line per optimizer step (both phases); TensorBoard under tb/
    verdicts.jsonl       every verdict ever reached (append-only; the cache resumes from it)
    pool.db              the task pool (kernelzero.propose.task_pool: every valid module, its p by
                         round and phase)
    ckpt/r{R}-{phase}/   model/ (save_pretrained), optimizer.pt, rng.pt, phase.json
    reports/round_{R}.json|md, reports/rounds.png, reports/round_{R}/ (held-out report)

Resume: phases listed in state.json are skipped; the step log is cut back to its length at the
end of the last complete phase, the RNG states and the latest weights and
optimizer states are restored, and the interrupted phase runs again from its start. Verdicts
are never rolled back: the re-run phase finds the ones it already reached in the cache (each
phase's TRL seed is derived from the run seed, round and phase, so it samples the same
completions) and judges only what it had not. The pool is not rolled back either: adding a
module and recording its round's p are idempotent, and a module validated and measured by the
killed attempt is a real result. A resume may judge elsewhere than the first attempt did (the
`reward` section may change; nothing else but `rounds` may).

The pool's p. The Proposer phase measures each new module with G attempts of the Coder; the
Coder phase then samples the pool's in-band modules while training, and the p of its latest
group for each of them is recorded too (phase `coder`). So the p that picks the next round's
Coder tasks is that of the latest Coder: a module it has learnt to solve every time (or can no
longer solve) leaves the band and the next Coder phase's training set.

Judging: one pool (`reward` section: local, Ray or a reward service; judging.open_pool) judges
every candidate; the Proposer's validation check probes reference modules in a local Evaluator,
which is also the pool when `reward` says local.

Does not cover: where the starting Coder and Proposer come from (starting_models.py), the reward
formulas (rewards.py), the TRL adapters (ca_grpo.py, proposer_grpo.py) or launching on several
processes (docs/training.md).
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

import yaml

from kernelzero.train.checkpoint import PHASES, RunState, restore_rng, save_rng
from kernelzero.train.config import TrainConfig
from kernelzero.train.judging import Judge, VerdictCache, open_pool
from kernelzero.train.round_report import count, mean, phase_line, plot_heldout
from kernelzero.train.starting_models import resolve_models
from kernelzero.train.steplog import StepLogger, read_steps

EXAMPLE_TASKS = Path(__file__).resolve().parent.parent / "examples" / "tasks"
PHASE_SEED_STRIDE = 1000


class RunExists(Exception):
    """The output directory already holds a run and --resume was not given."""


def phase_seed(cfg: TrainConfig, round_idx: int, phase: str) -> int:
    return cfg.seed + PHASE_SEED_STRIDE * round_idx + PHASES.index(phase)


def _world() -> tuple[int, int]:
    return int(os.environ.get("WORLD_SIZE", "1")), int(os.environ.get("RANK", "0"))


class Loop:
    """One run of the alternating loop in `out`; `run()` does (or finishes) it."""

    def __init__(self, cfg: TrainConfig, out: str | Path, resume: bool = False, log=print,
                 tools_factory=None):
        """`tools_factory(cfg, evaluator, coder_model) -> (ProposerTools, close)` supplies the
        Proposer's prompt, parser, validation check and frontier reward (default:
        proposer_tools.default_tools, the Proposer package's)."""
        self.cfg, self.out, self.log = cfg, Path(out), log
        self.tools_factory = tools_factory
        self.world, self.rank = _world()
        state_path = self.out / "state.json"
        if state_path.exists() and not resume:
            raise RunExists(f"{self.out} already holds a run; pass --resume to continue it "
                            "or choose another --out")
        self.out.mkdir(parents=True, exist_ok=True)
        self.state = RunState.load(state_path) if state_path.exists() else RunState()
        self.resumed = state_path.exists()
        if self.resumed:
            _check_same_config(self.out / "config.yaml", cfg)
        if self.rank == 0:
            (self.out / "config.yaml").write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
        suffix = "" if self.world == 1 else f".rank{self.rank}"
        self.cache = VerdictCache(self.out / f"verdicts{suffix}.jsonl")
        from kernelzero.propose.task_pool import TaskPool
        self.pool = TaskPool(self.out / "pool.db")
        self.steplog = self.out / "steps.jsonl"
        if self.resumed and self.rank == 0:
            _truncate(self.steplog, self.state.steplog_bytes)
            last = self.state.done[-1] if self.state.done else None
            if last:
                restore_rng(self.out / "ckpt" / last / "rng.pt")
        self.tb = None
        self._sets = None
        self._speedups: dict[str, list[float]] = {}  # pool task hash -> its kernels' speed-ups

    # ------------------------------------------------------------------ setup
    def cold_start_pending(self) -> bool:
        """Whether `_models` will train a model from zero (a `scratch` spec not yet resolved)."""
        return any(getattr(self.cfg, f"{role}_model") == "scratch" and not getattr(self.state, f"{role}_model")
                   for role in ("coder", "proposer"))

    def _models(self) -> None:
        """The starting Coder and Proposer as checkpoint directories (starting_models.py)."""
        resolve_models(self.cfg, self.state, self.out, self.rank, self.evaluator, log=self.log)
        self.state.save(self.out / "state.json") if self.rank == 0 else None

    def _seed_tasks(self) -> list:
        """The tasks the Coder trains on besides the pool (seed_tasks.py), none held out."""
        from kernelzero.train.seed_tasks import seed_tasks
        if self._sets is None:
            from kernelzero.train.heldout import heldout_sets
            self._sets = heldout_sets(self.cfg, EXAMPLE_TASKS)
        held = {t.hash for tasks in self._sets.values() for t in tasks}
        return seed_tasks(self.cfg.seed_tasks, self.cfg.cold_start.family, self.cfg.seed, held, EXAMPLE_TASKS)

    # ------------------------------------------------------------------ the loop
    def run(self) -> dict:
        from kernelzero.eval import Evaluator
        from kernelzero.eval.pools import warm_up_in_background

        t0 = time.perf_counter()
        if self.cfg.torch_threads:
            import torch
            torch.set_num_threads(self.cfg.torch_threads)
        with contextlib.ExitStack() as stack:
            # The judging pool first: a service that cannot be reached stops the run before any
            # model is built (judging.PoolUnavailable).
            local = self.cfg.reward.where == "local"
            pool = None if local else stack.enter_context(
                open_pool(self.cfg.reward, self.cfg.eval_config()))
            self.evaluator = stack.enter_context(Evaluator(self.cfg.eval_config()))
            # Worker start-up overlaps model loading, but not a cold start's SFT: on cuda every
            # spare holds a CUDA context (0.5-1 GB each, one per candidate of a Coder step).
            warm_early = local and not self.cold_start_pending()
            if warm_early:
                warm_up_in_background(self.evaluator)
            self.judge = Judge(self.evaluator if local else pool, self.cache, log=self.log)
            self._models()
            if local and not warm_early:
                warm_up_in_background(self.evaluator)
            if self.rank == 0:
                try:  # TensorBoard is an extra; steps.jsonl holds the same scalars
                    from torch.utils.tensorboard import SummaryWriter
                    self.tb = SummaryWriter(str(self.out / "tb"))
                except ImportError:
                    pass
            if self.rank == 0 and not self.state.heldout:
                self._baseline()
            for r in range(self.cfg.rounds):
                for phase in PHASES:
                    if not self.state.is_done(r, phase):
                        self._phase(r, phase)
                if r not in self.state.reported_rounds:
                    self._report(r)
        if self.tb is not None:
            self.tb.close()
        summary = {"out": str(self.out), "steps": self.state.steps, "phases": list(self.state.done),
                   "verdicts": len(self.cache), "pool": len(self.pool), "resumed": self.resumed,
                   "judging": self.cfg.reward.where, "coder_model": self.cfg.coder_model,
                   "cold_start": self.state.cold_start or None, "heldout": self.state.heldout,
                   "frontier_band_share": self._band_shares(), "wall_s": time.perf_counter() - t0}
        if self.rank == 0:
            from kernelzero.train.heldout import change_since_start
            last = max((h["round"] for h in self.state.heldout), default=0)
            summary["heldout_change"] = change_since_start(self.out / "reports", last, self.cfg.seed)
            (self.out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
            plot_heldout(self.out / "reports", self.state.heldout)
        return summary

    def _phase(self, r: int, phase: str) -> None:
        pid = RunState.phase_id(r, phase)
        ckpt = self.out / "ckpt" / pid
        ckpt.mkdir(parents=True, exist_ok=True)
        context = {"round": r, "phase": phase}
        logger = StepLogger(self.steplog, r, phase, self.state.steps, self.tb)
        seed = phase_seed(self.cfg, r, phase)
        self.log(f"round {r + 1}/{self.cfg.rounds}: {phase} phase ({getattr(self.cfg, phase + '_steps')} steps)")
        if phase == "coder":
            trainer, info = self._coder_phase(r, ckpt, seed, logger, context)
        else:
            trainer, info = self._proposer_phase(r, ckpt, seed, logger, context)
        steps = trainer.state.global_step if trainer is not None else 0
        if trainer is not None:  # every rank: sharded (ZeRO-3 / FSDP) weights are gathered here
            model_dir = ckpt / "model"
            trainer.save_model(str(model_dir))
            opt_path = ckpt / ("optimizer.pt" if self.world == 1 else f"optimizer.rank{self.rank}.pt")
            trainer.save_optimizer(opt_path)
            setattr(self.state, f"{phase}_model", str(model_dir))
            setattr(self.state, f"{phase}_optimizer", str(opt_path))
            info["times_s"] = dict(getattr(trainer, "phase_times", {}))
            if self.rank == 0:
                trainer.processing_class.save_pretrained(str(model_dir))
            trainer.accelerator.wait_for_everyone()  # the next phase loads what rank 0 wrote
        info.update({"steps": steps, "round": r, "phase": phase})
        self.log(phase_line(info))
        self.state.steps += steps
        self.state.done.append(pid)
        if self.rank == 0:
            (ckpt / "phase.json").write_text(json.dumps(info, indent=1) + "\n")
            save_rng(ckpt / "rng.pt")
            self.state.steplog_bytes = self.steplog.stat().st_size if self.steplog.exists() else 0
            self.state.save(self.out / "state.json")

    def _coder_phase(self, r: int, ckpt: Path, seed: int, logger: StepLogger, context: dict):
        from kernelzero.train.ca_grpo import run_coder_phase

        pool_tasks = [e.task() for e in self.pool.in_band(*self.cfg.proposer.band)]
        tasks = self._seed_tasks() + pool_tasks
        info = {"tasks": len(tasks), "pool_tasks": len(pool_tasks)}
        if self.cfg.coder_steps == 0:
            return None, info
        trainer = run_coder_phase(self.cfg, self.state.coder_model, tasks, self.judge, ckpt / "trl", seed,
                                  [logger], self.state.coder_optimizer or None, context, self.world)
        comps = [h["components"] for h in trainer.reward_history]
        info["gate_open_rate"] = mean([c["gate_open_rate"] for c in comps])
        info["correct_rate"] = mean([c["correct_rate"] for c in comps])
        info["mixed_group_rate"] = mean([c.get("mixed_group_rate") for c in comps])
        info["mixed_group_rate_by_step"] = [c.get("mixed_group_rate") for c in comps]
        # Every rank holds the same gathered history, so every rank records the same rows
        # (idempotent per task, round and phase), as the Proposer phase's ranks each add theirs.
        measured = latest_group_flags(trainer.reward_history, {t.hash for t in pool_tasks})
        for h, flags in measured.items():
            self.pool.record(h, r, flags, phase="coder")
        info["pool_measured"] = len(measured)
        info["pool_in_band_after"] = len(self.pool.in_band(*self.cfg.proposer.band))
        return trainer, info

    def _proposer_phase(self, r: int, ckpt: Path, seed: int, logger: StepLogger, context: dict):
        from kernelzero.train.proposer_grpo import FrontierRewardSource, proposer_rows, run_proposer_phase

        if self.cfg.proposer_steps == 0:
            return None, {"valid_rate": None, "frontier_mean": None, "valid": 0, "in_band": 0}
        earlier = [e for e in self.pool.entries() if e.rates and e.rates[0]["round"] < r]
        factory = self.tools_factory
        if self.cfg.proposer.kind == "family":
            from kernelzero.train import family_proposer as fp
            factory = factory or fp.family_tools
            family = self.cfg.cold_start.family
            sampler = lambda rng, k: fp.sample_api_set(rng, k, family)  # noqa: E731
            weakness = fp.pool_feedback(earlier, self._speedups)
        else:
            from kernelzero.propose.llm import weakness_summary
            from kernelzero.train.proposer_tools import default_tools, sample_api_set as sampler
            factory = factory or default_tools
            weakness = weakness_summary(earlier)
        tools, closer = factory(self.cfg, self.evaluator, self.state.coder_model)
        try:
            rows = proposer_rows(self.cfg, tools, sampler, weakness, seed)
            reward = FrontierRewardSource(self.cfg, tools, self.judge, context=lambda: dict(context))
            trainer = run_proposer_phase(self.cfg, self.state.proposer_model, rows, reward, ckpt / "trl",
                                         seed, [logger], self.state.proposer_optimizer or None, self.world)
        finally:
            closer()
        self._speedups.update(reward.speedups)
        for task, apis, flags in reward.valid_modules:  # every rank adds its own (SQLite, WAL)
            h, _ = self.pool.add(task.source, apis, task.name, origin=f"llm:proposer-r{r}",
                                 provenance={"round": r, "phase": "proposer"})
            self.pool.record(h, r, flags)
        hist = reward.history
        info = {"modules": len(hist), "valid_rate": mean([h["valid"] for h in hist]),
                "frontier_mean": mean([h["reward"] for h in hist if h["valid"]]),
                "reward_mean": mean([h["reward"] for h in hist]), "valid": len(reward.valid_modules),
                "in_band": sum(bool(h.get("in_band")) for h in hist),
                "band_share": (sum(bool(h.get("in_band")) for h in hist if h["valid"])
                               / max(1, sum(bool(h["valid"]) for h in hist))),
                "rejections": count([h["reason"] for h in hist if not h["valid"]])}
        return trainer, info

    # ------------------------------------------------------------------ reports
    def _heldout(self, round_idx: int) -> dict:
        from kernelzero.train.heldout import heldout_sets
        from kernelzero.train.round_report import heldout_eval

        if self._sets is None:
            self._sets = heldout_sets(self.cfg, EXAMPLE_TASKS)
        self.log(f"held-out evaluation, round {round_idx} ({'before RL' if round_idx == 0 else 'after RL'})")
        return heldout_eval(self.cfg, self.state.coder_model, self._sets, self.judge,
                            self.out / "reports" / f"round_{round_idx}", log=self.log,
                            context={"round": round_idx, "phase": "heldout"})

    def _baseline(self) -> None:
        """Round 0: the Coder before any RL (the cold start's or the given checkpoint)."""
        held = self._heldout(0)
        self.state.heldout.append(held)
        self.state.save(self.out / "state.json")

    def _report(self, r: int) -> None:
        from kernelzero.train.round_report import write_round_report

        if self.rank != 0:
            return
        held = self._heldout(r + 1)
        phases = {p: json.loads((self.out / "ckpt" / RunState.phase_id(r, p) / "phase.json").read_text())
                  for p in PHASES}
        write_round_report(self.out, r + 1, phases, held, self.pool, read_steps(self.steplog), self.tb)
        self.state.heldout.append(held)
        self.state.reported_rounds.append(r)
        self.state.save(self.out / "state.json")

    def _band_shares(self) -> list[dict]:
        """Per round: the share of the Proposer's valid modules whose p fell inside the band."""
        out = []
        for r in range(self.cfg.rounds):
            path = self.out / "ckpt" / RunState.phase_id(r, "proposer") / "phase.json"
            if path.exists():
                info = json.loads(path.read_text())
                out.append({"round": r + 1, "valid": info.get("valid"), "in_band": info.get("in_band"),
                            "share": info.get("band_share")})
        return out


def latest_group_flags(history: list[dict], task_hashes: set[str]) -> dict[str, list[bool]]:
    """Correctness flags of the latest step's samples of each task in `task_hashes`, from a
    CAGRPOTrainer's gathered `reward_history` (entries with `task_ids` aligned with `correct`).

    The latest step, not the whole phase: the Coder improves during the phase, and p should say
    what the Coder at its end can do.
    """
    out: dict[str, list[bool]] = {}
    for h in reversed(history):
        step: dict[str, list[bool]] = {}
        for t, c in zip(h.get("task_ids") or [], h["correct"]):
            if t in task_hashes and t not in out:
                step.setdefault(t, []).append(c >= 0.5)
        out.update(step)
    return out


# Config sections a resume may change: `rounds` (a longer run) and `reward` (where candidates are
# judged: a service moves, a cluster grows; verdicts already in the cache are kept either way).
RESUME_MAY_CHANGE = ("rounds", "reward")


def _check_same_config(path: Path, cfg: TrainConfig) -> None:
    """A resumed run must use the config it started with (except RESUME_MAY_CHANGE)."""
    if not path.exists():
        return
    old = yaml.safe_load(path.read_text()) or {}
    new = yaml.safe_load(yaml.safe_dump(cfg.to_dict(), sort_keys=False))
    diff = sorted(k for k in set(old) | set(new)
                  if k not in RESUME_MAY_CHANGE and old.get(k) != new.get(k))
    if diff:
        raise RunExists(f"{path.parent} was started with another config (differs in: "
                        f"{', '.join(diff)}); resume it with the same config")


def _truncate(path: Path, n_bytes: int) -> None:
    if path.exists() and path.stat().st_size > n_bytes:
        with path.open("r+b") as f:
            f.truncate(n_bytes)
