"""A completion-only loss that weighs the constants a completion copies from its prompt.

A from-scratch Coder gets a kernel's structure right at 99.7% of tokens but the module's
constants (`0.918`, `1e-5`, `3.0`) at 86% (bench/copy_probe.py, docs/learning-results.md): they are ~2% of
the tokens, so the plain mean loss barely asks for them. With `copy_weight` w, every token of a
numeric literal in the completion whose token sequence also stands, as a whole literal, in the
prompt counts w times in the mean; the other completion tokens count once.

    loss = sum_t w_t * CE_t / sum_t w_t   over the completion's tokens

A numeric literal is a maximal run of number tokens (digits and decimal points; the Coder's
tokenizer splits digits one per token) with a digit in it. `copy_weight = 1` is the plain loss.
"""
from __future__ import annotations

import re

import torch
import torch.nn.functional as F

_NUMBER_TEXT = re.compile(r"^[0-9.]+$")


def number_token_ids(tokenizer) -> torch.Tensor:
    """Per vocabulary entry: 2 for a token of digits (and points) with at least one digit, 1 for
    a decimal point alone, 0 otherwise. A literal is a run of non-zero entries with a digit in
    it (so the point of `tl.load` or `self.lo` is none)."""
    kind = torch.zeros(len(tokenizer), dtype=torch.int8)
    for tok_id in range(len(tokenizer)):
        text = tokenizer.decode([tok_id])
        if text and _NUMBER_TEXT.match(text):
            kind[tok_id] = 2 if any(ch.isdigit() for ch in text) else 1
    return kind


def _literals(kind: list[int], lo: int, hi: int) -> list[tuple[int, int]]:
    """Maximal [start, end) runs of number tokens in kind[lo:hi] that hold a digit."""
    runs, start = [], None
    for i in range(lo, hi + 1):
        inside = i < hi and kind[i] > 0
        if inside and start is None:
            start = i
        elif not inside and start is not None:
            if any(kind[j] == 2 for j in range(start, i)):
                runs.append((start, i))
            start = None
    return runs


def copy_weights(input_ids: torch.Tensor, labels: torch.Tensor, numbers: torch.Tensor,
                 weight: float) -> torch.Tensor:
    """Per-position weights (batch x length): `weight` on the completion's tokens that belong to
    a numeric literal also standing whole in the prompt, 1 elsewhere. The prompt is what comes
    before the first labelled position of a row; the completion is the labelled positions."""
    w = torch.ones(input_ids.shape, dtype=torch.float32)
    if weight == 1.0:
        return w
    ids = input_ids.cpu().tolist()
    labelled = (labels != -100).cpu()
    kinds = numbers.to(input_ids.device)[input_ids].cpu().tolist()
    for b, row in enumerate(ids):
        where = labelled[b].nonzero()
        if not len(where):
            continue
        start, end = int(where[0]), int(where[-1]) + 1
        kind = kinds[b]
        prompt_literals = {tuple(row[s:e]) for s, e in _literals(kind, 0, start)}
        for s, e in _literals(kind, start, end):
            if tuple(row[s:e]) in prompt_literals:
                w[b, s:e] = weight
    return w


def weighted_completion_loss(logits: torch.Tensor, labels: torch.Tensor,
                             weights: torch.Tensor) -> torch.Tensor:
    """sum w_t CE_t / sum w_t over the labelled positions (next-token prediction: the logits at
    position t predict the label at t + 1, as in every causal LM)."""
    target = labels[:, 1:]
    ce = F.cross_entropy(logits[:, :-1].float().transpose(1, 2), target.clamp_min(0),
                         reduction="none")
    w = weights[:, 1:].to(ce.device) * (target != -100)
    return (ce * w).sum() / w.sum().clamp_min(1.0)
