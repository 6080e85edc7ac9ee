"""The generation interface every model backend implements, and its sampling settings.

Covers: `SamplingConfig` (the sampling knobs, validated), the `Backend` protocol, the convention
for task metadata carried inside a prompt, and `BackendError` (a model or server failed in a way
worth a clear message). Does not cover prompt wording (see `kernelzero.coder.prompts`) or how the
completions are judged.

A prompt is a chat: a list of `{"role": ..., "content": ...}` messages. The prompt builders also
put a `"meta"` dict on the last user message (task key, task hash, level, problem id, first
sample index, turn). Backends that talk to a model send only `role` and `content` (see
`chat_messages`); the replay backend uses `meta` to find the recorded completions.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, runtime_checkable

Message = dict
Prompt = list[Message]


class BackendError(RuntimeError):
    """A model backend could not produce completions (bad server answer, missing extra, ...)."""


@dataclass
class SamplingConfig:
    """How completions are sampled.

    temperature: softmax temperature; 0 means greedy decoding (every sample is the same).
    top_p: nucleus sampling mass in (0, 1]; 1 disables it.
    max_new_tokens: most tokens generated per completion.
    seed: base seed. Backends derive per-batch or per-request seeds from it, so the same call with
        the same seed gives the same completions where the engine allows; None leaves sampling
        unseeded.
    """

    temperature: float = 0.7
    top_p: float = 0.95
    max_new_tokens: int = 4096
    seed: int | None = 0

    def __post_init__(self) -> None:
        if not self.temperature >= 0:
            raise ValueError(f"SamplingConfig.temperature={self.temperature}: must be >= 0")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingConfig.top_p={self.top_p}: must be in (0, 1]")
        if int(self.max_new_tokens) != self.max_new_tokens or self.max_new_tokens < 1:
            raise ValueError(f"SamplingConfig.max_new_tokens={self.max_new_tokens}: "
                             "must be a positive integer")


@runtime_checkable
class Backend(Protocol):
    """Generates completions for chat prompts.

    `generate(prompts, n, sampling)` returns one list per prompt, in prompt order, each holding
    up to `n` completions (assistant text only, without the prompt). Model backends always return
    exactly `n`; the replay backend returns fewer when its record holds fewer.
    """

    spec: str

    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingConfig) -> list[list[str]]:
        ...


def check_request(prompts: list[Prompt], n: int) -> None:
    """Raise ValueError for a malformed request (shared by every backend)."""
    if not isinstance(n, int) or n < 1:
        raise ValueError(f"n={n!r}: ask for at least one completion per prompt")
    for i, prompt in enumerate(prompts):
        if not isinstance(prompt, list) or not prompt:
            raise ValueError(f"prompt {i} must be a non-empty list of chat messages")
        for m in prompt:
            if not isinstance(m, dict) or "role" not in m or not isinstance(m.get("content"), str):
                raise ValueError(f"prompt {i}: every message needs a `role` and a string `content`")


def chat_messages(prompt: Prompt) -> list[dict]:
    """The prompt as a model sees it: `role` and `content` only (metadata removed)."""
    return [{"role": m["role"], "content": m["content"]} for m in prompt]


def prompt_meta(prompt: Prompt) -> dict:
    """The metadata the prompt builders attached (merged over all messages; later wins)."""
    meta: dict = {}
    for m in prompt:
        if isinstance(m.get("meta"), dict):
            meta.update(m["meta"])
    return meta


def plain_chat_text(prompt: Prompt) -> str:
    """A chat rendered for a tokenizer without a chat template: role headers, then `assistant:`."""
    parts = [f"{m['role']}:\n{m['content']}" for m in chat_messages(prompt)]
    return "\n\n".join(parts) + "\n\nassistant:\n"
