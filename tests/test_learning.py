"""Learning from zero: canonical prompts, the from-scratch tokenizer and model, the fast sampler,
the held-out rule, SFT that lowers held-out loss, and the cold start wired into the loop."""
import json
from pathlib import Path

import pytest
import torch

from kernelzero.family import FamilyConfig, generate
from kernelzero.family import holdout as H
from kernelzero.tasks import canonical_source


# ------------------------------------------------------------------ canonical module text
def test_canonical_source_drops_docstrings_and_comments_and_is_stable():
    src = ('"""doc"""\nimport torch\n\nclass Model:\n    """doc"""\n    def forward(self, x):  # c\n'
           '        """doc"""\n        return x*0.50  # half\n')
    canon = canonical_source(src)
    assert "doc" not in canon and "#" not in canon and "x * 0.5" in canon
    assert canonical_source(canon) == canon
    assert canonical_source("def broken(:\n") == "def broken(:\n"


# ------------------------------------------------------------------ tokenizer and model
@pytest.fixture(scope="module")
def family_texts():
    return [m.source for m in generate(FamilyConfig(), n=60, seed=3)]


def test_tokenizer_round_trips_and_splits_digits(family_texts):
    from kernelzero.models.scratch import train_tokenizer

    tok = train_tokenizer(family_texts[:40], vocab_size=600)
    for text in family_texts[40:]:  # text the tokenizer never saw
        ids = tok(text, add_special_tokens=False)["input_ids"]
        assert tok.decode(ids) == text
    pieces = tok.convert_ids_to_tokens(tok("x * 0.3725", add_special_tokens=False)["input_ids"])
    assert [p for p in pieces if any(c.isdigit() for c in p)] == ["0", "3", "7", "2", "5"]
    chat = tok.apply_chat_template([{"role": "user", "content": "hi"}], add_generation_prompt=True,
                                   tokenize=False)
    assert chat.endswith("<|im_start|>assistant\n")


def test_presets_have_the_documented_sizes(tmp_path, family_texts):
    from kernelzero.models.scratch import build_from_corpus

    d = build_from_corpus(tmp_path / "m", family_texts, "cpu", seed=1)
    meta = json.loads((d / "kernelzero_model.json").read_text())
    assert 2.0e6 < meta["parameters"] < 4.0e6
    again = build_from_corpus(tmp_path / "m2", family_texts, "cpu", seed=1)
    assert (d / "model.safetensors").read_bytes() == (again / "model.safetensors").read_bytes()


# ------------------------------------------------------------------ fast sampler
@pytest.fixture(scope="module")
def lively_model():
    from transformers import Qwen2Config, Qwen2ForCausalLM

    torch.manual_seed(0)  # large init: a random model whose greedy outputs vary
    cfg = Qwen2Config(vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      initializer_range=0.3, tie_word_embeddings=True)
    return Qwen2ForCausalLM(cfg).eval()


PROMPTS = [[5, 6, 7, 8, 9, 10], [11, 12], [13, 14, 15, 16]]


def test_fast_sampler_greedy_equals_transformers_generate(lively_model):
    from kernelzero.models.fastgen import FastGenConfig, FastGenerator

    gen = FastGenerator(lively_model, FastGenConfig(max_batch=4, max_len=64))
    outs = gen.generate(PROMPTS, 30, temperature=0, eos_token_ids=[0], pad_token_id=1)
    for prompt, out in zip(PROMPTS, outs):
        ref = lively_model.generate(torch.tensor([prompt]), max_new_tokens=30, do_sample=False,
                                    pad_token_id=1, eos_token_id=0)[0, len(prompt):].tolist()
        ref = ref[:ref.index(0) + 1] if 0 in ref else ref
        assert out == ref
    assert len(set(map(tuple, outs))) == len(outs)  # the rows really differ


