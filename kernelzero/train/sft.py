"""Supervised fine-tuning on distilled kernels: TRL's SFTTrainer, loss on the completion only,
LoRA optional.

Covers: `SFTRunConfig` and `run_sft(model, data, out)`, which reads the JSONL written by
distill.py (conversational prompt-completion rows; provenance columns are dropped before
training), trains, and saves the model (or the LoRA adapter) and tokenizer to `out`.
Does not cover making the data (distill.py) or multi-GPU launch (docs/training.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass
class SFTRunConfig:
    """epochs: passes over the data (ignored when max_steps > 0).
    max_steps: stop after this many optimizer steps (0: run the epochs).
    learning_rate / batch_size / grad_accum: AdamW and batching per device.
    max_length: longest tokenised prompt + completion kept (longer rows are truncated).
    lora: train a LoRA adapter instead of all weights; lora_r / lora_alpha its rank and scale.
    bf16: train in bfloat16 (GPU).
    seed: data order and initialisation.
    """

    epochs: float = 2.0
    max_steps: int = 0
    learning_rate: float = 1e-5
    batch_size: int = 4
    grad_accum: int = 1
    max_length: int = 8192
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    bf16: bool = False
    seed: int = 0

    def __post_init__(self) -> None:
        if self.learning_rate <= 0 or self.batch_size < 1 or self.grad_accum < 1:
            raise ValueError("learning_rate must be > 0, batch_size and grad_accum >= 1")
        if self.max_steps < 0 or (self.max_steps == 0 and self.epochs <= 0):
            raise ValueError("give epochs > 0 or max_steps > 0")
        if self.lora and self.lora_r < 1:
            raise ValueError("lora_r must be >= 1")


def load_rows(data: str | Path) -> list[dict]:
    import json

    rows = []
    for i, line in enumerate(Path(data).read_text(encoding="utf-8").splitlines(), 1):
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


def build_sft_trainer(model: str, data: str | Path, out: str | Path, cfg: SFTRunConfig, callbacks=None):
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import SFTConfig, SFTTrainer

    args = SFTConfig(
        output_dir=str(out), num_train_epochs=cfg.epochs, max_steps=cfg.max_steps or -1,
        learning_rate=cfg.learning_rate, per_device_train_batch_size=cfg.batch_size,
        gradient_accumulation_steps=cfg.grad_accum, max_length=cfg.max_length,
        completion_only_loss=True, bf16=cfg.bf16, seed=cfg.seed, logging_steps=1,
        save_strategy="no", report_to=[], use_cpu=not torch.cuda.is_available(), disable_tqdm=True)
    peft_config = None
    if cfg.lora:
        from peft import LoraConfig
        peft_config = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, target_modules="all-linear",
                                 task_type="CAUSAL_LM")
    return SFTTrainer(model=AutoModelForCausalLM.from_pretrained(model), args=args,
                      train_dataset=Dataset.from_list(load_rows(data)),
                      processing_class=AutoTokenizer.from_pretrained(model), peft_config=peft_config,
                      callbacks=callbacks)


def run_sft(model: str, data: str | Path, out: str | Path, cfg: SFTRunConfig) -> dict:
    trainer = build_sft_trainer(model, data, out, cfg)
    result = trainer.train()
    trainer.save_model(str(out))
    trainer.processing_class.save_pretrained(str(out))
    return {"out": str(out), "steps": trainer.state.global_step, "train_loss": result.training_loss,
            "rows": len(trainer.train_dataset), "lora": cfg.lora}
