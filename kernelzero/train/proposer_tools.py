"""Wiring of the Proposer phase to the packages that own its parts.

Covers: `sample_api_set` (the catalog's co-occurrence distribution) and `default_tools`, which
builds a `ProposerTools` from the Proposer package (prompt, module parsing, validation check,
frontier reward) and the Coder side (prompts, code extraction, an `hf:` backend on the current
Coder checkpoint, loaded once per phase). Does not cover any of those parts themselves.
"""
from __future__ import annotations

import random
from functools import lru_cache

from kernelzero.train.config import TrainConfig
from kernelzero.train.proposer_grpo import ProposerTools


@lru_cache(maxsize=1)
def _distribution():
    from kernelzero.catalog.cooccurrence import load_default
    return load_default()


def sample_api_set(rng: random.Random, k: int) -> list[str]:
    return _distribution().sample(rng, k)


def coder_backend(cfg: TrainConfig, coder_model: str):
    """A model backend on a Coder checkpoint: `hf:` or `vllm:` as cfg.sample_backend says; a
    `replay:FILE` spec (completions written elsewhere, e.g. on a GPU) is read back as it is."""
    from kernelzero.models import load_backend

    if coder_model.startswith("replay:"):
        return load_backend(coder_model)
    if cfg.sample_backend == "vllm":
        return load_backend(f"vllm:{coder_model}")
    return load_backend(f"hf:{coder_model}", device="cuda" if cfg.device == "cuda" else "cpu")


def coder_side(cfg: TrainConfig, coder_model: str):
    """(generate, prompt, to_candidate) for the current Coder checkpoint, and a closer."""
    from kernelzero.coder.prompts import build_prompt
    from kernelzero.models import SamplingConfig
    from kernelzero.coder.extract import to_candidate

    backend = coder_backend(cfg, coder_model)
    pc = cfg.coder.prompt_config()
    calls = [0]

    def generate(prompts, n):
        calls[0] += 1
        return backend.generate(prompts, n, SamplingConfig(
            temperature=cfg.coder.temperature, max_new_tokens=cfg.coder.max_completion_tokens,
            seed=cfg.seed + calls[0]))

    def close():
        nonlocal backend
        backend = None

    return generate, (lambda task: build_prompt(task, pc)), to_candidate, close


def default_tools(cfg: TrainConfig, evaluator, coder_model: str):
    """ProposerTools from the Proposer package (kernelzero.propose) and the current Coder.

    The validation check gets a fresh duplicate memory per phase, so a re-run phase (after a
    kill) judges its modules exactly as the first attempt did.
    """
    from kernelzero.propose.llm import LLMProposer, LLMProposerConfig
    from kernelzero.propose.reward import frontier_reward
    from kernelzero.propose.validate import ValidationConfig, Validator

    prompter = LLMProposer(backend=None, config=LLMProposerConfig(target=cfg.proposer.target,
                                                                n_examples=cfg.proposer.prompt_examples))
    validator = Validator(evaluator, ValidationConfig(target=cfg.proposer.target))

    def prompt(apis, weakness):
        return [{"role": m["role"], "content": m["content"]} for m in prompter.build_prompt(apis, weakness)]

    def validate(task, apis):
        res = validator.validate(task.source, apis, name=task.name)
        return res.ok, "; ".join(res.reasons) or "ok"

    generate, coder_prompt, to_candidate, close = coder_side(cfg, coder_model)
    tools = ProposerTools(prompt=prompt, parse=parse_or_none, validate=validate, reward=frontier_reward,
                          coder_generate=generate, coder_prompt=coder_prompt, to_candidate=to_candidate)
    return tools, close


def parse_or_none(text: str):
    """The module in a Proposer completion, or None where there is none (its reward is rho)."""
    from kernelzero.propose.llm import ParseError, parse_module

    try:
        return parse_module(text)
    except ParseError:
        return None