def test_fast_sampler_is_seeded_and_top_p_narrows_to_greedy(lively_model):
    from kernelzero.models.fastgen import FastGenConfig, FastGenerator

    gen = FastGenerator(lively_model, FastGenConfig(max_batch=8, max_len=64))
    kw = dict(eos_token_ids=[0], pad_token_id=1)
    a = gen.generate(PROMPTS * 2, 20, temperature=1.0, seed=5, **kw)
    b = gen.generate(PROMPTS * 2, 20, temperature=1.0, seed=5, **kw)
    c = gen.generate(PROMPTS * 2, 20, temperature=1.0, seed=6, **kw)
    assert a == b and a != c
    greedy = gen.generate(PROMPTS, 20, temperature=0, **kw)
    assert gen.generate(PROMPTS, 20, temperature=1.0, top_p=1e-6, seed=9, **kw) == greedy
    # top_p = 1 skips the nucleus sort; it draws what a nucleus that keeps every token draws
    everything = gen.generate(PROMPTS * 2, 20, temperature=1.0, top_p=1.0 - 1e-7, seed=5, **kw)
    assert everything == a


def test_fast_sampler_follows_the_weights_after_refresh(lively_model):
    from kernelzero.models.fastgen import FastGenConfig, FastGenerator

    gen = FastGenerator(lively_model, FastGenConfig(max_batch=4, max_len=64))
    before = gen.generate(PROMPTS, 10, temperature=0, eos_token_ids=[0], pad_token_id=1)
    with torch.no_grad():
        lively_model.model.layers[0].mlp.down_proj.weight.mul_(-3.0)
    try:
        gen.refresh()
        after = gen.generate(PROMPTS, 10, temperature=0, eos_token_ids=[0], pad_token_id=1)
    finally:
        with torch.no_grad():
            lively_model.model.layers[0].mlp.down_proj.weight.div_(-3.0)
    assert after != before


def test_fast_sampler_dropping_finished_rows_changes_no_row(lively_model):
    """On the CPU finished rows leave the batch (FastGenConfig.compact); each row's tokens must
    be those of the batch decoded whole. End tokens are picked from the rows' own outputs so the
    rows finish at different steps and compaction really happens, several times."""
    from kernelzero.models.fastgen import FastGenConfig, FastGenerator

    prompts = [[(7 * i + j) % 90 + 2 for j in range(3 + i % 5)] for i in range(12)]
    kw = dict(pad_token_id=1)
    whole = FastGenerator(lively_model, FastGenConfig(max_batch=16, max_len=96, compact=False, check_every=2))
    free = whole.generate(prompts, 40, temperature=0, eos_token_ids=[-5], **kw)
    eos = sorted({row[3 + 4 * (i % 8)] for i, row in enumerate(free[:6])})
    ref = whole.generate(prompts, 40, temperature=0, eos_token_ids=eos, **kw)
    lengths = sorted({len(r) for r in ref})
    assert len(lengths) >= 4 and lengths[0] < 20  # rows end at many different steps
    compact = FastGenerator(lively_model, FastGenConfig(max_batch=16, max_len=96, check_every=2))
    calls = []
    real = compact._compact
    compact._compact = lambda *a: (calls.append(a[0].numel()), real(*a))
    assert compact.generate(prompts, 40, temperature=0, eos_token_ids=eos, **kw) == ref
    assert len(calls) >= 2 and calls[-1] < len(prompts)  # the batch shrank, more than once
    # sampling with compaction stays seeded
    a = compact.generate(prompts, 30, temperature=1.0, eos_token_ids=eos, seed=3, **kw)
    assert a == compact.generate(prompts, 30, temperature=1.0, eos_token_ids=eos, seed=3, **kw)


# ------------------------------------------------------------------ held-out rule
def test_held_out_modules_never_train():
    train = H.training_modules(300, seed=1)
    held = H.heldout_modules(20, seed=2)
    pairs = H.ood_pair_modules(10, seed=3)
    assert all(H.role(m.meta) == "train" for m in train)
    assert all(H.role(m.meta) == "heldout" and len(m.meta["ops"]) >= 2 for m in held)
    assert all(H.held_pairs(m.meta["ops"]) for m in pairs)
    train_text = {m.source for m in train}
    assert not train_text & {m.source for m in held + pairs}
    from kernelzero.family import combo_key
    assert not {combo_key(m.meta) for m in train} & {combo_key(m.meta) for m in held}
    long = H.ood_long_modules(10, seed=4)
    assert all(4 <= len(m.meta["ops"]) <= 6 for m in long)
    assert [m.source for m in H.heldout_modules(20, seed=2)] == [m.source for m in held]


