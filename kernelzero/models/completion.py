"""What a model answered, as text to take code from: chat-template tokens and reasoning blocks
removed (`clean_completion`), fenced blocks found however they are fenced (`code_blocks`,
`fenced_blocks`), and whether a piece parses as Python. The Coder's extraction
(kernelzero.coder.extract) and the Proposer's module parser (kernelzero.propose.llm) both start
here, so a completion is read the same way whichever role wrote it.
"""
from __future__ import annotations

import re

from kernelzero.tasks.task import parse_python

# Chat-template and end-of-text tokens of common model families.
_SPECIAL_TOKENS_RE = re.compile(
    r"<\|(?:im_start|im_end|endoftext|eot_id|end_of_text|begin_of_text|start_header_id|"
    r"end_header_id|eom_id|end|assistant|user|system|fim_[a-z]+)\|>"
    r"|<｜[^｜<>]{1,40}｜>|</s>|<s>|\[/?INST\]|<end_of_turn>|<start_of_turn>(?:model|user)?")
_THINK_RE = re.compile(r"<(think|thinking|reasoning)>.*?</\1>", re.S | re.I)
_OPEN_THINK_RE = re.compile(r"<(?:think|thinking|reasoning)>", re.I)
_FENCE_RE = re.compile(r"^[ \t]*(`{3,}|~{3,})[ \t]*([\w+.-]*)[^\n]*\n", re.M)


def clean_completion(text: str, keep_reasoning: bool = False) -> str:
    """The completion without chat tokens and (unless `keep_reasoning`) reasoning blocks.

    A reasoning block that was never closed (the model ran out of tokens) loses only its tag:
    code after it is still found."""
    text = _SPECIAL_TOKENS_RE.sub("", text.replace("\r\n", "\n"))
    if not keep_reasoning:
        text = _THINK_RE.sub("\n", text)
    text = _OPEN_THINK_RE.sub("\n", text)
    return re.sub(r"</(?:think|thinking|reasoning)>", "\n", text, flags=re.I)


def code_blocks(text: str) -> list[str]:
    """Fenced code blocks in order; an unterminated last block runs to the end of the text."""
    return [body for _, body in fenced_blocks(text)]


def fenced_blocks(text: str) -> list[tuple[str, str]]:
    """(language, body) of each fenced block in order (language: the word after the fence,
    lower-cased, "" when none)."""
    blocks = []
    pos = 0
    while True:
        m = _FENCE_RE.search(text, pos)
        if not m:
            break
        fence = m.group(1)
        # Any line that starts with the fence closes the block (lenient: text may follow it).
        close = re.compile(r"^[ \t]*" + re.escape(fence[0]) + "{" + str(len(fence)) + ",}", re.M)
        end = close.search(text, m.end())
        lang = m.group(2).lower()
        if end is None:
            blocks.append((lang, text[m.end():]))
            break
        blocks.append((lang, text[m.end():end.start()]))
        pos = end.end()
    return blocks


def parses(code: str) -> bool:
    try:
        parse_python(code)
    except (SyntaxError, ValueError):
        return False
    return True
