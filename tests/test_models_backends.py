"""Backend specs, sampling settings, the vLLM import guard and the replay backend."""
from __future__ import annotations

import json
import sys

import pytest

from kernelzero.coder.prompts import build_prompt
from kernelzero.models import BackendError, BackendSpecError, SamplingConfig, load_backend
from kernelzero.models.base import chat_messages, plain_chat_text, prompt_meta
from kernelzero.tasks import Task, source_hash

REF = "import torch\nclass Model(torch.nn.Module):\n    pass\ndef get_inputs(): return []\n" \
      "def get_init_inputs(): return []\n"


def _task(level=1, pid=1, name="ReLU", source=REF):
    return Task(source=source, name=name, level=level, problem_id=pid)


@pytest.mark.parametrize("spec,match", [
    ("nothing", "KIND:TARGET"), ("hf:", "KIND:TARGET"), ("gguf:/x", "unknown model backend 'gguf'"),
])
def test_unknown_or_malformed_specs_say_what_is_known(spec, match):
    with pytest.raises(BackendSpecError, match=match) as info:
        load_backend(spec)
    assert "replay:PATH" in str(info.value)


def test_vllm_import_is_guarded_with_an_install_hint(monkeypatch):
    monkeypatch.setitem(sys.modules, "vllm", None)  # makes `import vllm` raise ImportError
    with pytest.raises(BackendError, match=r"pip install kernelzero\[vllm\]"):
        load_backend("vllm:/some/model")


def test_hf_missing_checkpoint_is_a_clear_error(tmp_path):
    with pytest.raises(BackendError, match="no checkpoint directory"):
        load_backend(f"hf:{tmp_path / 'nope'}")


@pytest.mark.parametrize("kw", [dict(temperature=-0.1), dict(top_p=0), dict(top_p=1.5),
                                dict(max_new_tokens=0), dict(max_new_tokens=2.5)])
def test_sampling_config_rejects_bad_values(kw):
    with pytest.raises(ValueError, match="SamplingConfig"):
        SamplingConfig(**kw)


def test_prompt_helpers_strip_metadata():
    prompt = build_prompt(_task())
    assert prompt_meta(prompt)["task"] == "L1/1_ReLU"
    assert all(set(m) == {"role", "content"} for m in chat_messages(prompt))
    text = plain_chat_text(prompt)
    assert text.startswith("system:\n") and text.endswith("assistant:\n")


def _write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_replay_jsonl_by_key_hash_and_level_id(tmp_path):
    other = _task(2, 7, "Other", REF + "# other\n")
    path = _write_jsonl(tmp_path / "c.jsonl", [
        {"task": "L1/1_ReLU", "completion": "a0"},
        {"task": "L1/1_ReLU", "completion": "a1"},
        {"task": source_hash(other.source), "completion": "b0"},
        {"task": "L1/1_ReLU", "completion": "a-turn2", "turn": 2, "sample": 1},
        {"task": "L3/5", "completion": "c0"},
    ])
    backend = load_backend(f"replay:{path}")
    third = _task(3, 5, "Conv")
    out = backend.generate([build_prompt(_task()), build_prompt(other), build_prompt(third),
                            build_prompt(_task(9, 9, "Unknown"))], 3, SamplingConfig())
    assert out == [["a0", "a1"], ["b0"], ["c0"], []]
    # continuing an interrupted run: samples from index 1 on
    assert backend.generate([build_prompt(_task(), sample=1)], 5, SamplingConfig()) == [["a1"]]
    # a repair turn asks for the recorded answer of that turn and sample
    turn2 = build_prompt(_task())
    turn2[-1]["meta"].update(turn=2, sample=1)
    assert backend.generate([turn2], 1, SamplingConfig()) == [["a-turn2"]]


def test_replay_matches_a_prompt_without_metadata_by_reference_hash(tmp_path):
    path = _write_jsonl(tmp_path / "c.jsonl", [{"task": source_hash(REF), "completion": "x"}])
    prompt = [{"role": "user", "content": f"Rewrite this:\n```python\n{REF}```\n"}]
    assert load_backend(f"replay:{path}").generate([prompt], 1, SamplingConfig()) == [["x"]]


def test_replay_kernelbench_run_folder(tmp_path):
    (tmp_path / "level_1_problem_1_sample_1_kernel.py").write_text("second")
    (tmp_path / "level_1_problem_1_sample_0_kernel.py").write_text("first")
    (tmp_path / "level_2_problem_3_sample_0_kernel.py").write_text("other")
    (tmp_path / "notes.py").write_text("ignored")
    backend = load_backend(f"replay:{tmp_path}")
    out = backend.generate([build_prompt(_task(1, 1)), build_prompt(_task(2, 3, "X"))], 2,
                           SamplingConfig())
    assert out == [["first", "second"], ["other"]]


@pytest.mark.parametrize("content,match", [
    ('{"task": "L1/1"}\n', "completion"), ("not json\n", "JSONDecodeError"),
    ("\n", "no completions"),
    ('{"task": 3, "completion": "x"}\n', "must be strings"),
])
def test_replay_bad_records(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(BackendError, match=match):
        load_backend(f"replay:{path}")


def test_replay_empty_folder_and_missing_path(tmp_path):
    with pytest.raises(BackendError, match="holds no level_L_problem"):
        load_backend(f"replay:{tmp_path}")
    with pytest.raises(BackendError, match="no JSONL file or run folder"):
        load_backend(f"replay:{tmp_path / 'missing.jsonl'}")