# ------------------------------------------------------------------ SFT from zero
def _teacher_rows(n: int, seed: int) -> list[dict]:
    from kernelzero.coder.prompts import PromptConfig, build_prompt
    from kernelzero.tasks import Task
    from kernelzero.teacher import compile_module

    rows = []
    for i, m in enumerate(generate(FamilyConfig(kinds=("elementwise",), max_ops=2), n=n, seed=seed)):
        r = compile_module(m.source)
        if r.ok:
            prompt = build_prompt(Task(source=m.source, name=f"t{i}"), PromptConfig(style="compact"))
            rows.append({"prompt": [{"role": x["role"], "content": x["content"]} for x in prompt],
                         "completion": [{"role": "assistant", "content": f"```python\n{r.kernel_source}```"}]})
    return rows


def test_sft_from_zero_moves_the_weights_and_lowers_held_out_loss(tmp_path):
    from safetensors.torch import load_file

    from kernelzero.models.scratch import ModelPreset, build_model, train_tokenizer
    from kernelzero.train.cold_start import corpus
    from kernelzero.train.sft import SFTRunConfig, run_sft

    rows = _teacher_rows(48, seed=11)
    tok = train_tokenizer(corpus(rows), vocab_size=800)
    init = build_model(tmp_path / "init", tok, ModelPreset(hidden=64, layers=2, heads=4, kv_heads=2,
                                                           intermediate=128, vocab_size=800))
    res = run_sft(str(init), rows, tmp_path / "out", SFTRunConfig(
        max_steps=40, batch_size=8, learning_rate=3e-3, lr_scheduler="cosine", warmup_ratio=0.1,
        eval_fraction=0.15, max_length=2048))
    assert res["eval_rows"] >= 1 and res["eval_loss_after"] < res["eval_loss_before"] - 0.5
    assert res["loss_curve"] and res["loss_curve"][-1]["loss"] < res["loss_curve"][0]["loss"]
    before, after = load_file(str(init / "model.safetensors")), load_file(str(tmp_path / "out" / "model.safetensors"))
    assert any(not torch.equal(before[k], after[k]) for k in before)


def test_logging_fewer_steps_records_fewer_losses_and_trains_the_same_weights(tmp_path):
    """sft.logging_steps: each loss record waits for the device, so a GPU run logs every N steps;
    what it trains must not change with N."""
    from safetensors.torch import load_file

    from kernelzero.models.scratch import ModelPreset, build_model, train_tokenizer
    from kernelzero.train.cold_start import corpus
    from kernelzero.train.sft import SFTRunConfig, run_sft

    rows = _teacher_rows(24, seed=13)
    tok = train_tokenizer(corpus(rows), vocab_size=600)
    init = build_model(tmp_path / "init", tok, ModelPreset(hidden=32, layers=1, heads=2, kv_heads=1,
                                                           intermediate=64, vocab_size=600))
    runs = {n: run_sft(str(init), rows, tmp_path / f"log{n}", SFTRunConfig(
        max_steps=10, batch_size=4, learning_rate=1e-3, max_length=2048, logging_steps=n)) for n in (1, 5)}
    assert [p["step"] for p in runs[1]["loss_curve"]] == list(range(1, 11))
    assert [p["step"] for p in runs[5]["loss_curve"]] == [5, 10]
    every, fifth = (load_file(str(tmp_path / f"log{n}" / "model.safetensors")) for n in (1, 5))
    assert all(torch.equal(every[k], fifth[k]) for k in every)


