"""`hf:PATH` — sample from a local transformers checkpoint, on CPU or GPU, in batches.

Covers: loading a causal LM and its tokenizer from a directory, rendering chats with the
tokenizer's chat template (a plain `role:` join when it has none), left-padded batched sampling
with `num_return_sequences`, seeding, and decoding only the new tokens. Not covered: serving,
tensor parallelism or speculative decoding (use `vllm:` or an OpenAI-compatible server for
throughput).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelzero.models.base import (BackendError, Prompt, SamplingConfig, chat_messages,
                                    check_request, plain_chat_text)


@dataclass
class HFConfig:
    """How the checkpoint is loaded and batched.

    device: `auto` (CUDA when available, else CPU), `cpu`, `cuda` or `cuda:N`.
    dtype: `auto` (bf16 on CUDA, fp32 on CPU), `float32`, `bfloat16` or `float16`.
    max_batch_rows: most sequences (prompts x n) decoded at once; prompts are split to fit.
    fast: sample with kernelzero.models.fastgen (static KV cache; a CUDA graph per decode step on
        a GPU) when the model's architecture is one it reimplements (Qwen2, Llama); otherwise,
        and with False, transformers' `generate`.
    """

    device: str = "auto"
    dtype: str = "auto"
    max_batch_rows: int = 32
    fast: bool = True
    fast_batch_rows: int = 256

    def __post_init__(self) -> None:
        if self.device not in ("auto", "cpu", "cuda") and not self.device.startswith("cuda:"):
            raise ValueError(f"HFConfig.device={self.device!r}: use auto, cpu, cuda or cuda:N")
        if self.dtype not in ("auto", "float32", "bfloat16", "float16"):
            raise ValueError(f"HFConfig.dtype={self.dtype!r}: use auto, float32, bfloat16 "
                             "or float16")
        if self.max_batch_rows < 1:
            raise ValueError("HFConfig.max_batch_rows must be >= 1")


class HFBackend:
    def __init__(self, path: str | Path, config: HFConfig | None = None) -> None:
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.config = config or HFConfig()
        self.spec = f"hf:{path}"
        path = Path(path)
        if not path.is_dir():
            raise BackendError(f"hf: no checkpoint directory at {path}")
        device = self.config.device
        if device == "auto":
            device = "cuda" if torch.cuda.is_available() else "cpu"
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise BackendError("hf: device cuda was asked for but torch sees no CUDA GPU")
        dtype = self.config.dtype
        if dtype == "auto":
            dtype = "bfloat16" if device.startswith("cuda") else "float32"
        self.device = device
        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.tokenizer.padding_side = "left"
        if self.tokenizer.pad_token_id is None:
            self.tokenizer.pad_token = self.tokenizer.eos_token
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=getattr(torch, dtype))
        self.model.to(device).eval()
        self._fast = None  # FastGenerator, built at the first call that needs one

    def _fast_generator(self, rows: int, length: int):
        """The static-cache sampler, rebuilt only when a call needs more rows or positions."""
        from kernelzero.models.fastgen import FastGenConfig, FastGenerator, supports

        if not (self.config.fast and supports(self.model)):
            return None
        g = self._fast
        if g is None or g.config.max_batch < rows or g.config.max_len < length:
            cfg = FastGenConfig(max_batch=max(rows, g.config.max_batch if g else 0),
                                max_len=max(length, g.config.max_len if g else 0))
            self._fast = g = FastGenerator(self.model, cfg, device=self.device)
        return g

    def render(self, prompt: Prompt) -> str:
        """The text the model is conditioned on for one chat."""
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(
                chat_messages(prompt), add_generation_prompt=True, tokenize=False)
        return plain_chat_text(prompt)

    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingConfig) -> list[list[str]]:
        check_request(prompts, n)
        from kernelzero.models.fastgen import supports

        rows = self.config.max_batch_rows
        if self.config.fast and supports(self.model):
            rows = max(rows, self.config.fast_batch_rows)
        per_batch = max(1, rows // n)
        out: list[list[str]] = []
        for b, start in enumerate(range(0, len(prompts), per_batch)):
            batch = prompts[start:start + per_batch]
            seed = None if sampling.seed is None else sampling.seed + b
            out.extend(self._generate_batch([self.render(p) for p in batch], n, sampling, seed))
        return out

    def _generate_batch(self, texts: list[str], n: int, sampling: SamplingConfig,
                        seed: int | None) -> list[list[str]]:
        import torch

        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
        greedy = sampling.temperature == 0
        rows = len(texts) * (1 if greedy else n)
        fast = self._fast_generator(rows, max(map(len, ids)) + sampling.max_new_tokens)
        if fast is not None:
            eos = self.tokenizer.eos_token_id
            outs = fast.generate([x for x in ids for _ in range(1 if greedy else n)],
                                 sampling.max_new_tokens, temperature=sampling.temperature,
                                 top_p=sampling.top_p, eos_token_ids=[eos],
                                 pad_token_id=self.tokenizer.pad_token_id, seed=seed)
            decoded = self.tokenizer.batch_decode(outs, skip_special_tokens=True)
            if greedy:
                decoded = [d for d in decoded for _ in range(n)]
            return [decoded[i * n:(i + 1) * n] for i in range(len(texts))]
        enc = self.tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        enc = {k: v.to(self.device) for k, v in enc.items()}
        greedy = sampling.temperature == 0
        kw = dict(max_new_tokens=sampling.max_new_tokens, pad_token_id=self.tokenizer.pad_token_id)
        if greedy:  # every sample would be the same: decode once, repeat
            kw.update(do_sample=False, temperature=None, top_p=None, top_k=None)
        else:
            kw.update(do_sample=True, temperature=sampling.temperature, top_p=sampling.top_p,
                      num_return_sequences=n)
        devices = [torch.device(self.device)] if self.device.startswith("cuda") else []
        with torch.random.fork_rng(devices=devices), torch.inference_mode():
            if seed is not None:
                torch.manual_seed(seed)
            ids = self.model.generate(**enc, **kw)
        new = ids[:, enc["input_ids"].shape[1]:]
        texts_out = self.tokenizer.batch_decode(new, skip_special_tokens=True)
        if greedy:
            texts_out = [t for t in texts_out for _ in range(n)]
        return [texts_out[i * n:(i + 1) * n] for i in range(len(texts))]
