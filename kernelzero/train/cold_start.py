"""The cold start: a Coder made from zero by distilling the teacher compiler and fine-tuning.

    figures = run_cold_start(ColdStartConfig(...), out_dir, evaluator)

Steps, each resumable (a step whose output exists is not done again):
1. compose `modules` training modules of the op family (kernelzero.family.holdout's train role:
   no held-out op combination, pair or text ever trains);
2. distill: the teacher compiles each module, the evaluator judges every kernel, verified pairs
   become rows in the compact prompt's format (`data.jsonl`; the verdicts are cached beside it,
   so a killed distillation judges nothing twice);
3. a tokenizer trained on those rows and a random model of the preset (`model-init/`);
4. supervised fine-tuning through TRL (`model/`), with a share of the rows held out for the loss.

`data` points at rows made earlier (the same format): steps 1-2 are then skipped. Distillation
is judged by the evaluator it is given; on a GPU machine a CPU evaluator (the Triton interpreter,
many workers) verifies the small training modules faster than compiling each kernel.

Does not cover: the held-out evaluation (round_report.py) or the loop around it (loop.py).
"""
from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelzero.train.sft import SFTRunConfig


# Training from zero: a large learning rate with warm-up and cosine decay, a little held out.
DEFAULT_SFT = {"epochs": 3.0, "learning_rate": 2e-3, "lr_scheduler": "cosine", "warmup_ratio": 0.03,
               "weight_decay": 0.01, "batch_size": 32, "max_length": 2048, "eval_fraction": 0.01,
               "log_every": 50}


@dataclass
class ColdStartConfig:
    """How a Coder is made from zero (the loop runs it when coder_model is `scratch`).

    preset: model size, a name in kernelzero.models.scratch.PRESETS (`cpu`, `gpu`, `large`).
    modules: training modules composed and distilled.
    family: FamilyConfig fields for the training modules (kinds, min_ops, max_ops, target, ...).
    data: distilled rows to train on instead of composing and judging (a JSONL that
        `kernelzero distill` or an earlier cold start wrote); None makes them.
    tokenizer_rows: rows the tokenizer is trained on (a prefix of the data).
    seed: the modules' stream, the model's initialisation and the SFT order.
    sft: SFTRunConfig fields (learning rate, steps, batch size, bf16, ...), over DEFAULT_SFT.
    curve_every: every this many SFT steps, measure greedy pass@1 on `curve_tasks` in-family
        held-out modules (a learning curve in the figures); 0 for none.
    curve_tasks: held-out modules of the learning curve.
    time_budget_s: train for this many seconds, the learning rate's warm-up and decay spread over
        them (time_schedule.py), as many steps as this machine makes; None trains `sft`'s epochs
        or steps.
    """

    preset: str = "cpu"
    modules: int = 20000
    family: dict = field(default_factory=dict)
    data: str | None = None
    tokenizer_rows: int = 4000
    seed: int = 0
    sft: dict = field(default_factory=dict)
    curve_every: int = 0
    curve_tasks: int = 100
    time_budget_s: float | None = None

    def __post_init__(self) -> None:
        from kernelzero.family import FamilyConfig
        from kernelzero.models.scratch import get_preset

        get_preset(self.preset)
        if self.modules < 1 or self.tokenizer_rows < 1:
            raise ValueError("cold_start.modules and cold_start.tokenizer_rows must be >= 1")
        try:
            FamilyConfig(**self.family)
        except TypeError as e:
            raise ValueError(f"cold_start.family: {e}") from None
        try:
            self.sft_config()
        except TypeError as e:
            raise ValueError(f"cold_start.sft: {e}") from None

    def sft_config(self) -> SFTRunConfig:
        """DEFAULT_SFT with this section's `sft` over it; bf16 unless set: on when CUDA is there."""
        import torch

        bf16 = {"bf16": torch.cuda.is_available()} if "bf16" not in self.sft else {}
        return SFTRunConfig(**{"seed": self.seed, **DEFAULT_SFT, **bf16, **self.sft})


def training_tasks(cfg: ColdStartConfig) -> list:
    from kernelzero.family import FamilyConfig
    from kernelzero.family.holdout import training_modules
    from kernelzero.tasks import Task

    modules = training_modules(cfg.modules, seed=cfg.seed, config=FamilyConfig(**cfg.family))
    return [Task(source=m.source, name=f"{i}_{m.name}", meta=m.meta) for i, m in enumerate(modules)]


def make_data(cfg: ColdStartConfig, out_dir: Path, evaluator, log=print,
              time_limit_s: float | None = None) -> dict:
    """Compose and distill (steps 1-2); returns distill's counts plus the wall time. With a time
    limit, judging stops after it and the rows judged so far are written (a re-run resumes)."""
    from kernelzero.train.distill import DistillConfig, distill

    t0 = time.perf_counter()
    tasks = training_tasks(cfg)
    log(f"cold start: {len(tasks)} family modules composed; the teacher compiles them and the "
        "evaluator judges every kernel")
    counts = distill(DistillConfig(teacher="compiler", k=1, prompt_style="compact", seed=cfg.seed,
                                   time_limit_s=time_limit_s),
                     tasks, evaluator, out_dir / "data.jsonl", progress=True)
    counts["wall_s"] = time.perf_counter() - t0
    return counts


