"""The copy-weighted completion loss (kernelzero/train/copy_loss.py): which tokens it weighs, that
at weight 1 it is the model's own loss, and that `kernelzero sft --copy-weight` trains with it."""
import json

import pytest
import torch

from kernelzero.models.shipped import shipped_model
from kernelzero.train.copy_loss import copy_weights, number_token_ids, weighted_completion_loss

PROMPT = "class Model:\n    def __init__(self):\n        self.hi = 0.918\n"
COMPLETION = "x = tl.minimum(x, 0.918)\ntl.store(out_ptr + offs, x, BLOCK=1024)\n"


@pytest.fixture(scope="module")
def coder():
    from transformers import AutoModelForCausalLM, AutoTokenizer
    path = shipped_model("coder")
    return AutoTokenizer.from_pretrained(path), AutoModelForCausalLM.from_pretrained(path).eval()


def _batch(tok):
    p = tok(PROMPT, add_special_tokens=False)["input_ids"]
    c = tok(COMPLETION, add_special_tokens=False)["input_ids"]
    ids = torch.tensor([p + c])
    labels = torch.tensor([[-100] * len(p) + c])
    return ids, labels, len(p)


def test_only_the_copied_constants_are_weighed(coder):
    tok, _ = coder
    numbers = number_token_ids(tok)
    assert numbers[tok.convert_tokens_to_ids("9")] == 2 and numbers[tok.convert_tokens_to_ids("x")] == 0
    ids, labels, n_prompt = _batch(tok)
    w = copy_weights(ids, labels, numbers, 5.0)
    heavy = tok.decode(ids[0][w[0] == 5.0])
    assert heavy == "0.918", heavy  # the literal copied from the prompt; not 1024, not the prompt's
    assert (w[0, :n_prompt] == 1).all()
    assert torch.equal(copy_weights(ids, labels, numbers, 1.0), torch.ones_like(w))


def test_at_weight_one_it_is_the_models_own_loss(coder):
    tok, model = coder
    ids, labels, _ = _batch(tok)
    with torch.no_grad():
        out = model(input_ids=ids, labels=labels)
        ours = weighted_completion_loss(out.logits, labels, torch.ones(ids.shape))
        heavier = weighted_completion_loss(out.logits, labels,
                                           copy_weights(ids, labels, number_token_ids(tok), 5.0))
    assert float(ours) == pytest.approx(float(out.loss), rel=1e-5)
    assert float(heavier) != pytest.approx(float(ours), rel=1e-3)


def test_sft_trains_with_the_copy_weight(tmp_path, coder):
    from kernelzero.cli import main

    rows = [{"prompt": [{"role": "user", "content": PROMPT.replace("0.918", f"0.{i}1")}],
             "completion": [{"role": "assistant", "content": COMPLETION.replace("0.918", f"0.{i}1")}]}
            for i in range(4)]
    data = tmp_path / "rows.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "ckpt"
    assert main(["sft", "--model", str(shipped_model("coder")), "--data", str(data), "--out", str(out),
                 "--max-steps", "2", "--lr", "1e-3", "--batch-size", "2", "--copy-weight", "5",
                 "--json"]) == 0
    assert (out / "model.safetensors").exists()
    assert main(["sft", "--model", str(shipped_model("coder")), "--data", str(data), "--out",
                 str(tmp_path / "x"), "--copy-weight", "0"]) == 2
