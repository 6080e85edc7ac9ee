"""Cold-start distillation data: sample a teacher, judge every sample, keep the verified-correct
kernels, write an SFT dataset.

Covers: loading the tasks (a KernelBench-format directory or a task pool `.db`), sampling the
teacher through any model backend (`hf:`, `vllm:`, `openai:`, `replay:`, or `compiler`, the
teacher compiler, asked once per task since it is deterministic), judging all samples with code in
parallel with the evaluator (cached in `DATA.verdicts.jsonl` beside the output, so an interrupted
run judges nothing twice), keeping the correct ones (all, or the fastest per task), and writing
JSONL rows in TRL's conversational prompt-completion format with provenance:

    {"prompt": [system, user], "completion": [{"role": "assistant", "content": TEXT}],
     "task": KEY, "task_hash": H, "teacher": SPEC, "sample": S, "verdict": {...}}

Does not cover the fine-tuning (sft.py) or the prompt wording (kernelzero.coder.prompts).
"""
from __future__ import annotations

import json
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from kernelzero.coder.prompts import STYLES
from kernelzero.tasks import Task


@dataclass
class DistillConfig:
    """teacher: model spec (see kernelzero.models.SPEC_HELP).
    k: samples per task.
    fastest_only: keep only the fastest correct sample per task (by eager speedup; on a CPU run,
        where nothing is timed, the first correct one).
    backend: kernel language asked for (`triton` or `cuda`).
    temperature / max_new_tokens / seed: teacher sampling.
    prompt_style: `kernelbench`, `principles` (the cold-start prompt that states the
        optimisation principles) or `compact` (the small from-scratch Coders' prompt).
    time_limit_s: stop judging new chunks after about this many seconds; the pairs judged so far
        are written and the rest counted as `unjudged` (a re-run judges only those). None: no limit.
    """

    teacher: str
    k: int = 8
    fastest_only: bool = False
    backend: str = "triton"
    temperature: float = 0.7
    max_new_tokens: int = 4096
    seed: int = 0
    prompt_style: str = "principles"
    time_limit_s: float | None = None

    def __post_init__(self) -> None:
        if self.time_limit_s is not None and self.time_limit_s <= 0:
            raise ValueError(f"time_limit_s={self.time_limit_s}: must be > 0 (or None for no limit)")
        if self.k < 1:
            raise ValueError(f"k={self.k}: must be >= 1")
        if self.backend not in ("triton", "cuda"):
            raise ValueError(f"backend={self.backend!r}: choose triton or cuda")
        if self.prompt_style not in STYLES:
            raise ValueError(f"prompt_style={self.prompt_style!r}: choose one of {', '.join(STYLES)}")


def load_task_source(spec: str | Path) -> list[Task]:
    """Tasks from a directory (or file) of KernelBench-format modules, or a task pool (`.db`)."""
    from kernelzero.tasks import load_tasks

    path = Path(spec)
    if path.is_file() and path.suffix == ".db":
        from kernelzero.propose.task_pool import TaskPool
        with TaskPool(path) as pool:
            return [e.task() for e in pool.entries()]
    return load_tasks(path)


JUDGE_CHUNK = 256
_now = time.monotonic  # the time limit's clock (a test replaces it)


