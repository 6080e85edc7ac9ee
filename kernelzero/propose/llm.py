"""The LLM proposer: ask a model for a reference module that uses a given API set.

The prompt gives the API set with the catalog's description of each API, a few example modules in
KernelBench format, the rules the validation check enforces, and a summary of the Coder's recent
weaknesses (the APIs whose tasks it solves least often, from the task pool). `parse_module` pulls
one module out of the answer robustly: reasoning blocks dropped, fenced code preferred (the last
block that holds a whole module, else all blocks joined), unfenced code cut from its first
import, trailing prose trimmed until it parses.

The backend is any object with `generate(prompts, n, sampling) -> list[list[str]]` (the
interface of kernelzero.models); nothing here depends on which backend it is. Not covered:
validating the answer (validate.py) and training the Proposer (kernelzero/train).
"""
from __future__ import annotations

import random
import re
from dataclasses import dataclass, field

from kernelzero.catalog.specs import describe, get_spec
from kernelzero.models.completion import clean_completion, fenced_blocks, parses

SYSTEM = (
    "You write PyTorch reference modules for a GPU-kernel benchmark. A second model will be asked "
    "to re-implement your module as fast custom GPU kernels, so your module must be correct, "
    "deterministic and non-trivial: its output must depend on every input and on its weights, "
    "and must not be constant, zero or equal to an input.")

RULES = """Rules:
- Use every API listed above, and no other compute API (no other torch / torch.nn / F calls,
  no arithmetic operators unless an arithmetic API is listed). Shape glue is allowed: view,
  reshape, flatten, unflatten, permute, transpose, contiguous, unsqueeze, squeeze.
- KernelBench format: shape constants as module globals at the top, `class Model(nn.Module)`
  with `__init__(self, *get_init_inputs())` and `forward(self, *get_inputs())`, then
  `def get_inputs()` returning the input tensors and `def get_init_inputs()` returning the
  constructor arguments.
- float32 inputs from torch.randn / torch.rand; no dropout, no randomness in forward.
- Sizes: {size_hint}
Answer with one ```python block holding the whole file, and nothing after it."""

SIZE_HINTS = {"cpu": "small, for a CPU run: every tensor under 65536 elements.",
              "gpu": "realistic for one modern GPU: a few milliseconds of eager runtime, under "
                     "4 GiB of memory in total."}
EXAMPLE_SETS = (["conv2d", "gelu", "group_norm"], ["add", "linear", "logsumexp"])


class ParseError(ValueError):
    """No module could be found in a model's answer."""


@dataclass
class Proposal:
    """One answer: the module source (None when parsing failed), the error, the raw text."""

    apis: list[str]
    source: str | None
    error: str = ""
    raw: str = ""


@dataclass
class LLMProposerConfig:
    """target: `cpu` or a GPU target name (sizes the prompt's size hint and the examples).
    n_examples: example modules shown in the prompt. max_weak: weakness lines shown."""

    target: str = "h100"
    n_examples: int = 2
    max_weak: int = 8
    examples: list[str] = field(default_factory=list)  # sources; empty: composed on first use

    def __post_init__(self) -> None:
        if self.n_examples < 0 or self.max_weak < 0:
            raise ValueError("LLMProposerConfig.n_examples and max_weak must be >= 0")


_PYTHON = ("", "python", "py", "python3")
_REQUIRED = ("class Model", "def get_inputs", "def get_init_inputs")


def _complete(code: str) -> bool:
    return all(k in code for k in _REQUIRED)


def _trim_to_parse(code: str) -> str | None:
    lines = code.rstrip().splitlines()
    while lines:
        text = "\n".join(lines)
        if _complete(text) and parses(text):
            return text
        lines.pop()
    return None