def test_time_schedule_follows_the_clock_not_the_steps():
    from kernelzero.train.time_schedule import TimeSchedule

    now = [100.0]
    for kind, half in (("linear", 0.5), ("cosine", 0.5), ("constant", 1.0)):
        s = TimeSchedule(limit_s=10.0, kind=kind, warmup=0.0, clock=lambda: now[0])
        assert s.factor() == 1.0  # not started: nothing spent
        s.start()
        now[0] += 5.0
        assert s.factor(7) == pytest.approx(half) and s.factor(7000) == pytest.approx(half)
        now[0] += 5.0
        assert s.factor() == pytest.approx(0.0 if kind != "constant" else 1.0)
        now[0] = 100.0
    s = TimeSchedule(limit_s=10.0, kind="linear", warmup=0.2, clock=lambda: now[0])
    s.start()
    now[0] += 1.0
    assert s.factor() == pytest.approx(0.5)  # half way up the warm-up
    now[0] += 5.0
    assert s.factor() == pytest.approx(0.5)  # (6 - 2) / (10 - 2) of the decay left


def test_a_time_budget_ends_the_sft_with_its_learning_rate_decayed(tmp_path):
    """cold_start.time_budget_s: the run trains until the budget is spent (not a step count from
    a calibration that under- or over-estimates this machine's speed), and its learning rate has
    decayed to about 0 by then."""
    from kernelzero.models.scratch import ModelPreset, build_model, train_tokenizer
    from kernelzero.train.cold_start import STEP_CAP, corpus, within_budget
    from kernelzero.train.sft import SFTRunConfig, run_sft

    rows = _teacher_rows(48, seed=12)
    tok = train_tokenizer(corpus(rows), vocab_size=800)
    init = build_model(tmp_path / "init", tok, ModelPreset(hidden=32, layers=1, heads=2, kv_heads=1,
                                                           intermediate=64, vocab_size=800))
    peak, budget = 1e-3, 6.0
    cfg = within_budget(SFTRunConfig(max_steps=5, batch_size=2, learning_rate=peak, lr_scheduler="linear",
                                     warmup_ratio=0.1, max_length=2048), budget)
    res = run_sft(str(init), rows, tmp_path / "out", cfg)
    assert res["schedule_by_time"] and 5 < res["steps"] < STEP_CAP
    assert budget <= res["wall_s"] < budget + 5.0
    lrs = [p["lr"] for p in res["loss_curve"]]
    assert max(lrs) > 0.6 * peak  # it trained near its peak on the way
    assert lrs[-1] < 0.15 * peak  # and ended with the time, decayed


def test_length_batches_cover_every_row_once_with_little_padding_in_random_order():
    import random

    from kernelzero.train.length_batches import LengthBatches

    lengths = [random.Random(i).randint(300, 1600) for i in range(1000)]
    sampler = LengthBatches(lengths, batch_size=16, seed=0, pool_batches=8)
    first, second = list(sampler), list(sampler)
    assert sorted(first) == list(range(1000)) and first != second  # each epoch its own order
    batches = [first[i:i + 16] for i in range(0, 1000, 16)]
    real = sum(lengths)
    padded = sum(max(lengths[j] for j in b) * len(b) for b in batches)
    assert real / padded > 0.9
    # not sorted within each pool (an order the model would otherwise cycle through)
    longest = [max(lengths[j] for j in b) for b in batches[:-1]]
    pairs = list(zip(longest, longest[1:]))
    assert sum(a > b for a, b in pairs) < 0.75 * len(pairs) and sum(a < b for a, b in pairs) < 0.75 * len(pairs)


def test_sft_with_length_batches_pads_less(tmp_path):
    from kernelzero.models.scratch import ModelPreset, build_model, train_tokenizer
    from kernelzero.train.cold_start import corpus
    from kernelzero.train.sft import SFTRunConfig, build_sft_trainer
    from kernelzero.train.sync_free import real_tokens

    rows = _teacher_rows(48, seed=13)
    tok = train_tokenizer(corpus(rows), vocab_size=800)
    init = build_model(tmp_path / "init", tok, ModelPreset(hidden=32, layers=1, heads=2, kv_heads=1,
                                                           intermediate=64, vocab_size=800))

    def padding(grouped: bool) -> float:
        cfg = SFTRunConfig(max_steps=2, batch_size=4, max_length=2048, length_batches=grouped)
        loader = build_sft_trainer(str(init), rows, tmp_path / f"o{grouped}", cfg).get_train_dataloader()
        batches = list(loader)
        return 1 - sum(real_tokens(b) for b in batches) / sum(b["input_ids"].numel() for b in batches)

    grouped, plain = padding(True), padding(False)
    assert grouped < 0.5 * plain, (grouped, plain)


