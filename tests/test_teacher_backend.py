"""The teacher as a model backend (`compiler`) and as distill's teacher."""
from __future__ import annotations

import json

import pytest

from kernelzero.coder.extract import extract_code
from kernelzero.coder.prompts import PromptConfig, build_prompt
from kernelzero.models import BackendSpecError, SamplingConfig, load_backend
from kernelzero.models.compiler import REFUSAL_PREFIX, find_module
from kernelzero.tasks import Task

GOOD = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.sigmoid(x) * 1.75


def get_inputs():
    return [torch.randn(6, 129)]


def get_init_inputs():
    return []
'''
BAD = GOOD.replace("torch.sigmoid(x) * 1.75", "torch.cumsum(x, dim=1)")


@pytest.mark.parametrize("style,example", [("kernelbench", True), ("principles", True), ("kernelbench", False)])
def test_the_module_is_found_in_every_coder_prompt_style(style, example):
    prompt = build_prompt(Task.from_source(GOOD, "t"), PromptConfig(style=style, example=example))
    assert find_module(prompt).strip() == GOOD.strip()  # not the worked example's module


def test_compact_prompts_and_repair_turns():
    compact = [{"role": "user", "content": f"```python\n{GOOD}```"}]
    assert find_module(compact).strip() == GOOD.strip()
    bare = [{"role": "user", "content": GOOD}]
    assert find_module(bare).strip() == GOOD.strip()
    repair = compact + [{"role": "assistant", "content": f"```python\n{BAD}```"},
                        {"role": "user", "content": "Your kernel failed: fix it."}]
    assert find_module(repair).strip() == GOOD.strip()
    assert find_module([{"role": "user", "content": "write a kernel"}]) is None


def test_backend_answers_with_a_kernel_or_a_one_line_refusal():
    backend = load_backend("compiler")
    assert load_backend("compiler:triton").spec == "compiler:triton" and backend.deterministic
    prompts = [build_prompt(Task.from_source(s, n)) for s, n in ((GOOD, "good"), (BAD, "bad"))]
    good, bad = backend.generate(prompts, 3, SamplingConfig())
    assert len(good) == 3 and len(set(good)) == 1
    assert "class ModelNew" in extract_code(good[0])
    assert bad[0].startswith(REFUSAL_PREFIX) and "unsupported: torch.cumsum" in bad[0]
    assert extract_code(bad[0]) is None and "\n" not in bad[0]
    assert backend.refusals == {"unsupported: torch.cumsum": 1}  # one per prompt
    with pytest.raises(BackendSpecError):
        load_backend("compiler:cuda")


def test_distill_with_the_compiler_judges_each_task_once(tmp_path, capsys):
    from kernelzero.cli import main

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    (tasks / "1_Good.py").write_text(GOOD)
    (tasks / "2_Bad.py").write_text(BAD)
    (tasks / "3_Good2.py").write_text(GOOD.replace("1.75", "-0.4"))
    out = tmp_path / "data.jsonl"
    assert main(["distill", "--teacher", "compiler", "--tasks", str(tasks), "-k", "4",
                 "--out", str(out), "--json"]) == 0
    counts = json.loads(capsys.readouterr().out)
    assert counts["k"] == 1 and counts["judged"] == 2 and counts["kept"] == 2 and counts["correct"] == 2
    assert counts["skipped"] == 1 and counts["skipped_reasons"] == {"unsupported: torch.cumsum": 1}
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert sorted(r["task"] for r in rows) == ["Good", "Good2"]
    assert all(r["verdict"]["status"] == "correct" and r["teacher"] == "compiler" for r in rows)
    assert "-0.4" in next(r for r in rows if r["task"] == "Good2")["completion"][0]["content"]


def test_distill_time_limit_writes_what_was_judged_and_a_rerun_resumes(tmp_path, capsys, monkeypatch):
    from kernelzero.cli import main
    from kernelzero.train import distill

    tasks = tmp_path / "tasks"
    tasks.mkdir()
    for i, c in enumerate(("1.75", "-0.4", "2.5")):
        (tasks / f"{i + 1}_Good{i}.py").write_text(GOOD.replace("1.75", c))
    out = tmp_path / "data.jsonl"
    monkeypatch.setattr(distill, "JUDGE_CHUNK", 1)  # one kernel a chunk: the limit falls between
    args = ["distill", "--teacher", "compiler", "--tasks", str(tasks), "--out", str(out), "--json"]
    clock = iter([0.0, 0.5, 100.0])  # the deadline is set; one chunk runs, then time is up
    monkeypatch.setattr(distill, "_now", lambda: next(clock))
    assert main(args + ["--time-limit", "10"]) == 0
    first = json.loads(capsys.readouterr().out)
    assert first["judged"] == 1 and first["unjudged"] == 2 and first["kept"] == 1
    assert len(out.read_text().splitlines()) == 1
    monkeypatch.undo()
    monkeypatch.setattr(distill, "JUDGE_CHUNK", 1)
    assert main(args) == 0
    second = json.loads(capsys.readouterr().out)
    assert second["judged"] == 3 and second["unjudged"] == 0 and second["kept"] == 3
    assert main(args + ["--time-limit", "0"]) == 2  # a usage error, not a traceback
