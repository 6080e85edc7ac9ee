"""The LLM proposer: prompt content, robust parsing, any backend with `generate` plugs in."""
from __future__ import annotations

import random

import pytest

from kernelzero.catalog.cooccurrence import load_default
from kernelzero.eval import EvalConfig, Evaluator
from kernelzero.propose.composer import ComposeConfig, Composer
from kernelzero.propose.llm import LLMProposer, LLMProposerConfig, ParseError, parse_module, weakness_summary
from kernelzero.propose.pipeline import ProposeConfig, llm_candidates, propose_modules

MODULE = '''import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(4, 4)]

def get_init_inputs():
    return []'''


@pytest.mark.parametrize("answer", [
    f"Here you go:\n```python\n{MODULE}\n```\nThis module applies ReLU.",
    f"<think>maybe ```python\nclass Model: pass\n``` no</think>\n```\n{MODULE}\n```",
    f"{MODULE}\n\nExplanation: it is a ReLU.",
    "Sure!\n```python\n" + MODULE.split("def get_inputs")[0] + "```\nand\n```python\ndef get_inputs"
    + MODULE.split("def get_inputs")[1] + "\n```",
    f"```python\n{MODULE}",  # unterminated fence
    # read as the Coder's completions are (kernelzero.models.completion): chat tokens, tilde
    # fences, a reasoning block the model never closed
    f"<|im_start|>assistant\n~~~python\n{MODULE}\n~~~<|im_end|>",
    f"<think>a ReLU module will do\n```python\n{MODULE}\n```<|eot_id|>",
])
def test_parse_module_variants(answer):
    src = parse_module(answer)
    assert "class Model" in src and "def get_init_inputs" in src
    compile(src, "m", "exec")


@pytest.mark.parametrize("answer", ["", "I cannot do that.", "```python\nclass Model(:\n```"])
def test_parse_failures(answer):
    with pytest.raises(ParseError):
        parse_module(answer)


class OracleBackend:
    """Answers each prompt with a composed module for the prompt's API set, wrapped in prose."""

    def __init__(self):
        self.prompts, self.calls = [], 0

    def generate(self, prompts, n, sampling):
        self.calls += 1
        out = []
        for p in prompts:
            self.prompts.append(p)
            apis = p[-1]["meta"]["apis"]
            try:
                src = Composer(ComposeConfig(target="cpu")).compose(apis, random.Random(len(self.prompts))).source
                out.append([f"Sure.\n```python\n{src}```\nDone."] * n)
            except ValueError:
                out.append(["I cannot."] * n)
        return out


def test_prompt_has_apis_descriptions_examples_and_weaknesses():
    llm = LLMProposer(OracleBackend(), LLMProposerConfig(target="cpu"), sampling=object())
    weak = weakness_summary([(["conv2d", "relu"], 0.0), (["softmax"], 1.0), (["conv2d"], 0.5)])
    lines = weak.splitlines()
    assert lines[0].startswith("- torch.relu: solved 0%") and lines[1].startswith("- nn.Conv2d: solved 25%")
    assert lines[2].startswith("- torch.softmax: solved 100%")
    msgs = llm.build_prompt(["conv2d", "gelu"], weak)
    text = msgs[-1]["content"]
    assert "nn.Conv2d" in text and "F.gelu" in text and "Example 2" in text
    assert "struggles" in text and "65536" in text


def test_llm_path_end_to_end_through_validation():
    backend = OracleBackend()
    llm = LLMProposer(backend, LLMProposerConfig(target="cpu", n_examples=1), sampling=object())
    cfg = ProposeConfig(n=2, apis=2, seed=3, target="cpu", workers=2)
    with Evaluator(EvalConfig(device="cpu", max_workers=2)) as ev:
        rep = propose_modules(cfg, ev, llm_candidates(cfg, load_default(), llm, batch=4))
    assert len(rep.accepted) == 2 and all(a.origin == "llm" for a in rep.accepted)
    assert backend.calls >= 1 and all(p[-1]["meta"]["role"] == "proposer" for p in backend.prompts)