def corpus(rows: list[dict]) -> list[str]:
    """The text a tokenizer learns from: every prompt and completion message of the rows."""
    return [m["content"] for r in rows for m in (*r["prompt"], *r["completion"])]


def run_cold_start(cfg: ColdStartConfig, out_dir: str | Path, evaluator, log=print,
                   curve_config: dict | None = None, prompt_style: str = "compact") -> dict:
    """Steps 1-4 into `out_dir`; returns the figures (also in `out_dir/cold_start.json`).

    curve_config: {"prompt": PromptConfig, "max_new_tokens": int, "target": "cpu"|"gpu"} for the
    learning curve (with cfg.curve_every > 0). prompt_style: the prompt the rows use, recorded in
    the model's kernelzero_model.json so that `generate` and `bench` prompt it the same way."""
    from kernelzero.models.scratch import build_from_corpus, is_complete
    from kernelzero.train.sft import load_rows, run_sft

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    done = out / "cold_start.json"
    if done.exists():
        return json.loads(done.read_text())
    figures: dict = {"config": asdict(cfg)}
    data = Path(cfg.data) if cfg.data else out / "data.jsonl"
    if cfg.data is None and not data.exists():
        figures["distill"] = make_data(cfg, out, evaluator, log)
        d = figures["distill"]
        log(f"cold start: {d['kept']} verified rows from {d['judged']} teacher kernels "
            f"({d['skipped']} modules the teacher refused) in {d['wall_s']:.0f} s")
    if not data.is_file():
        raise FileNotFoundError(f"cold_start.data={cfg.data}: no such file (distilled rows, as "
                                "`kernelzero distill` writes them)")
    rows = load_rows(data)
    figures["data"] = {"path": str(data), "rows": len(rows)}
    init = out / "model-init"
    if not is_complete(init):
        build_from_corpus(init, corpus(rows[:cfg.tokenizer_rows]), cfg.preset, seed=cfg.seed,
                          info={"tokenizer_rows": min(len(rows), cfg.tokenizer_rows)})
    figures["parameters"] = json.loads((init / "kernelzero_model.json").read_text())["parameters"]
    log(f"cold start: SFT of a {figures['parameters'] / 1e6:.1f}M-parameter `{cfg.preset}` model "
        f"on {len(rows)} rows")
    sft_cfg = cfg.sft_config()
    if cfg.time_budget_s:
        sft_cfg = within_budget(sft_cfg, cfg.time_budget_s)
        log(f"cold start: SFT for {cfg.time_budget_s:.0f} s, the learning rate decaying over that time")
    callbacks, curve = [], None
    if cfg.curve_every and curve_config:
        curve = _curve(cfg, init, evaluator, curve_config, out, log)
        callbacks.append(curve.callback)
    figures["sft"] = run_sft(str(init), rows, out / "model", sft_cfg, log=log, callbacks=callbacks)
    if curve is not None:
        figures["curve"] = curve.points
    s = figures["sft"]
    log(f"cold start: {s['steps']} steps in {s['wall_s']:.0f} s, train loss {s['train_loss']:.3f}"
        + (f", held-out loss {s['eval_loss_before']:.3f} -> {s['eval_loss_after']:.3f}"
           if s["eval_loss_after"] is not None else ""))
    figures["model"] = str(out / "model")
    _record(out / "model", init, prompt_style=prompt_style, made_by="cold start (kernelzero.train.cold_start)")
    done.write_text(json.dumps(figures, indent=1) + "\n")
    return figures


def _curve(cfg: ColdStartConfig, init: Path, evaluator, curve_config: dict, out: Path, log):
    from transformers import AutoTokenizer

    from kernelzero.family import FamilyConfig
    from kernelzero.family.holdout import heldout_modules
    from kernelzero.tasks import Task
    from kernelzero.train.curve import PassAtOneCurve
    from kernelzero.train.judging import Judge, VerdictCache

    fam = FamilyConfig(**{**cfg.family, "target": curve_config.get("target", "cpu")})
    tasks = [Task(source=m.source, name=f"curve_{i}_{m.name}", meta=m.meta)
             for i, m in enumerate(heldout_modules(cfg.curve_tasks, seed=7, config=fam))]
    judge = Judge(evaluator, VerdictCache(out / "curve.verdicts.jsonl"))
    return PassAtOneCurve(tasks, judge, AutoTokenizer.from_pretrained(init), curve_config["prompt"],
                          every=cfg.curve_every, max_new_tokens=curve_config.get("max_new_tokens", 1024),
                          log=log, label="in-family held-out")


STEP_CAP = 1_000_000  # a budgeted SFT ends by its time, never by this


def within_budget(sft: SFTRunConfig, budget_s: float) -> SFTRunConfig:
    """The SFT config that trains for `budget_s` seconds, its learning-rate warm-up and decay
    spread over that time (sft.py's schedule_by_time), whatever this machine's steps per second."""
    import dataclasses
    return dataclasses.replace(sft, max_steps=STEP_CAP, time_limit_s=budget_s, schedule_by_time=True)


def _record(model_dir: Path, init: Path, **info) -> None:
    """kernelzero_model.json in a trained model's folder: how it was made, which prompt it reads."""
    meta = json.loads((init / "kernelzero_model.json").read_text())
    (Path(model_dir) / "kernelzero_model.json").write_text(json.dumps({**meta, **info}, indent=1) + "\n")
