"""Prompts, code extraction and repair messages (pure text, nothing is run)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kernelzero.coder.extract import extract_code, format_error_reason, format_error_verdict
from kernelzero.coder.prompts import GPUFacts, PromptConfig, build_prompt
from kernelzero.coder.repair import (RepairConfig, feedback_message, needs_another_turn,
                                     repair_prompt)
from kernelzero.eval import Timing, Verdict
from kernelzero.tasks import Task

TASK = Task.from_file(Path(__file__).parents[1] / "kernelzero/examples/tasks/level1/1_ReLU.py")
CODE = ("import torch\nimport torch.nn as nn\n\n\nclass ModelNew(nn.Module):\n"
        "    def forward(self, x):\n        return x\n")
FENCE = "```"


# ---- prompts ----------------------------------------------------------------------------------

@pytest.mark.parametrize("backend,marker", [("cuda", "load_inline"), ("triton", "@triton.jit")])
def test_prompt_holds_reference_example_and_naming_rule(backend, marker):
    chat = build_prompt(TASK, PromptConfig(backend=backend))
    assert [m["role"] for m in chat] == ["system", "user"]
    user = chat[1]["content"]
    assert TASK.source.strip() in user
    assert marker in user and "Name your optimized architecture" in user and "ModelNew" in user
    assert "Tiling" not in user and "Target GPU" not in user
    # every code block in the prompt parses: the worked example is real code
    from kernelzero.models.completion import code_blocks
    blocks = code_blocks(user)
    assert len(blocks) == 3 and all(ast.parse(b) for b in blocks)
    assert chat[1]["meta"] == {"task": "L1/1_ReLU", "task_hash": TASK.hash, "level": 1,
                               "problem_id": 1, "sample": 0, "turn": 1}


def test_cold_start_variant_states_principles_and_gpu_facts():
    gpu = GPUFacts("NVIDIA H200", memory_bandwidth_gbs=4800, sm_count=132)
    config = PromptConfig(style="principles", gpu=gpu, example=False)
    user = build_prompt(TASK, config)[1]["content"]
    for word in ("Tiling", "Fusion", "Vectorised", "Reductions"):
        assert word in user
    assert "NVIDIA H200, 132 streaming multiprocessors, about 4,800 GB/s" in user
    assert "Here is an example" not in user


def test_prompt_config_validates():
    with pytest.raises(ValueError, match="backend"):
        PromptConfig(backend="hip")
    with pytest.raises(ValueError, match="style"):
        PromptConfig(style="fancy")


# ---- extraction -------------------------------------------------------------------------------

@pytest.mark.parametrize("completion", [
    f"{FENCE}python\n{CODE}{FENCE}",
    f"Here is my kernel:\n\n{FENCE}python\n{CODE}{FENCE}\n\nIt is fast because it fuses.",
    f"<think>Let me try {FENCE}python\nclass ModelNew: draft\n{FENCE}</think>\n"
    f"{FENCE}python\n{CODE}{FENCE}",
    f"<think>reasoning that never ends... then\n{FENCE}python\n{CODE}",  # unclosed, no end fence
    f"{FENCE}python\nimport torch\n{FENCE}\nand then\n{FENCE}py\n{CODE}{FENCE}\n"
    f"{FENCE}bash\nls\n{FENCE}",
    f"{FENCE}\n{CODE}{FENCE}",                                             # no language tag
    f"{FENCE}python\n{CODE}{FENCE}<|im_end|><|endoftext|>",
    f"<|im_start|>assistant\n{FENCE}python\n{CODE}{FENCE}<|eot_id|>",
    f"Sure! Here is the code:\n\n{CODE}\nThis replaces the ReLU with a kernel.",  # no fence
    CODE,
    f"{FENCE}python\nclass ModelNew(nn.Module):\n    def forward(self, x)\n{FENCE}\nFixed:\n"
    f"{FENCE}python\n{CODE}{FENCE}\n{FENCE}python\nclass ModelNew(\n{FENCE}",  # last that parses
])
def test_extract_finds_the_modelnew_code(completion):
    assert extract_code(completion) == CODE


def test_extract_prefers_the_answer_over_a_draft_in_the_reasoning():
    draft = CODE.replace("return x", "return -x")
    text = f"<think>{FENCE}python\n{draft}{FENCE}</think>Final:\n{FENCE}python\n{CODE}{FENCE}"
    assert extract_code(text) == CODE
    # ...but uses the reasoning's code when the answer has none
    assert extract_code(f"<think>{FENCE}python\n{draft}{FENCE}</think>Done.") == draft


def test_extract_keeps_a_block_that_does_not_parse_when_it_is_all_there_is():
    broken = "class ModelNew(nn.Module)\n    pass\n"
    assert extract_code(f"{FENCE}python\n{broken}{FENCE}") == broken  # -> compile_error later


@pytest.mark.parametrize("completion,reason", [
    ("", "empty"), ("   \n", "empty"),
    ("<think>just thinking</think><|im_end|>", "only reasoning"),
    (f"{FENCE}python\nimport torch\nprint(1)\n{FENCE}", "no code block defines"),
    ("I cannot help with that.", "no code block and no"),
    ("ĠModelNew Ġclass garbage tokens", "no code block and no"),
])
def test_extract_returns_none_when_nothing_usable(completion, reason):
    assert extract_code(completion) is None
    assert reason in format_error_reason(completion)
    v = format_error_verdict(completion, task_hash="abc")
    assert v.status == "format_error" and not v.correct and v.task_hash == "abc"
    assert v.trials_run == 0 and v.runtime_ms is None


# ---- repair -----------------------------------------------------------------------------------

def _v(status, **kw):
    return Verdict(status=status, reason=kw.pop("reason", f"{status} reason"), **kw)


def test_feedback_for_each_failure_quotes_the_evidence():
    msg = feedback_message(_v("compile_error", reason="triton failed",
                              log_tail="x" * 5000 + "\nerror: undefined name 'tl2'"),
                           RepairConfig(max_log_chars=100))
    assert "failed to compile: triton failed" in msg and "undefined name 'tl2'" in msg
    assert len(msg) < 600
    msg = feedback_message(_v("incorrect", reason="output 0 differs", trials_run=5,
                              trials_passed=2, max_abs_err=0.5, max_rel_err=1.25))
    assert "2 of 5 trials" in msg and "max absolute error 0.5" in msg and "1.25" in msg
    assert "runtime_error reason" in feedback_message(_v("runtime_error"))
    assert "did not finish in time" in feedback_message(_v("timeout"))
    assert "could not be used" in feedback_message(_v("format_error"))
    assert "rejected" in feedback_message(_v("rejected"))


def test_feedback_for_correct_kernels_reports_timings():
    t = Timing(median_ms=0.5, iqr_ms=0.01, mean_ms=0.5, min_ms=0.49, n=50)
    ref = Timing(median_ms=1.0, iqr_ms=0.02, mean_ms=1.0, min_ms=0.98, n=50)
    msg = feedback_message(_v("correct", runtime_ms=t, ref_runtime_ms=ref, speedup=2.0,
                              speedup_compile=1.5))
    assert "0.5 ms" in msg and "1 ms" in msg and "2x" in msg and "1.5x" in msg
    assert "Make it faster" in msg
    assert needs_another_turn(_v("correct", runtime_ms=t))
    assert not needs_another_turn(_v("correct"))          # CPU: correct and untimed is final
    assert needs_another_turn(_v("incorrect")) and not needs_another_turn(_v("invalid_task"))


@pytest.mark.parametrize("keep", [True, False])
def test_repair_prompt_appends_answer_and_feedback(keep):
    chat = build_prompt(TASK)
    chat2 = repair_prompt(chat, "answer 1", _v("incorrect"), TASK, sample=3, turn=2,
                          config=RepairConfig(keep_history=keep))
    assert [m["role"] for m in chat2] == ["system", "user", "assistant", "user"]
    chat3 = repair_prompt(chat2, "answer 2", _v("compile_error"), TASK, sample=3, turn=3,
                          config=RepairConfig(keep_history=keep))
    roles = [m["role"] for m in chat3]
    assert roles == (["system", "user", "assistant", "user", "assistant", "user"] if keep
                     else ["system", "user", "assistant", "user"])
    assert chat3[-2]["content"] == "answer 2"
    assert [m for m in chat3 if "meta" in m] == [chat3[-1]]
    assert chat3[-1]["meta"]["turn"] == 3 and chat3[-1]["meta"]["sample"] == 3
    assert "meta" in chat[1]  # the caller's chat is not modified
