"""Supervised fine-tuning on distilled kernels: TRL's SFTTrainer, loss on the completion only,
LoRA optional.

Covers: `SFTRunConfig` and `run_sft(model, data, out)`, which reads the JSONL written by
distill.py (conversational prompt-completion rows; provenance columns are dropped before
training), optionally holds a share of the rows out to measure the loss on rows the model never
trained on, trains, and saves the model (or the LoRA adapter) and tokenizer to `out`. The loss
curve (every logged step) comes back in the result, and a progress line is printed every
`log_every` steps. The same settings serve a 7B model's fine-tuning (small learning rate, few
steps) and a from-scratch model's whole training (large learning rate, warm-up, cosine decay).

Does not cover making the data (distill.py), building a model from zero
(kernelzero.models.scratch) or multi-GPU launch (docs/training.md).
"""
from __future__ import annotations

import contextlib
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path

SCHEDULERS = ("constant", "linear", "cosine")


@dataclass
class SFTRunConfig:
    """epochs: passes over the data (ignored when max_steps > 0).
    max_steps: stop after this many optimizer steps (0: run the epochs).
    learning_rate / batch_size / grad_accum: AdamW and batching per device.
    lr_scheduler: `constant`, `linear` or `cosine` decay after the warm-up.
    warmup_ratio: share of the steps over which the learning rate rises from 0.
    weight_decay: AdamW's decoupled weight decay.
    max_length: longest tokenised prompt + completion kept (longer rows are truncated).
    eval_fraction: share of the rows held out (never trained on) to report `eval_loss` before
        and after training; 0 holds none out.
    lora: train a LoRA adapter instead of all weights; lora_r / lora_alpha its rank and scale.
    bf16: train in bfloat16 (GPU).
    gradient_checkpointing: recompute activations in the backward pass (TRL's default is on):
        memory for time, worth it for large models only; off it trains a 2.6M-parameter model
        about twice as fast.
    seed: data order, the held-out split and initialisation.
    log_every: optimizer steps between progress lines (0: none).
    copy_weight: how many times a token of a constant the completion copies from its prompt
        counts in the loss (kernelzero.train.copy_loss; 1: the plain completion-only loss). The
        held-out `eval_loss` is then weighted the same way.
    time_limit_s: stop after the optimizer step that ends this many seconds of training (0: no
        limit), and save the model trained so far as at any end. Unless schedule_by_time, the
        learning-rate schedule stays the one planned for max_steps / epochs, cut where it stopped:
        a run on a machine lent for minutes keeps its steps instead of losing them all to the wall
        clock.
    length_batches: batch rows of similar length together, the batches in random order
        (length_batches.py): less padding, so more rows a second, but each step teaches less
        (bench/length_batches_ab.py: at equal steps, held-out loss 0.62 against 0.23); off unless
        a run is bound by padding more than by steps.
    schedule_by_time: with time_limit_s, the warm-up and decay run over the time instead of the
        planned steps (time_schedule.py): the learning rate reaches 0 when time_limit_s is spent,
        at whatever step that is, and max_steps (or the epochs) only caps the steps.
    logging_steps: optimizer steps between the loss records of `loss_curve`. Each record waits
        for the device to finish its step; the 24M `gpu` preset on an H100 made 1.53x the steps a
        second at 50 (bench/sft_throughput.py). Progress lines (log_every) come at the steps that
        are multiples of both.
    compile: compile each transformer layer in place with `torch.compile` (dynamic shapes)
        before training (`compile_layers`: one layer's graph, reused by all; the loss head
        eager). The compilation counts in time_limit_s. The 24M `gpu` preset on an H100: 10.5
        steps/s over 400 steps, 26 s to the 10th, against 6.8 eager (perf.md). Compiling the
        whole model instead made only 893 steps against eager's 1,478 in a whole 390 s run
        (compiling and recompiling took ~250 s). No faster on the CPU, which computes, not launches.
    """

    epochs: float = 2.0
    max_steps: int = 0
    learning_rate: float = 1e-5
    lr_scheduler: str = "linear"
    warmup_ratio: float = 0.0
    weight_decay: float = 0.0
    batch_size: int = 4
    grad_accum: int = 1
    max_length: int = 8192
    eval_fraction: float = 0.0
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    bf16: bool = False
    gradient_checkpointing: bool = False
    seed: int = 0
    log_every: int = 0
    copy_weight: float = 1.0
    time_limit_s: float = 0.0
    schedule_by_time: bool = False
    length_batches: bool = False
    logging_steps: int = 1
    compile: bool = False

    def __post_init__(self) -> None:
        if self.time_limit_s < 0:
            raise ValueError("time_limit_s must be >= 0 (0: no limit)")
        if self.schedule_by_time and not self.time_limit_s:
            raise ValueError("schedule_by_time needs time_limit_s > 0 (the time the schedule spans)")
        if self.learning_rate <= 0 or self.batch_size < 1 or self.grad_accum < 1:
            raise ValueError("learning_rate must be > 0, batch_size and grad_accum >= 1")
        if self.max_steps < 0 or (self.max_steps == 0 and self.epochs <= 0):
            raise ValueError("give epochs > 0 or max_steps > 0")
        if self.lora and self.lora_r < 1:
            raise ValueError("lora_r must be >= 1")
        if self.lr_scheduler not in SCHEDULERS:
            raise ValueError(f"lr_scheduler={self.lr_scheduler!r}: choose one of {', '.join(SCHEDULERS)}")
        if not 0 <= self.warmup_ratio < 1 or not 0 <= self.eval_fraction < 1:
            raise ValueError("warmup_ratio and eval_fraction must lie in [0, 1)")
        if self.weight_decay < 0 or self.log_every < 0:
            raise ValueError("weight_decay and log_every must be >= 0")
        if self.logging_steps < 1:
            raise ValueError("logging_steps must be >= 1")
        if self.copy_weight <= 0:
            raise ValueError(f"copy_weight must be > 0 (1: the plain loss), got {self.copy_weight}")


