"""`kernelzero generate` and the sample/judge/repair loop, driven by `replay:` through the CPU
evaluator (Triton interpreter) and by the tiny `hf:` model."""
from __future__ import annotations

import json

import pytest

from _coder_solutions import (EXAMPLES, PROSE, RELU_OK, RELU_WRONG, answer, one_torch_thread,
                              write_jsonl)
from kernelzero.cli import main
from kernelzero.coder.attempts import best_attempt
from kernelzero.models import load_backend
from kernelzero.tasks import Task

RELU = EXAMPLES / "level1" / "1_ReLU.py"
BROKEN = "```python\nimport torch\nclass ModelNew(torch.nn.Module)\n    pass\n```"


@pytest.fixture
def record(tmp_path):
    """Turn 1: wrong, prose, syntax error. Turn 2: samples 0 and 2 fixed, sample 1 still prose."""
    return write_jsonl(tmp_path / "relu.jsonl", [
        {"task": "L1/1_ReLU", "sample": 0, "completion": answer(RELU_WRONG, 0)},
        {"task": "L1/1_ReLU", "sample": 1, "completion": PROSE},
        {"task": "L1/1_ReLU", "sample": 2, "completion": BROKEN},
        {"task": "L1/1_ReLU", "sample": 0, "turn": 2, "completion": answer(RELU_OK, 1)},
        {"task": "L1/1_ReLU", "sample": 1, "turn": 2, "completion": PROSE + " Still no."},
        {"task": "L1/1_ReLU", "sample": 2, "turn": 2, "completion": answer(RELU_OK, 2)},
    ])


class Recording:
    """Wraps a backend and keeps every request."""

    def __init__(self, inner):
        self.inner, self.spec, self.calls = inner, inner.spec, []

    def generate(self, prompts, n, sampling):
        self.calls.append((prompts, n, sampling))
        return self.inner.generate(prompts, n, sampling)


