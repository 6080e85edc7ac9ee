"""Cold start: `kernelzero distill` keeps only verified-correct kernels (replay teacher, CPU
evaluator), and `kernelzero sft` fine-tunes a tiny model on them with the loss on the completion."""
import json
import shutil
from pathlib import Path

import pytest
import torch

from kernelzero.cli import main

EXAMPLES = Path(__file__).resolve().parent.parent / "kernelzero" / "examples"


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    from kernelzero.models.tiny import build_tiny_model
    return build_tiny_model(tmp_path_factory.mktemp("m") / "tiny", hidden_size=64, num_layers=2)


@pytest.fixture(scope="module")
def distilled(tmp_path_factory):
    d = tmp_path_factory.mktemp("distill")
    (d / "tasks" / "level1").mkdir(parents=True)
    shutil.copy(EXAMPLES / "tasks" / "level1" / "1_ReLU.py", d / "tasks" / "level1")
    good = (EXAMPLES / "candidates" / "level_1_problem_1_sample_0_kernel.py").read_text()
    bad = (EXAMPLES / "candidates" / "level_1_problem_1_sample_1_kernel.py").read_text()
    with (d / "teacher.jsonl").open("w") as f:
        for text in (f"Here is the kernel.\n```python\n{bad}```", f"```python\n{good}```", "no code at all"):
            f.write(json.dumps({"task": "L1/1_ReLU", "completion": text}) + "\n")
    out = d / "data.jsonl"
    rc = main(["distill", "--teacher", f"replay:{d / 'teacher.jsonl'}", "--tasks", str(d / "tasks"),
               "-k", "3", "--out", str(out), "--device", "cpu", "--trials", "2", "--tolerance", "paper",
               "--json"])
    assert rc == 0
    return out


def test_distill_keeps_only_correct_with_provenance(distilled):
    rows = [json.loads(x) for x in distilled.read_text().splitlines()]
    assert len(rows) == 1
    row = rows[0]
    assert row["task"] == "L1/1_ReLU" and row["sample"] == 1 and row["teacher"].startswith("replay:")
    assert row["verdict"]["status"] == "correct"
    assert [m["role"] for m in row["prompt"]] == ["system", "user"]
    assert row["completion"][0]["role"] == "assistant" and "relu_kernel" in row["completion"][0]["content"]
    cached = distilled.with_suffix(".verdicts.jsonl").read_text().splitlines()
    # every sample with code judged once, verdicts kept beside the data; "no code at all" is
    # skipped before the evaluator (its verdict could only be format_error)
    assert len(cached) == 2


def _weights(path: Path) -> dict:
    from safetensors.torch import load_file
    return load_file(str(path / "model.safetensors"))


def test_sft_trains_on_the_completion_only(tiny, distilled, tmp_path):
    from kernelzero.train.sft import SFTRunConfig, build_sft_trainer

    trainer = build_sft_trainer(str(tiny), distilled, tmp_path / "x", SFTRunConfig(max_steps=1, max_length=4096))
    ex = trainer.train_dataset[0]
    n_prompt = sum(1 for lab in ex["labels"] if lab == -100)
    assert 0 < n_prompt < len(ex["input_ids"])
    assert all(lab == -100 for lab in ex["labels"][:n_prompt])  # the prompt carries no loss

    out = tmp_path / "ckpt"
    assert main(["sft", "--model", str(tiny), "--data", str(distilled), "--out", str(out),
                 "--max-steps", "2", "--lr", "1e-2", "--batch-size", "1", "--max-length", "4096"]) == 0
    before, after = _weights(tiny), _weights(out)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_sft_stops_at_its_time_limit_and_keeps_what_it_trained(tiny, distilled, tmp_path, capsys):
    out = tmp_path / "cut"
    assert main(["sft", "--model", str(tiny), "--data", str(distilled), "--out", str(out),
                 "--max-steps", "40", "--lr", "1e-2", "--batch-size", "1", "--max-length", "4096",
                 "--time-limit-s", "0.001", "--log-every", "1", "--json"]) == 0
    captured = capsys.readouterr()
    res = json.loads(captured.out.strip().splitlines()[-1])
    assert res["steps"] == 1 and res["planned_steps"] == 40 and res["stopped_by_time_limit"]
    assert "sft step 1/40" in captured.err  # progress on stderr, the JSON alone on stdout
    before, after = _weights(tiny), _weights(out)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_sft_lora_moves_only_the_adapter(tiny, distilled, tmp_path):
    from kernelzero.train.sft import SFTRunConfig, build_sft_trainer

    trainer = build_sft_trainer(str(tiny), distilled, tmp_path / "lora",
                                SFTRunConfig(max_steps=2, learning_rate=1e-2, batch_size=1, lora=True,
                                             lora_r=4, max_length=4096))
    params = dict(trainer.model.named_parameters())
    before = {n: p.detach().clone() for n, p in params.items()}
    trainer.train()
    moved = {n for n, p in params.items() if not torch.equal(before[n], p)}
    assert moved and all("lora_" in n for n in moved)


def test_sft_rejects_data_in_another_format(tiny, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "hello"}) + "\n")
    assert main(["sft", "--model", str(tiny), "--data", str(bad), "--out", str(tmp_path / "o")]) == 2


def test_right_padded_batches_train_without_a_mask_and_score_the_same():
    """sft.drop_right_padding_mask: a right-padded batch reaches the model without its mask (the
    causal fast path) with the same loss and gradients; a left-padded one keeps its mask."""
    from transformers import Qwen2Config, Qwen2ForCausalLM

    from kernelzero.train.sft import drop_right_padding_mask

    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    plain, hooked = Qwen2ForCausalLM(cfg), Qwen2ForCausalLM(cfg)
    hooked.load_state_dict(plain.state_dict())
    drop_right_padding_mask(hooked)
    masks = []
    hooked.model.register_forward_pre_hook(lambda m, a, k: masks.append(k.get("attention_mask")), with_kwargs=True)
    ids = torch.randint(3, 97, (3, 12))
    right = torch.tensor([[1] * 12, [1] * 7 + [0] * 5, [1] * 3 + [0] * 9])
    for mask in (right, right.flip(1)):  # right-padded, then left-padded
        labels = ids.masked_fill(mask == 0, -100)
        losses, grads = [], []
        for model in (plain, hooked):
            model.zero_grad()
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            loss.backward()
            losses.append(loss.detach())
            grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
        torch.testing.assert_close(losses[1], losses[0])
        torch.testing.assert_close(grads[1], grads[0], atol=1e-6, rtol=1e-4)
    assert masks[0] is None and masks[1] is not None
