"""Reward functions for verl users: score completions through a KernelZero reward service.

verl loads a `custom_reward_function` by file path and calls it per sample (the default "naive"
reward manager) or per batch (`reward_model.reward_manager=batch`). This file gives both:

    compute_score(data_source, solution_str, ground_truth, extra_info=None) -> dict
    compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None) -> list[dict]

`ground_truth` is the reference module's source (Model, get_inputs, get_init_inputs);
`solution_str` is the model's completion, from which the candidate code is cut out
(`kernelzero.coder.extract`). `extra_info["backend"]` may force "triton" or "cuda".
The service URL comes from KERNELZERO_REWARD_URL, its token (if any) from KERNELZERO_REWARD_TOKEN.

Score: CA-GRPO's reward, computed by the functions KernelZero's own trainer uses
(`kernelzero.train.rewards`): r_i = c_i * (1 + T(G) * beta * S_i), with S_i the speed score (0
for a speedup the judge could not confirm against its own clock, `timing_unconfirmed`). In a
batch, a group is every sample with the same data source and ground truth (verl repeats a
prompt n times), so the group gate T(G) is applied as the trainer applies it; `compute_score`
sees one sample, which is its own group (a correct kernel then gets 1 + beta * S_i).
Set from the environment: KERNELZERO_REWARD_BETA (default 0: correctness only),
KERNELZERO_REWARD_ALPHA (0.5), KERNELZERO_REWARD_SMAX (10) and KERNELZERO_REWARD_TRANSFORM
(`clip`, `log` or `excess`), with the meanings of the trainer's `coder` section
(docs/training.md). Each result also carries `correct`, `speedup` (0.0 when not timed) and
`format_ok` for verl's logs.

verl is not a dependency: this file imports nothing from it. See docs/serving.md for a config.
"""
from __future__ import annotations

import os
import threading

from kernelzero.coder.extract import extract_code, format_error_verdict
from kernelzero.eval.verdict import Verdict
from kernelzero.serve.client import RewardClient
from kernelzero.tasks import Candidate, Task
from kernelzero.train.rewards import SPEED_TRANSFORMS, keyed_ca_grpo_rewards, verdict_reward_parts

URL_ENV = "KERNELZERO_REWARD_URL"
BETA_ENV = "KERNELZERO_REWARD_BETA"
ALPHA_ENV = "KERNELZERO_REWARD_ALPHA"
SMAX_ENV = "KERNELZERO_REWARD_SMAX"
TRANSFORM_ENV = "KERNELZERO_REWARD_TRANSFORM"

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


def _reward_settings() -> dict:
    """alpha, beta, s_max and the speed transform from the environment, checked at each call."""
    def number(name: str, default: float) -> float:
        raw = os.environ.get(name, "").strip()
        try:
            return float(raw) if raw else default
        except ValueError:
            raise ValueError(f"{name}={raw!r} is not a number") from None
    transform = os.environ.get(TRANSFORM_ENV, "").strip() or "clip"
    if transform not in SPEED_TRANSFORMS:
        raise ValueError(f"{TRANSFORM_ENV}={transform!r}: choose one of {', '.join(SPEED_TRANSFORMS)}")
    return {"alpha": number(ALPHA_ENV, 0.5), "beta": number(BETA_ENV, 0.0),
            "s_max": number(SMAX_ENV, 10.0), "transform": transform}


def _scores(verdicts: list[Verdict], keys: list, cfg: dict) -> list[dict]:
    parts = [verdict_reward_parts(v, cfg["s_max"], cfg["transform"]) for v in verdicts]
    rewards = keyed_ca_grpo_rewards([c for c, _ in parts], [s for _, s in parts], keys,
                                    cfg["alpha"], cfg["beta"])
    return [{"score": r, "correct": float(v.correct),
             "speedup": float(v.speedup if v.speedup is not None else 0.0),
             "format_ok": float(v.status != "format_error")}
            for r, v in zip(rewards, verdicts)]


def compute_score_batch(data_sources, solution_strs, ground_truths, extra_infos=None,
                        **_ignored) -> list[dict]:
    """Score a batch in one round of requests (verl's `batch` reward manager calls this)."""
    cfg = _reward_settings()  # a bad setting stops before anything is judged
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
    data_sources = list(data_sources) if data_sources is not None else [None] * len(verdicts)
    keys = [(str(d), str(g)) for d, g in zip(data_sources, ground_truths)]
    return _scores(verdicts, keys, cfg)  # type: ignore[arg-type]


def compute_score(data_source, solution_str, ground_truth, extra_info=None, **_ignored) -> dict:
    """Score one completion (verl's default `naive` reward manager calls this per sample)."""
    return compute_score_batch([data_source], [solution_str], [ground_truth], [extra_info])[0]
