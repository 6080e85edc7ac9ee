"""Reward functions for verl users: score completions through a KernelZero reward service.

verl loads a `custom_reward_function` by file path and calls it per sample (the default "naive"
reward manager) or per batch (`reward_model.reward_manager=batch`). This file gives both:

    compute_score(data_source, solution_str, ground_truth, extra_info=None) -> dict
    compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None) -> list[dict]

`ground_truth` is the reference module's source (Model, get_inputs, get_init_inputs);
`solution_str` is the model's completion, from which the candidate code is cut out
(`kernelzero.coder.extract`). `extra_info["backend"]` may force "triton" or "cuda".
The service URL comes from KERNELZERO_REWARD_URL, its token (if any) from KERNELZERO_REWARD_TOKEN.

Score: 1.0 for a correct kernel, else 0.0, plus `beta * S` for a correct kernel when
KERNELZERO_REWARD_BETA is set (S = speedup over eager clipped to [0, KERNELZERO_REWARD_SMAX],
default 10). verl scores one sample at a time, so CA-GRPO's group gate (the speed term only once a
group is correct often enough) cannot be applied here; KernelZero's own trainer applies it.
Each result also carries `correct`, `speedup` (0.0 when not timed) and `format_ok` for verl's logs.

verl is not a dependency: this file imports nothing from it. See docs/serving.md for a config.
"""
from __future__ import annotations

import os
import threading

from kernelzero.coder.extract import extract_code, format_error_verdict
from kernelzero.eval.verdict import Verdict
from kernelzero.serve.client import RewardClient
from kernelzero.tasks import Candidate, Task

URL_ENV = "KERNELZERO_REWARD_URL"
BETA_ENV = "KERNELZERO_REWARD_BETA"
SMAX_ENV = "KERNELZERO_REWARD_SMAX"

_client: RewardClient | None = None
_client_lock = threading.Lock()


def _get_client() -> RewardClient:
    global _client
    with _client_lock:
        if _client is None:
            url = os.environ.get(URL_ENV)
            if not url:
                raise RuntimeError(f"set {URL_ENV} to the reward service, e.g. "
                                   f"http://127.0.0.1:8000 (start it with `kernelzero serve`)")
            _client = RewardClient(url)
        return _client


def _score(verdict: Verdict) -> dict:
    beta = float(os.environ.get(BETA_ENV, "0") or 0)
    s_max = float(os.environ.get(SMAX_ENV, "10") or 10)
    speedup = verdict.speedup if verdict.speedup is not None else 0.0
    score = 1.0 if verdict.correct else 0.0
    if verdict.correct and beta:
        score += beta * min(max(speedup, 0.0), s_max)
    return {"score": score, "correct": float(verdict.correct), "speedup": float(speedup),
            "format_ok": float(verdict.status != "format_error")}


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None,
                        **_ignored) -> list[dict]:
    """Score a batch in one round of requests (verl's `batch` reward manager calls this)."""
    extra_infos = list(extra_infos) if extra_infos is not None else [None] * len(solution_strs)
    verdicts: list[Verdict | None] = [None] * len(solution_strs)
    pairs, where = [], []
    for i, (completion, reference, extra) in enumerate(zip(solution_strs, ground_truths,
                                                           extra_infos)):
        code = extract_code(completion or "")
        if code is None:  # nothing to run: no request for it
            verdicts[i] = format_error_verdict(completion or "")
            continue
        backend = (extra or {}).get("backend", "auto") if isinstance(extra, dict) else "auto"
        pairs.append((Task.from_source(str(reference), name="task"),
                      Candidate(source=code, name=f"sample_{i}", backend=backend)))
        where.append(i)
    if pairs:
        for i, v in zip(where, _get_client().judge_many(pairs)):
            verdicts[i] = v
    return [_score(v) for v in verdicts]  # type: ignore[arg-type]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **_ignored) -> dict:
    """Score one completion (verl's default `naive` reward manager calls this per sample)."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info])[0]