def parse_module(text: str) -> str:
    """One KernelBench-format module from a model's answer; raises ParseError."""
    text = clean_completion(text or "")
    blocks = [body for lang, body in fenced_blocks(text) if lang in _PYTHON]
    candidates = [b for b in blocks if _complete(b)][::-1]
    if blocks:
        candidates.append("\n\n".join(blocks))
    start = re.search(r"^(import |from )", text, re.M)
    if start:
        candidates.append(text[start.start():].split("```")[0])
    for code in candidates:
        code = _trim_to_parse(code)
        if code:
            return code.strip() + "\n"
    missing = [k for k in _REQUIRED if k not in text]
    raise ParseError("no complete module in the answer" + (f" (missing {', '.join(missing)})"
                                                           if missing else " (syntax errors)"))


def weakness_summary(records, max_lines: int = 8) -> str:
    """Lines naming the APIs whose tasks the Coder solves least often.

    records: iterable of (apis, p) pairs, or task-pool entries (with `.apis` and `.latest_p`).
    """
    per_api: dict[str, list[float]] = {}
    for r in records:
        apis, p = (r.apis, r.latest_p) if hasattr(r, "apis") else r
        if p is None:
            continue
        for a in apis:
            per_api.setdefault(a, []).append(p)
    if not per_api:
        return ""
    rows = sorted(per_api.items(), key=lambda kv: (sum(kv[1]) / len(kv[1]), kv[0]))[:max_lines]
    return "\n".join(f"- {get_spec(a).call}: solved {100 * sum(ps) / len(ps):.0f}% of the time "
                     f"over {len(ps)} task(s)" for a, ps in rows)


class LLMProposer:
    def __init__(self, backend, config: LLMProposerConfig | None = None, sampling=None):
        self.backend = backend
        self.config = config or LLMProposerConfig()
        self.sampling = sampling

    def examples(self) -> list[str]:
        if not self.config.examples and self.config.n_examples:
            from kernelzero.propose.composer import ComposeConfig, Composer

            comp = Composer(ComposeConfig(target=self.config.target))
            rng = random.Random(0)
            self.config.examples = [comp.compose(s, rng).source for s in EXAMPLE_SETS]
        return self.config.examples[:self.config.n_examples]

    def build_prompt(self, apis: list[str], weaknesses: str = "") -> list[dict]:
        specs = [get_spec(a) for a in apis]
        scale = "cpu" if self.config.target == "cpu" else "gpu"
        parts = ["Write one PyTorch module that uses exactly these APIs:"]
        parts += [f"- {describe(s)}" for s in specs]
        for i, ex in enumerate(self.examples(), 1):
            parts += ["", f"Example {i}:", "```python", ex.strip(), "```"]
        if weaknesses:
            parts += ["", "The kernel writer currently struggles with these APIs; modules that "
                      "combine them in new ways are the most useful:", weaknesses]
        parts += ["", RULES.format(size_hint=SIZE_HINTS[scale])]
        meta = {"role": "proposer", "apis": list(apis), "task": "propose/" + "+".join(apis)}
        return [{"role": "system", "content": SYSTEM},
                {"role": "user", "content": "\n".join(parts), "meta": meta}]

    def propose(self, api_sets: list[list[str]], weaknesses: str = "", n: int = 1) -> list[list[Proposal]]:
        """n answers per API set, parsed; parse failures come back as Proposals with `error`."""
        sampling = self.sampling
        if sampling is None:
            from kernelzero.models import SamplingConfig
            sampling = SamplingConfig()
        prompts = [self.build_prompt(a, weaknesses) for a in api_sets]
        answers = self.backend.generate(prompts, n, sampling)
        if len(answers) != len(prompts):
            raise ValueError(f"backend returned {len(answers)} answer lists for {len(prompts)} prompts")
        out = []
        for apis, texts in zip(api_sets, answers):
            row = []
            for t in texts:
                try:
                    row.append(Proposal(list(apis), parse_module(t), raw=t))
                except ParseError as e:
                    row.append(Proposal(list(apis), None, str(e), raw=t))
            out.append(row)
        return out
