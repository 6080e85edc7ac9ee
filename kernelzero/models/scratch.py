"""A causal language model from zero: a tokenizer trained on the project's own text and a Qwen2
model built from a preset, saved with `save_pretrained` so every engine (TRL, `hf:`) loads it.

No pretrained model can be downloaded where KernelZero is developed, so its Coder and Proposer
start here, the way nanoGPT starts: a byte-level BPE tokenizer (digits split one per token, so a
constant in a prompt is copied digit by digit rather than as one of a few memorised numbers) and a
randomly initialised model whose size is a named preset.

Presets (parameters counted with the default vocabulary):
    cpu   ~2.9M  d=192, 6 layers   trains on 2 CPU cores; the size that ships with the package
    gpu   ~26M   d=512, 8 layers   one H200 trains it from zero in minutes
    large ~90M   d=768, 12 layers  the top of what one H200 trains in ~10 minutes

Not covered: training (kernelzero.train.sft), the tiny random models tests use
(kernelzero.models.tiny builds those with this module's functions).
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Iterable

SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]

# ChatML, as Qwen models use it. The generation prompt opens an assistant turn.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
MARKER = "kernelzero_model.json"  # written last: its presence means the directory is complete


@dataclass(frozen=True)
class ModelPreset:
    """The shape of a from-scratch model.

    hidden / layers / heads / kv_heads / intermediate: the transformer's width, depth, attention
        heads, key-value heads (grouped-query attention) and MLP width.
    vocab_size: BPE vocabulary (the embedding is rounded up to a multiple of 64).
    max_positions: longest prompt + completion, in tokens.
    """

    hidden: int
    layers: int
    heads: int
    kv_heads: int
    intermediate: int
    vocab_size: int = 2048
    max_positions: int = 2048

    def __post_init__(self) -> None:
        if self.hidden % self.heads or self.heads % self.kv_heads:
            raise ValueError(f"{self}: hidden must divide by heads, heads by kv_heads")
        if (self.hidden // self.heads) % 2:
            raise ValueError(f"{self}: the head size must be even (rotary embedding)")
        if self.vocab_size < 256 + len(SPECIAL_TOKENS):
            raise ValueError(f"vocab_size={self.vocab_size}: at least {256 + len(SPECIAL_TOKENS)}")


PRESETS = {
    "cpu": ModelPreset(hidden=192, layers=6, heads=6, kv_heads=2, intermediate=512),
    "gpu": ModelPreset(hidden=512, layers=8, heads=8, kv_heads=4, intermediate=1408, vocab_size=4096),
    "large": ModelPreset(hidden=768, layers=12, heads=12, kv_heads=4, intermediate=2048, vocab_size=4096),
}


def get_preset(name: str) -> ModelPreset:
    if name not in PRESETS:
        raise ValueError(f"unknown model preset {name!r}; choose one of {', '.join(PRESETS)}")
    return PRESETS[name]


def train_tokenizer(texts: Iterable[str], vocab_size: int = 2048):
    """A byte-level BPE `PreTrainedTokenizerFast` trained on `texts`, with the ChatML template.

    Digits are split one per token before BPE (as Llama and Qwen do), so numbers never merge."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, special_tokens=SPECIAL_TOKENS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(texts, trainer=trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|im_end|>", pad_token="<|endoftext|>",
        bos_token=None, unk_token=None, additional_special_tokens=["<|im_start|>"],
        padding_side="left")
    fast.chat_template = CHAT_TEMPLATE
    return fast


def build_model(out_dir: str | Path, tokenizer, preset: ModelPreset, seed: int = 0,
                info: dict | None = None) -> Path:
    """Save `tokenizer` and a randomly initialised Qwen2 model of `preset` to `out_dir`.

    Deterministic: the same tokenizer, preset and seed give byte-identical weights. `info` is
    recorded in the directory's kernelzero_model.json (how the model was made)."""
    import torch
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).unlink(missing_ok=True)
    tokenizer.save_pretrained(out)
    p = preset
    config = Qwen2Config(
        vocab_size=-(-len(tokenizer) // 64) * 64, hidden_size=p.hidden,
        intermediate_size=p.intermediate, num_hidden_layers=p.layers,
        num_attention_heads=p.heads, num_key_value_heads=p.kv_heads,
        max_position_embeddings=p.max_positions, tie_word_embeddings=True,
        bos_token_id=tokenizer.pad_token_id, eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id)
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    model.save_pretrained(out)
    meta = {"preset": asdict(preset), "seed": seed,
            "parameters": sum(q.numel() for q in model.parameters()), **(info or {})}
    (out / MARKER).write_text(json.dumps(meta, indent=1) + "\n")
    return out


def build_from_corpus(out_dir: str | Path, texts: Iterable[str], preset: str | ModelPreset = "cpu",
                      seed: int = 0, info: dict | None = None) -> Path:
    """Train a tokenizer on `texts`, then build a random model of `preset` beside it."""
    p = get_preset(preset) if isinstance(preset, str) else preset
    tok = train_tokenizer(texts, p.vocab_size)
    return build_model(out_dir, tok, p, seed=seed, info=info)


def is_complete(model_dir: str | Path) -> bool:
    """True when `model_dir` holds a model this module (or a later save) finished writing."""
    d = Path(model_dir)
    return (d / MARKER).exists() or (d / "config.json").exists() and any(d.glob("*.safetensors"))
