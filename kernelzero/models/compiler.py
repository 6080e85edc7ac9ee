"""`compiler` (or `compiler:triton`): the teacher compiler as a model backend.

Finds the reference module in each prompt, compiles it with kernelzero.teacher and answers with
the kernel in a ```python block, so everything that samples a model (distill, generate, bench)
can use the teacher. The module is the last fenced block in the user messages that defines
`class Model` (the Coder prompts put a worked example's module before the task's; repair turns
add assistant messages after it, which are not searched), or a user message that is itself
a module with no fences. A module the teacher refuses gets a completion with no code that says
why in one line (`the teacher cannot compile this module: unsupported: torch.cumsum`); the
backend counts those reasons in `refusals`, once per prompt.

The answer does not depend on sampling: `deterministic` is True, and the n completions asked for
are n copies of the same text (callers that judge them can ask for one).
"""
from __future__ import annotations

import re
from collections import Counter

from kernelzero.models.base import BackendError, Prompt, SamplingConfig, check_request

_FENCE_RE = re.compile(r"^[ \t]*```[ \t]*(?:python|py)?[ \t]*\n(.*?)^[ \t]*```", re.S | re.M)
_MODEL_RE = re.compile(r"^class\s+Model\s*\(", re.M)
REFUSAL_PREFIX = "The teacher cannot compile this module: "


def find_module(prompt: Prompt) -> str | None:
    """The reference module a prompt asks about, or None."""
    found = None
    for m in prompt:
        if m.get("role") != "user":
            continue
        text = m["content"].replace("\r\n", "\n")
        blocks = [b for b in _FENCE_RE.findall(text) if _MODEL_RE.search(b)]
        if blocks:
            found = blocks[-1]
        elif _MODEL_RE.search(text) and "```" not in text:
            found = text
    return found


class CompilerBackend:
    deterministic = True

    def __init__(self, target: str = "triton"):
        if target != "triton":
            raise BackendError(f"compiler:{target}: the teacher writes Triton kernels only (use compiler:triton)")
        self.spec = f"compiler:{target}"
        self.refusals: Counter = Counter()
        self._cache: dict[str, str] = {}

    def complete(self, prompt: Prompt) -> str:
        """The answer to one prompt: the kernel in a ```python block, or a one-line refusal."""
        from kernelzero.teacher import compile_module

        module = find_module(prompt)
        if module is None:
            self.refusals["no module in the prompt"] += 1
            return REFUSAL_PREFIX + "the prompt holds no ```python block defining `class Model`."
        if module not in self._cache:
            r = compile_module(module)
            if r.ok:
                self._cache[module] = f"```python\n{r.kernel_source}```"
            else:
                self._cache[module] = REFUSAL_PREFIX + r.reason
        text = self._cache[module]
        if text.startswith(REFUSAL_PREFIX):
            self.refusals[text[len(REFUSAL_PREFIX):]] += 1
        return text

    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingConfig) -> list[list[str]]:
        check_request(prompts, n)
        return [[self.complete(p)] * n for p in prompts]
