"""`vllm:PATH` — sample with vLLM's offline engine (an optional extra).

Covers: building `vllm.LLM` for a local checkpoint and sampling n completions per chat with
`LLM.chat` (the model's own chat template). vLLM is imported only when this backend is built;
without it the error says how to install it. Not covered: running a server (start `vllm serve`
and use `openai:URL#MODEL` for that).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kernelzero.models.base import (BackendError, Prompt, SamplingConfig, chat_messages,
                                    check_request)

INSTALL_HINT = ("the vllm: backend needs vLLM, which is not installed here: "
                "`pip install kernelzero[vllm]` (or `pip install vllm`), or serve the model "
                "elsewhere and use openai:URL#MODEL")


@dataclass
class VLLMConfig:
    """How the engine is built.

    tensor_parallel_size: GPUs one model is split over.
    gpu_memory_utilization: share of each GPU's memory vLLM may take.
    max_model_len: context length (None: the model's own).
    dtype: `auto`, `bfloat16`, `float16` or `float32`.
    """

    tensor_parallel_size: int = 1
    gpu_memory_utilization: float = 0.85
    max_model_len: int | None = None
    dtype: str = "auto"

    def __post_init__(self) -> None:
        if self.tensor_parallel_size < 1:
            raise ValueError("VLLMConfig.tensor_parallel_size must be >= 1")
        if not 0 < self.gpu_memory_utilization <= 1:
            raise ValueError("VLLMConfig.gpu_memory_utilization must be in (0, 1]")
        if self.dtype not in ("auto", "bfloat16", "float16", "float32"):
            raise ValueError(f"VLLMConfig.dtype={self.dtype!r}: use auto, bfloat16, float16 "
                             "or float32")


def import_vllm():
    try:
        import vllm
    except ImportError as e:
        raise BackendError(f"{INSTALL_HINT} ({e})") from None
    return vllm


class VLLMBackend:
    def __init__(self, path: str | Path, config: VLLMConfig | None = None) -> None:
        vllm = import_vllm()
        self.config = config or VLLMConfig()
        self.spec = f"vllm:{path}"
        self._vllm = vllm
        kw = dict(model=str(path), tensor_parallel_size=self.config.tensor_parallel_size,
                  gpu_memory_utilization=self.config.gpu_memory_utilization,
                  dtype=self.config.dtype)
        if self.config.max_model_len:
            kw["max_model_len"] = self.config.max_model_len
        self.llm = vllm.LLM(**kw)

    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingConfig) -> list[list[str]]:
        check_request(prompts, n)
        params = self._vllm.SamplingParams(
            n=n, temperature=sampling.temperature, top_p=sampling.top_p,
            max_tokens=sampling.max_new_tokens, seed=sampling.seed)
        results = self.llm.chat([chat_messages(p) for p in prompts], params, use_tqdm=False)
        return [[o.text for o in r.outputs] for r in results]
