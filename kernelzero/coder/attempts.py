"""Sample, judge, repair: the Coder's generation loop for one task.

Covers: turning completions into judged attempts (extraction; a completion without usable code
becomes a `format_error` verdict and is never run), the multi-turn loop (k samples, then up to
`turns - 1` repair turns for the attempts that `needs_another_turn`), and picking the best
attempt. Not covered: files, stores or resuming (the `bench` command does those), rendering.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace

from kernelzero.coder.extract import extract_code, format_error_verdict
from kernelzero.coder.prompts import PromptConfig, build_prompt
from kernelzero.coder.repair import RepairConfig, needs_another_turn, repair_prompt
from kernelzero.eval import Verdict
from kernelzero.models.base import Backend, SamplingConfig
from kernelzero.tasks import Candidate, Task, source_hash


@dataclass
class Attempt:
    """One completion of one sample chain at one turn, and what the judge said about it."""

    task: Task
    sample: int
    turn: int
    completion: str
    code: str | None          # extracted source; None when the completion had no usable code
    verdict: Verdict | None = None

    def to_dict(self) -> dict:
        v = self.verdict
        return {"task": self.task.key, "sample": self.sample, "turn": self.turn,
                "status": v.status if v else None, "reason": v.reason if v else None,
                "speedup": v.speedup if v else None,
                "speedup_compile": v.speedup_compile if v else None,
                "candidate_hash": v.candidate_hash if v else None}


@dataclass
class Chain:
    """The conversation of one sample: its chat so far and every attempt in it."""

    sample: int
    chat: list[dict]
    attempts: list[Attempt] = field(default_factory=list)


def to_attempt(task: Task, sample: int, turn: int, completion: str) -> Attempt:
    return Attempt(task, sample, turn, completion, extract_code(completion))


def judge_attempts(evaluator, attempts: list[Attempt],
                   on_verdict: Callable[[Attempt], None] | None = None) -> None:
    """Fill in `attempt.verdict` for each attempt: format errors here, the rest by the evaluator
    (in parallel). `on_verdict(attempt)` is called as each one is final."""
    cfg = evaluator.config
    to_run = []
    for a in attempts:
        if a.code is None:
            a.verdict = format_error_verdict(a.completion, task_hash=a.task.hash,
                                             device=cfg.device, policy=cfg.policy)
            if on_verdict:
                on_verdict(a)
        else:
            to_run.append(a)
    if not to_run:
        return
    # identical code for the same task (greedy sampling, a fix repeated) is judged once
    groups: dict[tuple[str, str], list[Attempt]] = {}
    for a in to_run:
        groups.setdefault((a.task.hash, source_hash(a.code)), []).append(a)
    order = list(groups)
    pairs = []
    for key in order:
        a = groups[key][0]
        pairs.append((a.task, Candidate(a.code, name=f"sample{a.sample}_turn{a.turn}",
                                        sample_id=a.sample)))

    def done(i: int, v: Verdict) -> None:
        for a in groups[order[i]]:
            a.verdict = v
            if on_verdict:
                on_verdict(a)

    evaluator.judge_many(pairs, on_verdict=done)


@dataclass
class LoopConfig:
    """The generation loop.

    k: sample chains started from the first prompt.
    turns: attempts per chain at most (1 = no repair).
    """

    k: int = 8
    turns: int = 1
    prompt: PromptConfig = field(default_factory=PromptConfig)
    repair: RepairConfig = field(default_factory=RepairConfig)
    sampling: SamplingConfig = field(default_factory=SamplingConfig)

    def __post_init__(self) -> None:
        if self.k < 1:
            raise ValueError(f"LoopConfig.k={self.k}: sample at least one completion")
        if self.turns < 1:
            raise ValueError(f"LoopConfig.turns={self.turns}: at least one turn")


def run_loop(backend: Backend, evaluator, task: Task, config: LoopConfig,
             on_verdict: Callable[[Attempt], None] | None = None,
             on_turn: Callable[[int, int], None] | None = None) -> list[Chain]:
    """Sample `k` chains for `task`, judge them, and repair for up to `turns - 1` more turns.

    A chain stops when its last verdict needs no other turn, or when the backend returns no
    completion for it (a replay record without that turn). `on_turn(turn, n_attempts)` is called
    before each turn is judged.
    """
    first = build_prompt(task, config.prompt)
    completions = backend.generate([first], config.k, config.sampling)[0]
    chains = [Chain(i, first, [to_attempt(task, i, 1, c)]) for i, c in enumerate(completions)]
    new = [c.attempts[-1] for c in chains]
    for turn in range(1, config.turns + 1):
        if turn > 1:
            active = [c for c in chains if needs_another_turn(c.attempts[-1].verdict)]
            if not active:
                break
            prompts = [repair_prompt(c.chat, c.attempts[-1].completion, c.attempts[-1].verdict,
                                     task, sample=c.sample, turn=turn, config=config.repair)
                       for c in active]
            sampling = config.sampling
            if sampling.seed is not None:
                sampling = replace(sampling, seed=sampling.seed + 1000 * (turn - 1))
            outs = backend.generate(prompts, 1, sampling)
            new = []
            for chain, chat, out in zip(active, prompts, outs):
                if out:
                    chain.chat = chat
                    chain.attempts.append(to_attempt(task, chain.sample, turn, out[0]))
                    new.append(chain.attempts[-1])
            if not new:
                break
        if on_turn:
            on_turn(turn, len(new))
        judge_attempts(evaluator, new, on_verdict)
    return chains


def best_attempt(attempts: list[Attempt]) -> Attempt | None:
    """The fastest correct attempt (by speedup over eager; untimed ones rank below timed ones,
    then the earliest turn and sample win), or None when none is correct."""
    correct = [a for a in attempts if a.verdict is not None and a.verdict.correct]
    if not correct:
        return None
    return max(correct, key=lambda a: (a.verdict.speedup is not None, a.verdict.speedup or 0.0,
                                       -a.turn, -a.sample))
