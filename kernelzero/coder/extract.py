"""Find the candidate source in a model's completion.

Copes with: reasoning before the code (`<think>...</think>` blocks, also unclosed ones, and plain
prose), chat-template tokens left in the text (`<|im_end|>`, `<|eot_id|>`, `</s>`, ...), several
code blocks (the one that defines `ModelNew` wins; among several, the last one that parses),
a missing closing fence, and no fences at all (the code is cut out of the prose around it).
Returns None when nothing usable is found: the caller then records a `format_error` verdict
(`format_error_verdict`) without running anything.

Not covered: merging code spread over several blocks (a kernel in one, `ModelNew` in another);
only the block that defines `ModelNew` is kept.
"""
from __future__ import annotations

import re

from kernelzero.eval import Verdict
from kernelzero.models.completion import clean_completion, code_blocks, parses
from kernelzero.tasks import Candidate

_MODELNEW_RE = re.compile(r"^\s*class\s+ModelNew\b", re.M)
_CODE_START_RE = re.compile(r"^(?:import |from \S+ import |class |def |@|[A-Za-z_]\w* ?= ?|#)")


_PARSE_BUDGET = 2000  # ast.parse attempts when cutting code out of prose


def _unfenced(text: str) -> str | None:
    """Cut the code out of prose: the whole text when it parses; else the earliest top-level
    code line above `class ModelNew` to the longest end that parses."""
    lines = text.split("\n")
    at = next((i for i, line in enumerate(lines) if _MODELNEW_RE.match(line)), None)
    if at is None:
        return None
    if parses(text):
        return text.strip("\n") + "\n"
    starts = [i for i in range(at + 1) if _CODE_START_RE.match(lines[i])] or [at]
    budget = _PARSE_BUDGET
    for start in starts:
        for end in range(len(lines), at, -1):
            code = "\n".join(lines[start:end]).strip("\n")
            if parses(code):
                return code + "\n"
            budget -= 1
            if budget <= 0:
                return "\n".join(lines[starts[0]:]).strip("\n") + "\n"  # -> compile_error
    return "\n".join(lines[starts[0]:]).strip("\n") + "\n"


def extract_code(completion: str) -> str | None:
    """The candidate source in `completion`, or None when it holds no `ModelNew` code."""
    if not completion or not completion.strip():
        return None
    # The answer after the reasoning first; the reasoning itself only when the answer has no code.
    for keep_reasoning in (False, True):
        text = clean_completion(completion, keep_reasoning)
        with_model = [b for b in code_blocks(text) if _MODELNEW_RE.search(b)]
        if with_model:
            parsing = [b for b in with_model if parses(b)]
            code = (parsing or with_model)[-1]
            return code.strip("\n") + "\n"
        code = _unfenced(text)
        if code is not None:
            return code
    return None


def to_candidate(completion: str) -> Candidate:
    """The Coder's kernel in a completion as a Candidate; no code found gives an empty one
    (judged `format_error`)."""
    return Candidate(source=extract_code(completion) or "")


def format_error_reason(completion: str) -> str:
    """Why `extract_code` found nothing, in words for the verdict and the repair turn."""
    if not completion or not completion.strip():
        return "the completion is empty"
    text = clean_completion(completion)
    if not text.strip():
        return "the completion holds only reasoning or chat tokens, no code"
    if code_blocks(text):
        return "no code block defines a `class ModelNew`"
    return "the completion has no code block and no `class ModelNew`"


def format_error_verdict(completion: str, task_hash: str = "", backend: str = "none",
                         device: str = "cpu", policy: str = "strict") -> Verdict:
    """The verdict for a completion with no usable code (nothing was run)."""
    return Verdict(status="format_error", reason=format_error_reason(completion),
                   backend=backend, device=device, policy=policy, task_hash=task_hash,
                   log_tail=completion[-400:] if completion else "")