def load_rows(data: str | Path) -> list[dict]:
    """Conversational rows from a JSONL file, gzipped or not (`.gz`: data/family-train.jsonl.gz)."""
    import gzip
    import json

    raw = Path(data).read_bytes()
    text = (gzip.decompress(raw) if str(data).endswith(".gz") else raw).decode("utf-8")
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        d = json.loads(line)
        if not isinstance(d.get("prompt"), list) or not isinstance(d.get("completion"), list):
            raise ValueError(f"{data}:{i}: expected conversational `prompt` and `completion` lists "
                             "(the format `kernelzero distill` writes)")
        rows.append({"prompt": d["prompt"], "completion": d["completion"]})
    if not rows:
        raise ValueError(f"{data} holds no rows")
    return rows


def split_rows(rows: list[dict], fraction: float, seed: int) -> tuple[list[dict], list[dict]]:
    """(train, held out): a seeded share of the rows, at least one each way when fraction > 0."""
    if fraction <= 0 or len(rows) < 2:
        return rows, []
    order = list(range(len(rows)))
    random.Random(seed).shuffle(order)
    n_eval = min(len(rows) - 1, max(1, int(round(fraction * len(rows)))))
    held = set(order[:n_eval])
    return [r for i, r in enumerate(rows) if i not in held], [rows[i] for i in sorted(held)]


class ProgressPrinter:
    """A TrainerCallback that prints one line every `every` steps: step, loss, tokens/s."""

    def __init__(self, every: int, total: int, log=print):
        from transformers import TrainerCallback

        self.every, self.total, self.log = every, total, log
        self.t0 = time.perf_counter()
        self.callback = type("Progress", (TrainerCallback,), {"on_log": self._on_log})()

    def _on_log(self, args, state, control, logs=None, **kw):
        if not logs or "loss" not in logs or state.global_step % self.every:
            return
        dt = time.perf_counter() - self.t0
        tokens = float(logs.get("num_tokens", 0) or 0)
        rate = f", {tokens / dt:,.0f} tok/s" if tokens and dt > 0 else ""
        self.log(f"  sft step {state.global_step}/{self.total}: loss {float(logs['loss']):.4f}{rate}")


