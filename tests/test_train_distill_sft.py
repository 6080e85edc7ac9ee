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


def _family_rows(n: int) -> list[dict]:
    """n distillation rows of several lengths (so batches are padded), from the committed data."""
    from kernelzero.train.sft import load_rows
    rows = load_rows(Path(__file__).resolve().parent.parent / "data" / "family-train.jsonl.gz")[:400]
    rows.sort(key=lambda r: len(r["completion"][0]["content"]))
    return rows[:: max(1, len(rows) // n)][:n]


def test_sync_free_sft_trains_and_logs_as_trl_does(tiny, tmp_path):
    """build_sft_trainer (masks dropped in the collator, figures summed on the device) against TRL's
    own SFTTrainer on the same rows and seed: the same losses, weights and logged figures."""
    from trl import SFTTrainer

    from kernelzero.train.sft import SFTRunConfig, build_sft_trainer
    from kernelzero.train.sync_free import REAL_TOKENS, RightPaddingDropped

    rows = _family_rows(12)
    cfg = SFTRunConfig(max_steps=3, batch_size=4, learning_rate=1e-2, max_length=2048, logging_steps=1)
    ours = build_sft_trainer(str(tiny), rows, tmp_path / "ours", cfg)
    assert isinstance(ours.data_collator, RightPaddingDropped)
    batch = ours.data_collator([ours.train_dataset[i] for i in range(4)])
    assert "attention_mask" not in batch and int(batch[REAL_TOKENS]) == sum(
        len(ours.train_dataset[i]["input_ids"]) for i in range(4))

    theirs = build_sft_trainer(str(tiny), rows, tmp_path / "theirs", cfg)
    theirs.__class__ = SFTTrainer  # TRL's compute_loss and log, the mask kept
    theirs.data_collator = theirs.data_collator.collate
    for t in (ours, theirs):
        t.train()
    logs = [[h for h in t.state.log_history if "loss" in h] for t in (ours, theirs)]
    assert len(logs[0]) == len(logs[1]) == 3
    for a, b in zip(*logs):
        for key in ("loss", "entropy", "mean_token_accuracy", "num_tokens"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    for (name, p), q in zip(ours.model.named_parameters(), theirs.model.parameters()):
        torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-4, msg=name)


@pytest.mark.parametrize("copy_weight", [1.0, 3.0])
def test_sync_free_sft_reads_nothing_back_between_logging_steps(tiny, tmp_path, monkeypatch, copy_weight):
    """Each read (.item(), bool(), .tolist()) of a device tensor stops the host until the device is
    done. On the CPU every tensor is a host tensor, so reads are counted by where they are made:
    the data pipeline (loader, collator) reads host tensors by design and is left out; the
    training steps must make none between logs."""
    import traceback

    from kernelzero.train.sft import SFTRunConfig, build_sft_trainer

    trainer = build_sft_trainer(str(tiny), _family_rows(24), tmp_path / "o",
                                SFTRunConfig(max_steps=6, batch_size=4, max_length=2048, logging_steps=6,
                                             copy_weight=copy_weight))
    host_side = ("dataloader.py", "data_loader.py", "sync_free.py:__call__", "sync_free.py:right_padded")
    reads = []
    for name in ("item", "tolist", "__bool__"):
        real = getattr(torch.Tensor, name)

        def read(self, *a, _real=real, _name=name, **k):
            stack = [f"{Path(f.filename).name}:{f.name}" for f in traceback.extract_stack()]
            if not any(s.startswith(h) for s in stack for h in host_side):
                reads.append((_name, stack[-2]))
            return _real(self, *a, **k)
        monkeypatch.setattr(torch.Tensor, name, read)
    trainer.train()
    monkeypatch.undo()
    # the one log, at step 6, reads the window's sums (sync_free.py:log; the copy-weighted loss
    # keeps no metrics), and the Trainer reads its loss, gradient norm and learning rate there: a
    # handful in all, none per step
    assert sum(1 for r in reads if r[1].startswith("sync_free.py:log")) == (copy_weight == 1.0), reads
    # copy_loss.copy_weights matches the tokens on the host (.tolist() on the ids, once a step):
    # the copy-weighted loss (off by default) still reads, by design; nothing else may
    assert len([r for r in reads if not r[1].startswith("copy_loss.py:copy_weights")]) <= 5, reads


def test_right_padded_masks_are_recognised():
    from kernelzero.train.sync_free import right_padded

    right = torch.tensor([[1] * 12, [1] * 7 + [0] * 5, [1] * 3 + [0] * 9])
    assert right_padded(right)
    assert not right_padded(right.flip(1))  # left-padded: the mask is kept
    assert not right_padded(torch.tensor([[1, 0, 1, 1]]))  # a hole
    assert not right_padded(torch.tensor([[0, 0, 0]]))  # no real token


def test_compiled_sft_trains_and_saves_weights_under_their_own_names(tiny, tmp_path):
    """sft.compile: the model compiled in place trains, its held-out loss is read eagerly, and the
    saved weights load by the names they had (no `_orig_mod.` prefix)."""
    from kernelzero.train.sft import SFTRunConfig, run_sft

    res = run_sft(str(tiny), _family_rows(10), tmp_path / "c",
                  SFTRunConfig(max_steps=2, batch_size=4, learning_rate=1e-2, max_length=2048,
                               eval_fraction=0.2, compile=True))
    assert res["steps"] == 2 and res["eval_loss_after"] < res["eval_loss_before"]
    before, after = _weights(tiny), _weights(tmp_path / "c")
    assert set(before) == set(after)
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_compile_layers_compiles_each_transformer_layer_and_nothing_else(tiny):
    """sft.compile compiles layer by layer: every decoder layer, not the model or its loss head."""
    from transformers import AutoModelForCausalLM

    from kernelzero.train.sft import compile_layers

    model = AutoModelForCausalLM.from_pretrained(str(tiny))
    assert compile_layers(model) == model.config.num_hidden_layers
    compiled = [n for n, m in model.named_modules() if getattr(m, "_compiled_call_impl", None) is not None]
    assert compiled == [f"model.layers.{i}" for i in range(model.config.num_hidden_layers)]
    with pytest.raises(ValueError, match="names no transformer layer"):
        compile_layers(torch.nn.Sequential(torch.nn.Linear(2, 2)))


def test_training_attention_leaves_cudnn_out_on_cuda_and_gives_it_back(tiny, tmp_path, monkeypatch):
    """attention_backend: a trainer's loss and scoring passes run with SDPA's cuDNN kernel off (it
    plans per shape on the host) and the other kernels on; the flags are as before afterwards;
    the SFT and both GRPO trainers carry the mixin. CUDA is pretended: the switch is a global flag."""
    from kernelzero.train.attention_backend import NoCudnnAttentionMixin
    from kernelzero.train.ca_grpo import CAGRPOTrainer
    from kernelzero.train.sft import SFTRunConfig, build_sft_trainer

    flags = torch.backends.cuda
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)

    class Base:
        def compute_loss(self):
            return flags.cudnn_sdp_enabled(), flags.flash_sdp_enabled(), flags.mem_efficient_sdp_enabled()

        _get_per_token_logps_and_entropies = compute_loss

    class Trainer(NoCudnnAttentionMixin, Base):
        pass

    before = Base().compute_loss()
    assert before[0], "this torch build has cuDNN attention off already: the test would prove nothing"
    assert Trainer().compute_loss() == (False, True, True) == Trainer()._get_per_token_logps_and_entropies()
    assert Base().compute_loss() == before
    baseline = Trainer()
    baseline.cudnn_attention = True
    assert baseline.compute_loss() == before
    monkeypatch.undo()
    sft = build_sft_trainer(str(tiny), _family_rows(4), tmp_path / "s", SFTRunConfig(max_steps=1))
    assert isinstance(sft, NoCudnnAttentionMixin) and issubclass(CAGRPOTrainer, NoCudnnAttentionMixin)
