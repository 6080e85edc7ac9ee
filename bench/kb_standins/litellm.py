"""Stand-in for litellm: KernelBench's utils import it for LLM queries only."""


def completion(*args, **kwargs):
    raise RuntimeError("no LLM client in the KernelBench comparison")
