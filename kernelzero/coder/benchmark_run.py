"""A benchmark run on disk: sample every task into a KernelBench run folder, judge into the store.

Layout of `runs/NAME/`:
- `run.json`: what the run is (model, kernel language, prompt style); a resume with another model
  or language is refused rather than mixed in;
- `samples/level_{L}_problem_{id}_sample_{s}_kernel.py` (KernelBench's run layout; tasks without a
  level and id use `{name}_sample_{s}_kernel.py`): the extracted code, or, when the completion had
  none, the completion commented out under `FORMAT_ERROR_MARKER`;
- `completions.jsonl`: every raw completion, `{"task", "task_hash", "sample", "turn",
  "completion"}` — a record `replay:` reads back.

Resuming, the rules: a sample whose file exists is never sampled again (files are written
atomically, one at a time, as each generate call returns); a verdict already in the store (same
task, candidate, sample index, device and environment, in any run) is never judged again, and each
verdict is saved the moment it is final. Not covered: metrics and report files (the `bench`
command passes `records()` to `kernelzero.metrics` and `kernelzero.report`).
"""
from __future__ import annotations

import json
import os
import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from kernelzero.coder.extract import extract_code, format_error_reason
from kernelzero.coder.prompts import PromptConfig, build_prompt
from kernelzero.eval import Verdict
from kernelzero.models.base import Backend, SamplingConfig
from kernelzero.tasks import Candidate, Task

FORMAT_ERROR_MARKER = "# kernelzero: no usable code was found in this completion"