def time_limit_callback(limit_s: float):
    """A TrainerCallback that ends training at the first step end past `limit_s` seconds of it."""
    from transformers import TrainerCallback

    class TimeLimit(TrainerCallback):
        def on_train_begin(self, args, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            if time.perf_counter() - self.t0 >= limit_s:
                control.should_training_stop = True

    return TimeLimit()


def _tokenizer_procs(rows: int) -> int | None:
    """Processes that tokenize the rows: half the cores for large sets (tens of seconds in one
    process for 20K rows), none for small ones (starting processes costs more)."""
    import os

    cores = os.cpu_count() or 1
    return min(8, cores // 2) if rows >= 5000 and cores >= 4 else None


def checkpointing(config_cls, on: bool) -> dict:
    """The activation-checkpointing switch under the name this transformers reads: newer releases
    call it `activation_checkpointing` and warn on the old `gradient_checkpointing`."""
    import dataclasses
    names = {f.name for f in dataclasses.fields(config_cls)}
    return {"activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing": on}


def build_sft_trainer(model: str, data: str | Path | list[dict], out: str | Path, cfg: SFTRunConfig,
                      callbacks=None, log=print):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    rows = load_rows(data) if not isinstance(data, list) else data
    train, held = split_rows(rows, cfg.eval_fraction, cfg.seed)
    cuda = torch.cuda.is_available()
    steps_per_epoch = math.ceil(len(train) / (cfg.batch_size * cfg.grad_accum))
    total = cfg.max_steps or max(1, math.ceil(cfg.epochs * steps_per_epoch))
    args = SFTConfig(
        output_dir=str(out), num_train_epochs=cfg.epochs, max_steps=cfg.max_steps or -1,
        learning_rate=cfg.learning_rate, lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=int(cfg.warmup_ratio * total), weight_decay=cfg.weight_decay,
        per_device_train_batch_size=cfg.batch_size, per_device_eval_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum, max_length=cfg.max_length,
        completion_only_loss=True, bf16=cfg.bf16, **checkpointing(SFTConfig, cfg.gradient_checkpointing),
        seed=cfg.seed, data_seed=cfg.seed, logging_steps=cfg.logging_steps,
        save_strategy="no", report_to=[], use_cpu=not cuda, disable_tqdm=True,
        logging_nan_inf_filter=False,  # a read from the device every step (sync_free.py)
        # Batches copied to the card from pinned memory without the host waiting for the copy:
        # a plain copy waits for every queued kernel first, so the card idled while the host
        # collated and launched the next step (cudaStreamSynchronize, 47 ms a step on an H100).
        dataloader_pin_memory=cuda, accelerator_config={"non_blocking": cuda},
        dataset_num_proc=_tokenizer_procs(len(rows)))
    peft_config = None
    if cfg.lora:
        from peft import LoraConfig
        peft_config = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    callbacks = list(callbacks or [])
    if cfg.log_every:
        callbacks.append(ProgressPrinter(cfg.log_every, total, log).callback)
    from kernelzero.train.sync_free import sync_free
    trainer_cls = sync_free(SFTTrainer)  # no read-back from the device between logging steps
    if cfg.copy_weight != 1.0:
        trainer_cls = _copy_weighted(trainer_cls, cfg.copy_weight)
    if cfg.length_batches:
        from kernelzero.train.length_batches import length_batched
        trainer_cls = length_batched(trainer_cls, cfg.batch_size * cfg.grad_accum, cfg.seed)
    if cfg.schedule_by_time:
        from kernelzero.train.time_schedule import TimeSchedule, time_scheduled
        schedule = TimeSchedule(cfg.time_limit_s, cfg.lr_scheduler, cfg.warmup_ratio)
        trainer_cls = time_scheduled(trainer_cls, schedule)
        callbacks.append(schedule.callback())
    if cfg.time_limit_s:
        callbacks.append(time_limit_callback(cfg.time_limit_s))
    from kernelzero.train.attention_backend import NoCudnnAttentionMixin
    trainer_cls = type(trainer_cls.__name__, (NoCudnnAttentionMixin, trainer_cls), {})
    trainer = trainer_cls(model=AutoModelForCausalLM.from_pretrained(model), args=args,
                          train_dataset=Dataset.from_list(train),
                          eval_dataset=Dataset.from_list(held) if held else None,
                          processing_class=AutoTokenizer.from_pretrained(model), peft_config=peft_config,
                          callbacks=callbacks)
    # TRL's collator pads every row on the right, and a causal model never reads a later position:
    # without the mask, attention takes its causal fast path with the same loss and gradients (the
    # shipped Coder over 16 rows of 500-1,200 tokens: 3.3 s instead of 4.4-5.6 s on the CPU).
    trainer.install_collator()
    if cfg.compile:
        compile_layers(trainer.model)
    return trainer


def compile_layers(model) -> int:
    """Compile each transformer layer of `model` in place (dynamic shapes) and return how many.

    Regional compilation: the layers share one code object, so one layer's graph is compiled and
    the others reuse it, where compiling the whole model traces every layer and the loss head
    (the 24M `gpu` preset on an H100: 26 s to the 10th step against ~130 s; bench/sft_throughput.py). TRL's loss head
    stays eager. In place: the saved weights keep their names."""
    layer_kinds = set(getattr(model, "_no_split_modules", None) or ())
    layers = [m for m in model.modules() if type(m).__name__ in layer_kinds]
    if not layers:
        raise ValueError(f"{type(model).__name__} names no transformer layer class (_no_split_modules): "
                         "nothing to compile layer by layer")
    for layer in layers:
        layer.compile(dynamic=True)
    return len(layers)


def _copy_weighted(base, weight: float):
    """`base` (sync_free's SFTTrainer) with the copy-weighted completion loss (copy_loss.py)."""
    from kernelzero.train.copy_loss import copy_weights, number_token_ids, weighted_completion_loss

    class CopyWeightedSFTTrainer(base):
        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            if not hasattr(self, "_numbers"):
                self._numbers = number_token_ids(self.processing_class)
            self.take_real_tokens(inputs)  # sync_free.py: the masks as already built
            labels = inputs["labels"]
            w = copy_weights(inputs["input_ids"], labels, self._numbers, weight)
            keep = ("input_ids", "attention_mask", "position_ids")
            out = model(**{k: v for k, v in inputs.items() if k in keep}, use_cache=False)
            loss = weighted_completion_loss(out.logits, labels, w)
            return (loss, out) if return_outputs else loss

    return CopyWeightedSFTTrainer


def run_sft(model: str, data: str | Path | list[dict], out: str | Path, cfg: SFTRunConfig,
            log=print, callbacks=None) -> dict:
    """Train, save to `out`, and return the figures: steps, rows, final and curve of the training
    loss, the held-out loss before and after (with eval_fraction > 0), wall time, tokens/s."""
    import torch

    from kernelzero.train.steplog import quiet

    trainer = build_sft_trainer(model, data, out, cfg, callbacks=callbacks, log=log)
    quiet(trainer)  # the progress lines (log_every) instead of every log dict

    def held_out_loss():
        if trainer.eval_dataset is None:
            return None
        # eagerly: a compiled model would compile its evaluation graph too, outside the time limit
        with torch.compiler.set_stance("force_eager") if cfg.compile else contextlib.nullcontext():
            return trainer.evaluate()["eval_loss"]

    before = held_out_loss()
    t0 = time.perf_counter()
    result = trainer.train()
    wall = time.perf_counter() - t0
    after = held_out_loss()
    trainer.save_model(str(out))
    trainer.processing_class.save_pretrained(str(out))
    curve = [{"step": h["step"], "loss": h["loss"], "lr": h.get("learning_rate")}
             for h in trainer.state.log_history if "loss" in h]
    tokens = max((float(h.get("num_tokens", 0) or 0) for h in trainer.state.log_history), default=0.0)
    return {"out": str(out), "steps": trainer.state.global_step, "planned_steps": trainer.state.max_steps,
            "stopped_by_time_limit": trainer.state.global_step < trainer.state.max_steps,
            "schedule_by_time": cfg.schedule_by_time,
            "train_loss": result.training_loss,
            "rows": len(trainer.train_dataset), "eval_rows": len(trainer.eval_dataset or []),
            "eval_loss_before": before, "eval_loss_after": after, "loss_curve": curve,
            "wall_s": wall, "tokens": tokens, "tokens_per_s": tokens / wall if wall > 0 else None,
            "lora": cfg.lora}