# ------------------------------------------------------------------ the shipped Coder
def test_shipped_coder_loads_offline(monkeypatch):
    from kernelzero.models.shipped import ShippedModelMissing, shipped_model

    try:
        path = shipped_model("coder")
    except ShippedModelMissing:
        pytest.fail("the package ships without its Coder (kernelzero/models/weights/coder-cpu)")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from kernelzero.models import SamplingConfig, load_backend
    from kernelzero.coder.prompts import PromptConfig, build_prompt
    from kernelzero.tasks import Task

    backend = load_backend(f"hf:{path}", device="cpu")
    src = generate(FamilyConfig(kinds=("elementwise",), max_ops=1), n=1, seed=0)[0].source
    out = backend.generate([build_prompt(Task(source=src, name="t"), PromptConfig(style="compact"))], 1,
                           SamplingConfig(temperature=0, max_new_tokens=1024))
    assert "class ModelNew" in out[0][0] and "@triton.jit" in out[0][0]


def test_generate_without_a_model_uses_the_shipped_coder(tmp_path, capsys, monkeypatch):
    """`kernelzero generate M.py` with no --model samples the Coder inside the package, in the
    prompt style it records, and judges what it wrote (a verdict, whatever it is)."""
    import json

    from kernelzero.cli import main
    from kernelzero.models import BackendSpecError, load_backend
    from kernelzero.models.shipped import shipped_model

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert load_backend("shipped").spec == f"hf:{shipped_model('coder')}"
    with pytest.raises(BackendSpecError, match="roles"):
        load_backend("shipped:nobody")
    module = tmp_path / "m.py"
    module.write_text(generate(FamilyConfig(kinds=("elementwise",), max_ops=1), n=1, seed=0)[0].source)
    rc = main(["generate", str(module), "--device", "cpu", "-k", "1", "--temperature", "0",
               "--max-new-tokens", "64", "--workers", "1", "--json", "--out", str(tmp_path / "k.py")])
    out = json.loads(capsys.readouterr().out)
    assert rc in (0, 1) and "error" not in out, out
    assert out["model"] == f"hf:{shipped_model('coder')}"


# ------------------------------------------------------------------ the cold start in the loop
def test_scratch_coder_is_made_then_evaluated_before_rl(tmp_path, monkeypatch):
    import kernelzero.eval.pools as pools
    from kernelzero.train.config_file import from_dict
    from kernelzero.train.loop import Loop

    # the judge's spare workers start after the cold start, not beside its SFT (on cuda each
    # holds a CUDA context: GPU memory the SFT needs)
    warmed_after_cold_start = []
    real_warm_up = pools.warm_up_in_background
    monkeypatch.setattr(pools, "warm_up_in_background", lambda ev: warmed_after_cold_start.append(
        (tmp_path / "run" / "cold_start" / "cold_start.json").exists()) or real_warm_up(ev))

    cfg = from_dict({
        "name": "cold", "coder_model": "scratch", "proposer_model": "tiny", "tiny_size": [32, 1],
        "rounds": 0, "device": "cpu", "torch_threads": 1,
        "coder": {"prompt_style": "compact", "prompt_example": False, "max_prompt_tokens": 1024,
                  "max_completion_tokens": 64},
        "cold_start": {"preset": "cpu", "modules": 6, "family": {"kinds": ["elementwise"], "max_ops": 2},
                       "sft": {"max_steps": 3, "batch_size": 2, "log_every": 0, "eval_fraction": 0.2}},
        "heldout": {"family": 2, "handwritten": False, "samples": 0, "ks": [1]},
        "eval": {"device": "cpu", "max_workers": 2, "correctness_trials": 2, "hardening_trials": False},
    })
    summary = Loop(cfg, tmp_path / "run", log=lambda *_: None).run()
    assert warmed_after_cold_start == [True]
    cs = summary["cold_start"]
    assert cs["distill"]["judged"] == 6 and cs["distill"]["kept"] == cs["data"]["rows"] >= 5
    assert cs["sft"]["steps"] == 3 and cs["sft"]["eval_loss_after"] is not None
    assert (tmp_path / "run" / "cold_start" / "model" / "model.safetensors").exists()
    assert [h["round"] for h in summary["heldout"]] == [0]
    assert summary["heldout"][0]["sets"]["in_family"]["n_tasks"] == 2
    on_disk = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert on_disk["heldout"] == summary["heldout"]
    # a second run in the same directory resumes: nothing is made again
    again = Loop(cfg, tmp_path / "run", resume=True, log=lambda *_: None).run()
    assert again["cold_start"] == cs