def safe_name(text: str) -> str:
    """`text` as one path component."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._") or "run"


def sample_filename(task: Task, sample: int) -> str:
    if task.level is not None and task.problem_id is not None:
        return f"level_{task.level}_problem_{task.problem_id}_sample_{sample}_kernel.py"
    return f"{safe_name(task.name)}_sample_{sample}_kernel.py"


def _atomic_write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)


def sample_file_text(completion: str) -> str:
    """What goes in a sample file: the code, or the commented completion under the marker."""
    code = extract_code(completion)
    if code is not None:
        return code
    body = "\n".join("# " + line for line in completion.splitlines())
    return f"{FORMAT_ERROR_MARKER}\n# reason: {format_error_reason(completion)}\n{body}\n"


def _contiguous(indices: list[int]) -> list[list[int]]:
    """[0, 1, 3] -> [[0, 1], [3]]."""
    runs: list[list[int]] = []
    for i in indices:
        if runs and runs[-1][-1] == i - 1:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs


@dataclass
class Judged:
    """One sample of one task and its verdict."""

    task: Task
    sample: int
    key: str
    verdict: Verdict


class BenchRun:
    """The files of one run; see the module docstring."""

    def __init__(self, run_dir: str | Path, name: str, tasks: list[Task], k: int) -> None:
        if k < 1:
            raise ValueError(f"k={k}: sample at least one completion per task")
        self.dir = Path(run_dir)
        self.name = name
        self.tasks = tasks
        self.k = k
        self.samples_dir = self.dir / "samples"

    # -- identity ---------------------------------------------------------------------------------
    def claim(self, model: str, language: str, style: str) -> None:
        """Create the run, or check that an existing one was made with the same settings."""
        manifest = {"run": self.name, "model": model, "language": language, "style": style}
        path = self.dir / "run.json"
        if path.exists():
            old = json.loads(path.read_text())
            diff = [f"{k}: {old.get(k)!r} there, {v!r} now" for k, v in manifest.items()
                    if old.get(k) != v]
            if diff:
                raise ValueError(f"run {self.name!r} in {self.dir} was started with other "
                                 f"settings ({'; '.join(diff)}); pick another --run name")
            return
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        _atomic_write(path, json.dumps(manifest, indent=1) + "\n")

    # -- sampling ---------------------------------------------------------------------------------
    def path(self, task: Task, sample: int) -> Path:
        return self.samples_dir / sample_filename(task, sample)

    def missing(self, task: Task) -> list[int]:
        return [s for s in range(self.k) if not self.path(task, s).exists()]

    def requests(self) -> list[tuple[Task, list[int]]]:
        """What is left to sample: (task, sample indices), each a contiguous range (a request
        asks for samples s .. s+n-1 of a task)."""
        return [(t, miss) for t in self.tasks for miss in _contiguous(self.missing(t))]

    def sample(self, backend: Backend, prompt: PromptConfig, sampling: SamplingConfig,
               batch_size: int = 8, on_batch: Callable[[int], None] | None = None) -> int:
        """Sample what is missing; returns the number of completions written. Requests for the
        same number of samples share generate calls of up to `batch_size` prompts; `on_batch(m)`
        is called after each call with its number of prompts."""
        self.samples_dir.mkdir(parents=True, exist_ok=True)
        todo: dict[int, list[tuple[Task, list[int]]]] = {}
        for t, miss in self.requests():
            todo.setdefault(len(miss), []).append((t, miss))
        written = 0
        for n, items in sorted(todo.items()):
            for start in range(0, len(items), batch_size):
                batch = items[start:start + batch_size]
                prompts = [build_prompt(t, prompt, sample=miss[0]) for t, miss in batch]
                outs = backend.generate(prompts, n, sampling)
                for (t, miss), completions in zip(batch, outs):
                    for s, text in zip(miss, completions):
                        _atomic_write(self.path(t, s), sample_file_text(text))
                        with open(self.dir / "completions.jsonl", "a", encoding="utf-8") as f:
                            f.write(json.dumps({"task": t.key, "task_hash": t.hash, "sample": s,
                                                "turn": 1, "completion": text}) + "\n")
                        written += 1
                if on_batch:
                    on_batch(len(batch))
        return written

    def short_tasks(self) -> dict[str, int]:
        """Tasks with fewer than k sample files: {task key: samples present}."""
        return {t.key: self.k - len(self.missing(t)) for t in self.tasks if self.missing(t)}

    # -- judging ----------------------------------------------------------------------------------
    def judge(self, pool, store, env_key: str,
              on_verdict: Callable[[Judged], None] | None = None) -> tuple[list[Judged], int]:
        """Verdicts for every sample file: from the store when there, else judged now (each saved
        as it is final). `pool` is any judging pool of `kernelzero.eval.pools` (the Evaluator, a
        RayPool): `judge_many` and its `config`. Returns (all judged samples, how many were
        judged now: format errors and evaluator runs)."""
        from kernelzero.store import verdict_key

        device = pool.config.device
        done: list[Judged] = []
        fresh = 0
        pending: dict[tuple[str, str], list[Judged]] = {}  # identical candidates judged once
        cands: dict[tuple[str, str], tuple[Task, Candidate]] = {}
        for t in self.tasks:
            for s in range(self.k):
                path = self.path(t, s)
                if not path.exists():
                    continue
                source = path.read_text(encoding="utf-8", errors="replace")
                cand = Candidate(source, name=path.stem, sample_id=s, path=path)
                key = verdict_key(t.hash, f"{cand.hash}/sample{s}", device, env_key)
                old = store.get(key, run=self.name) or store.get(key)
                if old is not None:
                    j = Judged(t, s, key, old)
                    self._save(store, j)
                    done.append(j)
                    continue
                if source.startswith(FORMAT_ERROR_MARKER):
                    reason = source.split("\n", 2)[1].removeprefix("# reason: ")
                    v = Verdict(status="format_error", reason=reason, device=device,
                                policy=pool.config.policy, task_hash=t.hash,
                                candidate_hash=cand.hash)
                    j = Judged(t, s, key, v)
                    self._save(store, j)
                    done.append(j)
                    fresh += 1
                    if on_verdict:
                        on_verdict(j)
                    continue
                pending.setdefault((t.hash, cand.hash), []).append(Judged(t, s, key, None))
                cands[(t.hash, cand.hash)] = (t, cand)
        order = list(pending)

        def finished(i: int, v: Verdict) -> None:
            for j in pending[order[i]]:
                j.verdict = v
                self._save(store, j)
                if on_verdict:
                    on_verdict(j)

        if order:
            pool.judge_many([cands[o] for o in order], on_verdict=finished)
        for js in pending.values():
            done.extend(js)
        position = {id(t): i for i, t in enumerate(self.tasks)}
        done.sort(key=lambda j: (position[id(j.task)], j.sample))
        return done, fresh + sum(len(js) for js in pending.values())

    def pending_count(self, store, device: str, env_key: str) -> int:
        """Sample files without a stored verdict (for a progress bar's total)."""
        from kernelzero.store import verdict_key

        n = 0
        for t in self.tasks:
            for s in range(self.k):
                path = self.path(t, s)
                if path.exists():
                    cand_hash = Candidate(path.read_text(encoding="utf-8", errors="replace")).hash
                    key = verdict_key(t.hash, f"{cand_hash}/sample{s}", device, env_key)
                    n += (store.get(key, run=self.name) or store.get(key)) is None
        return n

    def _save(self, store, j: Judged) -> None:
        store.put(j.key, j.verdict, run=self.name, task_key=j.task.key, sample_id=j.sample,
                  level=j.task.level, problem_id=j.task.problem_id)


def records(judged: list[Judged]) -> tuple[list[dict], list[str]]:
    """(`kernelzero.metrics.summarize` records, keys of tasks left out because the reference
    itself is broken: an `invalid_task` verdict is not the model's failure)."""
    invalid = sorted({j.task.key for j in judged if j.verdict.status == "invalid_task"})
    out = [{"task": j.task.key, "correct": j.verdict.correct, "speedup": j.verdict.speedup,
            "speedup_compile": j.verdict.speedup_compile, "status": j.verdict.status,
            "level": j.task.level, "problem_id": j.task.problem_id, "sample_id": j.sample}
           for j in judged if j.task.key not in invalid]
    return out, invalid
