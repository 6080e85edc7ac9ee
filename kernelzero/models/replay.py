"""`replay:PATH` — completions read from a record instead of a model.

Lets results produced elsewhere be judged with our evaluator, and lets the whole pipeline be
tested without a model. Two record formats:

- a JSONL file, one object per line: `{"task": KEY_OR_HASH, "completion": TEXT}`, optionally with
  `"sample": S` (its index; default: order of appearance for that task) and `"turn": T` (the
  repair turn it answers; default 1). `task` is a task key (`L1/19_ReLU`, or `L1/19` matching
  level and problem id) or the task's content hash (`kernelzero.tasks.source_hash`);
- a KernelBench run folder of `level_{L}_problem_{id}_sample_{s}_kernel.py` files (turn 1).

A prompt is matched to its task through the metadata the prompt builders attach (see
`kernelzero.models.base`); a prompt without metadata is matched by the content hash of any
```python block in it that holds a whole reference module. `generate` returns the recorded
completions `sample .. sample+n-1` of that task and turn (`sample` from the metadata, default 0):
fewer than `n`, or none, when the record holds fewer.
"""
from __future__ import annotations

import json
import re
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from kernelzero.models.base import BackendError, Prompt, SamplingConfig, check_request, prompt_meta
from kernelzero.tasks import find_samples, source_hash

_KEY_RE = re.compile(r"^L(?P<level>\d+)/(?P<id>\d+)(?:_.*)?$")
_FENCE_RE = re.compile(r"```[a-zA-Z0-9_+-]*\n(.*?)```", re.S)


@dataclass
class _Entry:
    task: str
    turn: int
    sample: int | None
    order: int
    completion: str


class ReplayBackend:
    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        self.spec = f"replay:{path}"
        if self.path.is_dir():
            entries = self._from_run_folder(self.path)
        elif self.path.is_file():
            entries = self._from_jsonl(self.path)
        else:
            raise BackendError(f"replay: no JSONL file or run folder at {self.path}")
        self._by_task: dict[str, list[_Entry]] = defaultdict(list)
        for e in entries:
            self._by_task[e.task].append(e)
        self._by_level_id: dict[tuple[int, int], str] = {}
        for key in self._by_task:
            m = _KEY_RE.match(key)
            if m:
                self._by_level_id.setdefault((int(m["level"]), int(m["id"])), key)

    @staticmethod
    def _from_run_folder(path: Path) -> list[_Entry]:
        samples = find_samples(path)
        if not samples:
            raise BackendError(f"replay: {path} holds no level_L_problem_ID_sample_S_kernel.py "
                               "files")
        return [_Entry(f"L{lvl}/{pid}", 1, s, i, p.read_text(encoding="utf-8", errors="replace"))
                for i, (lvl, pid, s, p) in enumerate(samples)]

    @staticmethod
    def _from_jsonl(path: Path) -> list[_Entry]:
        entries = []
        for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                task, completion = d["task"], d["completion"]
                if not isinstance(task, str) or not isinstance(completion, str):
                    raise TypeError("`task` and `completion` must be strings")
                sample = d.get("sample")
                entries.append(_Entry(task, int(d.get("turn", 1)),
                                      None if sample is None else int(sample), lineno, completion))
            except (ValueError, KeyError, TypeError) as e:
                raise BackendError(f"replay: {path}:{lineno}: expected "
                                   '{"task": KEY_OR_HASH, "completion": TEXT}: '
                                   f"{type(e).__name__}: {e}") from None
        if not entries:
            raise BackendError(f"replay: {path} holds no completions")
        return entries

    def task_keys(self) -> list[str]:
        """The task identifiers the record holds completions for."""
        return list(self._by_task)

    def _match(self, prompt: Prompt) -> str | None:
        meta = prompt_meta(prompt)
        for ident in (meta.get("task"), meta.get("task_hash")):
            if ident in self._by_task:
                return ident
        if meta.get("level") is not None and meta.get("problem_id") is not None:
            key = self._by_level_id.get((int(meta["level"]), int(meta["problem_id"])))
            if key:
                return key
        if not meta:  # a prompt from elsewhere: hash every reference module quoted in it
            for m in prompt:
                for block in _FENCE_RE.findall(m["content"]):
                    h = source_hash(block)
                    if "class Model(" in block and h in self._by_task:
                        return h
        return None

    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingConfig) -> list[list[str]]:
        check_request(prompts, n)
        out = []
        for prompt in prompts:
            key = self._match(prompt)
            if key is None:
                out.append([])
                continue
            meta = prompt_meta(prompt)
            turn, first = int(meta.get("turn", 1)), int(meta.get("sample", 0))
            entries = sorted((e for e in self._by_task[key] if e.turn == turn),
                             key=lambda e: e.order)
            by_index: dict[int, str] = {}
            for pos, e in enumerate(entries):
                by_index.setdefault(pos if e.sample is None else e.sample, e.completion)
            picked = [by_index[s] for s in range(first, first + n) if s in by_index]
            out.append(picked)
        return out