def test_the_committed_rows_load_gzipped_and_a_sample_is_judged_correct():
    """data/family-train.jsonl.gz (what the GPU runs train on) loads as SFT rows, and rows drawn
    from it are what they claim: the module in the prompt, the teacher's kernel as the
    completion, judged `correct` by the CPU evaluator."""
    import random

    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.models.completion import code_blocks
    from kernelzero.tasks import Candidate, Task
    from kernelzero.train.sft import load_rows

    rows = load_rows(Path(__file__).resolve().parents[1] / "data" / "family-train.jsonl.gz")
    assert len(rows) >= 13000
    picked = random.Random(0).sample(rows, 3)
    pairs = [(Task.from_source(code_blocks(r["prompt"][-1]["content"])[0], f"row_{i}"),
              Candidate(code_blocks(r["completion"][0]["content"])[0])) for i, r in enumerate(picked)]
    assert all("class Model(" in t.source and "class ModelNew(" in c.source for t, c in pairs)
    with Evaluator(EvalConfig(device="cpu", max_workers=2)) as ev:
        verdicts = ev.judge_many(pairs)
    assert [v.status for v in verdicts] == ["correct"] * 3, [v.reason for v in verdicts]


def test_scratch_proposer_is_distilled_from_the_generator_then_reused_on_resume(tmp_path):
    """proposer_model: scratch makes a Proposer from zero (generator rows, its own tokenizer,
    SFT) before round 1, records how many of its sampled modules are in the family, and a
    resumed run reuses it; a catalog Proposer cannot start from scratch."""
    from kernelzero.train.config_file import from_dict
    from kernelzero.train.loop import Loop

    base = {
        "name": "cold-proposer", "coder_model": "tiny", "proposer_model": "scratch",
        "tiny_size": [32, 1], "rounds": 0, "device": "cpu", "torch_threads": 1,
        "proposer": {"kind": "family", "sft_modules": 12, "max_completion_tokens": 32},
        "cold_start": {"preset": "cpu", "family": {"kinds": ["elementwise"], "max_ops": 2},
                       "sft": {"max_steps": 2, "batch_size": 2, "log_every": 0, "eval_fraction": 0.2}},
        "heldout": {"family": 0, "handwritten": False, "ood_long": 0, "ood_pairs": 0},
        "eval": {"device": "cpu", "max_workers": 1, "correctness_trials": 2, "hardening_trials": False},
    }
    run = tmp_path / "run"
    Loop(from_dict(base), run, log=lambda *_: None).run()
    made = json.loads((run / "proposer_cold_start" / "proposer_cold_start.json").read_text())
    assert made["steps"] == 2 and made["model"] == str(run / "proposer_cold_start" / "model")
    assert made["static_validity"]["n"] == 64 and 0 <= made["static_validity"]["in_family"] <= 64
    state = json.loads((run / "state.json").read_text())
    assert state["proposer_model"] == made["model"]
    weights = run / "proposer_cold_start" / "model" / "model.safetensors"
    stamp = weights.stat().st_mtime_ns
    Loop(from_dict(base), run, resume=True, log=lambda *_: None).run()
    assert weights.stat().st_mtime_ns == stamp  # reused, not trained again
    # ... also when the run stopped after the Proposer was made but before its state was saved
    from kernelzero.train.family_proposer import make_proposer
    assert make_proposer(from_dict(base), run / "proposer_cold_start") == made["model"]
    assert weights.stat().st_mtime_ns == stamp

    with pytest.raises(ValueError, match="proposer.kind: family"):
        Loop(from_dict({**base, "proposer": {"kind": "catalog"}}), tmp_path / "other",
             log=lambda *_: None).run()


