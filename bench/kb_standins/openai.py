"""Stand-in for openai: KernelBench's utils import the client for LLM queries only."""


class OpenAI:
    def __init__(self, *args, **kwargs):
        raise RuntimeError("no LLM client in the KernelBench comparison")