def distill(cfg: DistillConfig, tasks: list[Task], evaluator, out: str | Path, progress: bool = False) -> dict:
    """Sample, judge, keep, write; returns counts {tasks, samples, judged, correct, kept,
    tasks_kept, skipped (samples with no code: not judged) and skipped_reasons, verdicts}."""
    from kernelzero.coder.prompts import PromptConfig, build_prompt
    from kernelzero.models import SamplingConfig, load_backend
    from kernelzero.train.judging import Judge, VerdictCache

    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    pc = PromptConfig(backend=cfg.backend, style=cfg.prompt_style)
    prompts = [build_prompt(t, pc) for t in tasks]
    teacher = load_backend(cfg.teacher)
    # A deterministic teacher (the compiler) gives k identical samples: ask for one.
    k = 1 if getattr(teacher, "deterministic", False) else cfg.k
    outs = teacher.generate(prompts, k, SamplingConfig(
        temperature=cfg.temperature, max_new_tokens=cfg.max_new_tokens, seed=cfg.seed))
    judge = Judge(evaluator, VerdictCache(out.with_suffix(".verdicts.jsonl")))
    pairs, where, skipped = _samples_with_code(tasks, outs)
    verdicts = _judge_in_chunks(judge, pairs, cfg, progress)
    kept: dict[int, list[tuple[int, str, object]]] = {}
    for (ti, s, c), v in zip(where, verdicts):
        if v.correct:
            kept.setdefault(ti, []).append((s, c, v))
    rows = _rows(cfg, tasks, prompts, kept)
    tmp = out.with_suffix(out.suffix + ".tmp")
    tmp.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    tmp.replace(out)
    return {"tasks": len(tasks), "samples": len(pairs) + sum(skipped.values()), "judged": len(verdicts),
            "correct": sum(v.correct for v in verdicts), "kept": len(rows), "tasks_kept": len(kept),
            "skipped": sum(skipped.values()), "skipped_reasons": dict(skipped.most_common()),
            "unjudged": len(pairs) - len(verdicts),
            "verdicts": dict(Counter(v.status for v in verdicts)), "k": k, "out": str(out)}


def _samples_with_code(tasks: list[Task], outs: list[list[str]]):
    """The (task, candidate) pairs to judge, where each came from (task index, sample index,
    completion), and the samples with no code, counted by the first line of what the teacher
    said."""
    from kernelzero.coder.extract import to_candidate

    pairs, where = [], []
    skipped: Counter = Counter()
    for ti, (t, cs) in enumerate(zip(tasks, outs)):
        for s, c in enumerate(cs):
            cand = to_candidate(c)
            if not cand.source:
                skipped[_first_line(c)] += 1
                continue
            pairs.append((t, cand))
            where.append((ti, s, c))
    return pairs, where, skipped


def _judge_in_chunks(judge, pairs: list, cfg: DistillConfig, progress: bool) -> list:
    """The pairs' verdicts, judged in chunks, each cached as soon as it is done: a long
    distillation shows its progress and a killed one resumes where it stopped. A time limit ends
    it between chunks (the verdicts then cover a prefix of `pairs`)."""
    from tqdm.auto import tqdm

    verdicts = []
    chunks = range(0, len(pairs), JUDGE_CHUNK)
    deadline = None if cfg.time_limit_s is None else _now() + cfg.time_limit_s
    with tqdm(total=len(pairs), desc="distill: judging", unit="kernel", disable=not progress) as bar:
        for start in chunks:
            if deadline is not None and _now() > deadline:
                break
            chunk = pairs[start:start + JUDGE_CHUNK]
            verdicts += judge.judge(chunk, context={"phase": "distill", "teacher": cfg.teacher})
            bar.update(len(chunk))
    return verdicts


def _rows(cfg: DistillConfig, tasks: list[Task], prompts: list, kept: dict) -> list[dict]:
    """The SFT rows of the kept samples (all, or each task's fastest), task by task."""
    rows = []
    for ti, items in sorted(kept.items()):
        if cfg.fastest_only:
            items = [max(items, key=lambda it: (it[2].speedup is not None, it[2].speedup or 0.0, -it[0]))]
        t = tasks[ti]
        for s, c, v in items:
            rows.append({
                "prompt": [{"role": m["role"], "content": m["content"]} for m in prompts[ti]],
                "completion": [{"role": "assistant", "content": c}],
                "task": t.key, "task_hash": t.hash, "teacher": cfg.teacher, "sample": s,
                "verdict": {"status": v.status, "speedup": v.speedup, "speedup_compile": v.speedup_compile,
                            "candidate_hash": v.candidate_hash, "device": v.device, "policy": v.policy,
                            "trials_passed": v.trials_passed}})
    return rows


def _first_line(completion: str) -> str:
    """Why a sample holds no code, in one line (the compiler teacher's refusal is its text)."""
    from kernelzero.models.compiler import REFUSAL_PREFIX

    line = (completion or "").strip().splitlines()[0] if (completion or "").strip() else "empty completion"
    return line.removeprefix(REFUSAL_PREFIX)[:160]
