"""Stand-in for python-dotenv: KernelBench's utils call load_dotenv() for LLM API keys only."""


def load_dotenv(*args, **kwargs) -> bool:
    return False
