"""The tiny offline model and the `hf:` backend driving it (CPU)."""
from __future__ import annotations

import hashlib
import time

import pytest

from _coder_solutions import one_torch_thread
from kernelzero.models import SamplingConfig, load_backend
from kernelzero.models.tiny import build_tiny_model


one_thread = pytest.fixture(autouse=True)(one_torch_thread)


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    return build_tiny_model(tmp_path_factory.mktemp("tiny"))


def _digest(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_tiny_model_is_fast_deterministic_and_small(tiny, tmp_path):
    t0 = time.process_time()  # CPU time: not inflated by other jobs on a shared machine
    again = build_tiny_model(tmp_path / "again")
    assert time.process_time() - t0 < 20
    assert _digest(again) == _digest(tiny)
    other_seed = build_tiny_model(tmp_path / "seed1", seed=1)
    assert _digest(other_seed)["model.safetensors"] != _digest(tiny)["model.safetensors"]
    assert _digest(other_seed)["tokenizer.json"] == _digest(tiny)["tokenizer.json"]

    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(tiny)
    assert 0.5e6 <= sum(p.numel() for p in model.parameters()) <= 5e6
    tok = AutoTokenizer.from_pretrained(tiny)
    text = tok.apply_chat_template([{"role": "user", "content": "hi"}],
                                   add_generation_prompt=True, tokenize=False)
    assert text == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    code = "import triton\n@triton.jit\ndef k(x_ptr):\n    pass\n"
    assert tok.decode(tok(code).input_ids) == code


def test_tiny_model_rejects_bad_sizes(tmp_path):
    with pytest.raises(ValueError, match="vocab_size"):
        build_tiny_model(tmp_path, vocab_size=100)


def _chat(text):
    return [{"role": "system", "content": "You write kernels."},
            {"role": "user", "content": text, "meta": {"task": "x"}}]


def test_hf_backend_batched_sampling(tiny):
    backend = load_backend(f"hf:{tiny}", device="cpu", max_batch_rows=4)  # forces 2 batches
    prompts = [_chat("relu"), _chat("a much longer prompt about softmax kernels"), _chat("sum")]
    sampling = SamplingConfig(max_new_tokens=12, temperature=1.0, seed=3)
    out = backend.generate(prompts, 2, sampling)
    assert [len(o) for o in out] == [2, 2, 2]
    assert all(isinstance(c, str) and c for o in out for c in o)
    assert not any("<|im_start|>" in c for o in out for c in o)  # only new text, no specials
    assert backend.generate(prompts, 2, sampling) == out          # same seed, same samples
    assert backend.generate(prompts, 2, SamplingConfig(max_new_tokens=12, temperature=1.0,
                                                       seed=4)) != out


def test_hf_backend_greedy_repeats_and_plain_join_without_template(tiny):
    backend = load_backend(f"hf:{tiny}", device="cpu")
    greedy = backend.generate([_chat("relu")], 3, SamplingConfig(max_new_tokens=6, temperature=0))
    assert len(set(greedy[0])) == 1 and len(greedy[0]) == 3
    assert backend.render(_chat("relu")).endswith("<|im_start|>assistant\n")
    backend.tokenizer.chat_template = None
    assert backend.render(_chat("relu")).endswith("user:\nrelu\n\nassistant:\n")
    assert len(backend.generate([_chat("relu")], 1, SamplingConfig(max_new_tokens=4))[0]) == 1
