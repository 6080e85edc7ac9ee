"""Model backends: turn chat prompts into completions.

    backend = load_backend("hf:PATH" | "vllm:PATH" | "openai:URL#MODEL" | "replay:PATH" | "compiler")
    backend.generate(prompts, n, SamplingConfig(...)) -> list[list[str]]

Each backend module is imported only when its spec is used, so `import kernelzero.models` pulls
in neither transformers nor vLLM.
"""
from __future__ import annotations

from kernelzero.models.base import Backend, BackendError, SamplingConfig

__all__ = ["Backend", "BackendError", "BackendSpecError", "SamplingConfig", "load_backend",
           "prompt_style_of", "SPEC_HELP"]

SPEC_HELP = ("shipped (the Coder inside the package), "
             "hf:PATH (local transformers checkpoint), vllm:PATH (vLLM offline engine), "
             "openai:URL#MODEL (OpenAI-compatible server; key from KERNELZERO_API_KEY or "
             "OPENAI_API_KEY), replay:PATH (JSONL file or KernelBench run folder), compiler (the teacher "
             "compiler: family modules to Triton, no model)")


class BackendSpecError(ValueError):
    """The `--model` spec is not one we understand."""


def load_backend(spec: str, **options) -> Backend:
    """Build the backend a spec names. `options` go to that backend's config dataclass
    (`HFConfig`, `VLLMConfig`, `OpenAIConfig`); replay takes none."""
    kind, sep, rest = spec.partition(":")
    if kind == "compiler":
        if options:
            raise BackendSpecError(f"compiler takes no options (got {sorted(options)})")
        if rest not in ("", "triton"):
            raise BackendSpecError(f"{spec!r}: the teacher compiler writes Triton only (compiler:triton)")
        from kernelzero.models.compiler import CompilerBackend
        return CompilerBackend(rest or "triton")
    if kind == "shipped":  # `shipped` or `shipped:ROLE`: the model inside the package, by HF
        from kernelzero.models.hf import HFBackend, HFConfig
        return HFBackend(str(_shipped_path(spec)), HFConfig(**options))
    if not sep or not rest:
        raise BackendSpecError(f"model spec {spec!r} has no KIND:TARGET form; use one of: "
                               f"{SPEC_HELP}")
    if kind == "hf":
        from kernelzero.models.hf import HFBackend, HFConfig
        return HFBackend(rest, HFConfig(**options))
    if kind == "vllm":
        from kernelzero.models.vllm import VLLMBackend, VLLMConfig
        return VLLMBackend(rest, VLLMConfig(**options))
    if kind == "openai":
        from kernelzero.models.openai import OpenAIBackend, OpenAIConfig, parse_spec
        try:
            url, model = parse_spec(rest)
        except ValueError as e:
            raise BackendSpecError(str(e)) from None
        return OpenAIBackend(url, model, OpenAIConfig(**options))
    if kind == "replay":
        if options:
            raise BackendSpecError(f"replay: takes no options (got {sorted(options)})")
        from kernelzero.models.replay import ReplayBackend
        return ReplayBackend(rest)
    raise BackendSpecError(f"unknown model backend {kind!r} in {spec!r}; use one of: {SPEC_HELP}")


def prompt_style_of(spec: str) -> str | None:
    """The prompt style a model was trained on, where its checkpoint records it (the models
    KernelZero trains from zero write `prompt_style` into kernelzero_model.json); None when
    unknown."""
    import json
    from pathlib import Path

    if spec.partition(":")[0] == "shipped":
        try:
            path = _shipped_path(spec)
        except BackendSpecError:
            return None
    elif spec.startswith(("hf:", "vllm:")):
        path = Path(spec.partition(":")[2])
    else:
        return None
    try:
        return json.loads((Path(path) / "kernelzero_model.json").read_text()).get("prompt_style")
    except (OSError, ValueError):
        return None


def _shipped_path(spec: str):
    """The folder of the model a `shipped[:ROLE]` spec names (ROLE: coder by default)."""
    from kernelzero.models.shipped import ShippedModelMissing, shipped_model
    try:
        return shipped_model(spec.partition(":")[2] or "coder")
    except (ShippedModelMissing, ValueError) as e:  # not built, or no such role
        raise BackendSpecError(str(e)) from None