def test_held_out_split_judges_recorded_completions_as_a_run_does(tmp_path):
    """bench/heldout_split.py judge: completions sampled elsewhere (the GPU Coder's, on the
    device) are judged on the held-out tasks the same config builds. The teacher's kernels pass,
    a completion without code fails, and a record that lacks a task or comes from other held-out
    sets is refused with exit 2."""
    import subprocess
    import sys

    from kernelzero.teacher import compile_module
    from kernelzero.train.config_file import load_config, parse_overrides
    from kernelzero.train.heldout import heldout_sets
    from kernelzero.train.loop import EXAMPLE_TASKS

    sets = ["heldout.family=4", "heldout.ood_long=0", "heldout.ood_pairs=0",
            "heldout.handwritten=false", "eval.max_workers=2"]
    tasks = heldout_sets(load_config("coder-gpu", parse_overrides(sets)), EXAMPLE_TASKS)["in_family"]
    rows = [{"task": t.key, "completion": "```python\n" + compile_module(t.source).kernel_source + "```"}
            for t in tasks[:3]]
    rows[1]["completion"] = "I cannot write this kernel."
    record = tmp_path / "completions.jsonl"
    record.write_text("".join(json.dumps(r) + "\n" for r in rows))
    root = Path(__file__).resolve().parents[1]

    def judge(out, extra=()):
        args = [a for s in [*sets, *extra] for a in ("--set", s)]
        return subprocess.run([sys.executable, "bench/heldout_split.py", "judge", "--completions", str(record),
                               "--out", str(out), *args], cwd=root, capture_output=True, text=True)

    r = judge(tmp_path / "j")
    assert r.returncode == 2 and "lacks 1 of their 4" in r.stderr  # the 4th task has no completion
    rows.append({"task": tasks[3].key, "completion": ""})
    record.write_text("".join(json.dumps(r) + "\n" for r in rows))
    r = judge(tmp_path / "j")
    assert r.returncode == 0, r.stderr[-2000:]
    entry = json.loads((tmp_path / "j" / "heldout.json").read_text())
    assert entry["n_tasks"] == 4 and entry["pass@1"] == pytest.approx(2 / 4)
    statuses = [json.loads(line)["status"] for line in (tmp_path / "j" / "in_family" / "outcomes.jsonl").open()]
    assert statuses.count("correct") == 2 and statuses.count("format_error") == 2, statuses
    r = judge(tmp_path / "k", ["heldout.seed=8"])
    assert r.returncode == 2 and "same --config and --set" in r.stderr


def test_a_held_out_task_without_a_completion_counts_as_failed(tmp_path):
    """evaluate_coder: a task the backend returns nothing for (a replay record lacking it) stays
    in the pass@1 denominator as a failure instead of leaving it."""
    from kernelzero.eval import Evaluator
    from kernelzero.teacher import compile_module
    from kernelzero.train.config_file import load_config, parse_overrides
    from kernelzero.train.heldout import evaluate_coder, heldout_sets
    from kernelzero.train.judging import Judge, VerdictCache
    from kernelzero.train.loop import EXAMPLE_TASKS

    cfg = load_config("coder-gpu", parse_overrides(["heldout.family=2", "heldout.ood_long=0", "heldout.ood_pairs=0",
                                                    "heldout.handwritten=false", "eval.max_workers=1"]))
    sets = heldout_sets(cfg, EXAMPLE_TASKS)
    t = sets["in_family"][0]
    record = tmp_path / "c.jsonl"
    record.write_text(json.dumps({"task": t.key, "completion": "```python\n" + compile_module(t.source).kernel_source + "```"}) + "\n")
    with Evaluator(cfg.eval_config()) as ev:
        result = evaluate_coder(cfg, f"replay:{record}", sets, Judge(ev, VerdictCache(tmp_path / "v.jsonl")), {"round": 0})
    fig = result["sets"]["in_family"]
    assert fig["n_tasks"] == 2 and fig["pass@1"]["value"] == pytest.approx(0.5)
    assert [r["status"] for r in fig["outcomes"]["greedy"]] == ["correct", "format_error"]