def test_generate_repairs_writes_the_best_kernel_and_reports_json(record, tmp_path, capsys,
                                                                  monkeypatch):
    import kernelzero.models
    backends = []

    def recording_load_backend(spec, **kw):
        backends.append(Recording(load_backend(spec, **kw)))
        return backends[-1]

    monkeypatch.setattr(kernelzero.models, "load_backend", recording_load_backend)
    out = tmp_path / "relu_new.py"
    rc = main(["generate", str(RELU), "--model", f"replay:{record}", "-k", "3", "--turns", "3",
               "--device", "cpu", "--out", str(out), "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["best"] is not None, doc["attempts"]
    assert out.read_text() == RELU_OK
    assert doc["out"] == str(out) and doc["best"]["verdict"]["status"] == "correct"
    assert (doc["best"]["sample"], doc["best"]["turn"]) == (0, 2)  # earliest correct (untimed)
    # turn 3 is asked only for sample 1 (still failing); the record has no turn 3: it ends there
    assert sorted((a["sample"], a["turn"], a["status"]) for a in doc["attempts"]) == [
        (0, 1, "incorrect"), (0, 2, "correct"), (1, 1, "format_error"), (1, 2, "format_error"),
        (2, 1, "compile_error"), (2, 2, "correct")], doc["attempts"]
    calls = backends[0].calls
    assert [(len(p), n) for p, n, _ in calls] == [(1, 3), (3, 1), (1, 1)]
    turn2 = calls[1][0]
    assert [m["role"] for m in turn2[0]] == ["system", "user", "assistant", "user"]
    assert turn2[0][-2]["content"] == answer(RELU_WRONG, 0)
    assert "output is wrong" in turn2[0][-1]["content"]
    assert "could not be used" in turn2[1][-1]["content"]
    assert "failed to compile" in turn2[2][-1]["content"]
    assert "expected ':'" in turn2[2][-1]["content"]
    assert len(calls[2][0][0]) == 6  # full history kept
    assert calls[1][2].seed != calls[0][2].seed  # each turn samples afresh
    fmt = [a for a in doc["attempts"] if a["status"] == "format_error"]
    assert all(a["candidate_hash"] == "" for a in fmt)  # never reached the evaluator


def test_best_attempt_prefers_the_fastest_timed_kernel():
    from kernelzero.coder.attempts import Attempt
    from kernelzero.eval import Verdict
    task = Task.from_file(RELU)

    def att(sample, turn, status, speedup=None):
        return Attempt(task, sample, turn, "", "code", Verdict(status, "", speedup=speedup))

    assert best_attempt([att(0, 1, "incorrect")]) is None
    picks = [att(0, 1, "correct"), att(1, 1, "correct", 1.5), att(2, 2, "correct", 3.0),
             att(3, 1, "incorrect", 9.0)]
    assert best_attempt(picks).sample == 2
    assert best_attempt([att(4, 2, "correct"), att(5, 1, "correct")]).sample == 5


def test_generate_explains_when_nothing_is_correct(tmp_path, capsys):
    record = write_jsonl(tmp_path / "bad.jsonl", [
        {"task": "L1/1_ReLU", "completion": PROSE}, {"task": "L1/1_ReLU", "completion": BROKEN}])
    out = tmp_path / "none.py"
    rc = main(["generate", str(RELU), "--model", f"replay:{record}", "-k", "3", "--turns", "1",
               "--device", "cpu", "--out", str(out)])
    assert rc == 0 and not out.exists()
    text = capsys.readouterr().out
    assert "no correct kernel: 2 attempts over 1 turn(s)" in text
    assert "1 format_error" in text and "1 compile_error" in text
    assert "nothing was written" in text and "--turns" in text and "ModelNew" in text


one_thread = pytest.fixture(one_torch_thread)


def test_generate_with_the_tiny_hf_model(one_thread, tmp_path, capsys):
    from kernelzero.models.tiny import build_tiny_model
    tiny = build_tiny_model(tmp_path / "tiny")
    out = tmp_path / "x.py"
    rc = main(["generate", str(RELU), "--model", f"hf:{tiny}", "-k", "2", "--turns", "2",
               "--max-new-tokens", "16", "--no-example", "--device", "cpu", "--out", str(out),
               "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    # random weights write noise: every attempt is a format error, judged without running
    assert [a["status"] for a in doc["attempts"]] == ["format_error"] * 4
    assert doc["best"] is None and doc["out"] is None and not out.exists()


@pytest.mark.parametrize("argv,message", [
    (["generate", "missing.py", "--model", "replay:x"], "module missing.py: no such file"),
    (["generate", str(RELU), "--model", "nonsense"], "KIND:TARGET"),
    (["generate", str(RELU), "--model", "replay:/nonexistent.jsonl"], "no JSONL file"),
    (["generate", str(RELU), "--model", "replay:x", "-k", "0"], "-k and --turns"),
    (["generate", str(RELU), "--model", "replay:x", "--top-p", "2", "--device", "cpu"], "top_p"),
])
def test_generate_usage_errors(argv, message, capsys):
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_generate_module_that_is_not_a_reference(tmp_path, capsys):
    bad = tmp_path / "bad.py"
    bad.write_text("x = 1\n")
    assert main(["generate", str(bad), "--model", "replay:x"]) == 2
    assert "lacks `Model`" in capsys.readouterr().err


def test_backend_failure_mid_run_is_reported_not_a_traceback(monkeypatch, capsys, tmp_path):
    import kernelzero.models
    from kernelzero.models import BackendError

    class Down:
        spec = "openai:http://127.0.0.1:9/v1#m"

        def generate(self, prompts, n, sampling):
            raise BackendError("openai: failed after 5 attempts; last error: connection refused")

    monkeypatch.setattr(kernelzero.models, "load_backend", lambda spec, **kw: Down())
    monkeypatch.chdir(tmp_path)
    assert main(["generate", str(RELU), "--model", "openai:x#m", "--device", "cpu"]) == 1
    assert "the model backend failed: openai: failed after 5" in capsys.readouterr().err
    assert main(["bench", "--tasks", str(EXAMPLES), "--levels", "2", "--model", "openai:x#m",
                 "--device", "cpu", "--db", "r.db"]) == 1
    assert "run the same command again to resume" in capsys.readouterr().err
