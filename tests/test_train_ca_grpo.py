"""The TRL adapter: the hook we override exists in the pinned TRL, a GRPO step moves the weights,
and one and two processes (torchrun, gloo, CPU) give identical rewards."""
import inspect
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelzero.train.ca_grpo import HOOK_NAME, HOOK_PARAMS, CAGRPOTrainer, RawRewardSource, grpo_args
from kernelzero.train.config import CAGRPOConfig
from kernelzero.train.rewards import ca_grpo_rewards

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def tiny_model(tmp_path_factory):
    from kernelzero.models.tiny import build_tiny_model
    return build_tiny_model(tmp_path_factory.mktemp("tiny") / "model", hidden_size=32, num_layers=2)


def test_trl_is_the_pinned_version_and_the_hook_exists():
    import trl
    from trl import GRPOTrainer

    assert trl.__version__ == "1.16.0", "CAGRPOTrainer overrides a private TRL method: re-check it"
    hook = getattr(GRPOTrainer, HOOK_NAME)
    assert tuple(inspect.signature(hook).parameters) == HOOK_PARAMS
    src = inspect.getsource(hook)
    assert "gather(rewards_per_func)" in src  # the cross-process gather we apply the gate after
    caller = inspect.getsource(GRPOTrainer._generate_and_score_completions)
    assert f"self.{HOOK_NAME}(inputs, prompts, completions, completion_ids_list)" in caller
    assert "view(-1, num_generations)" in caller  # groups are consecutive rows of the gathered batch


class LengthReward(RawRewardSource):
    """Deterministic raw verdicts from the completion text (the tiny model writes garbage)."""

    def score(self, prompts, completions, **_):
        return [(float(len(c) % 2), float(len(c) % 3)) for c in completions]


def test_grpo_step_changes_parameters_and_rewards_are_ca_grpo(tiny_model, tmp_path):
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"task {i}"}], "task_id": f"t{i}"}
                            for i in range(4)])
    ca = CAGRPOConfig(group_size=4, prompts_per_step=2, learning_rate=1e-2)
    args = grpo_args(str(tmp_path / "out"), group_size=4, prompts_per_step=2, max_steps=2,
                     learning_rate=1e-2, loss_type="grpo", kl_coef=0.0, max_completion_tokens=16,
                     temperature=1.0, seed=0)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = CAGRPOTrainer(model=model, reward=LengthReward(), ca=ca, args=args, train_dataset=ds,
                            processing_class=AutoTokenizer.from_pretrained(tiny_model))
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not torch.equal(before[n], p)]
    assert changed, "no parameter moved after two GRPO steps"
    assert len(trainer.reward_history) == 2
    for h in trainer.reward_history:
        expect, _ = ca_grpo_rewards(h["correct"], h["speed"], 4, ca.alpha, ca.beta)
        assert h["rewards"] == pytest.approx(expect)
        ids = h["task_ids"]  # the task of each completion, aligned with c: whole groups of one task
        assert len(ids) == len(h["correct"]) == 8 and set(ids) <= {f"t{i}" for i in range(4)}
        assert ids[:4] == [ids[0]] * 4 and ids[4:] == [ids[4]] * 4
    logged = [e for e in trainer.state.log_history if "ca_grpo/gate_open_rate" in e]
    assert len(logged) == 2 and all("ca_grpo/eval_latency_s" in e for e in logged)


class RecordingReward(RawRewardSource):
    """c_i = 1 for a completion with an even number of characters (a rule the model can follow),
    no speed term; every scored (prompt, completion, c) is kept."""

    def __init__(self):
        super().__init__()
        self.scored: list[tuple[str, str, float]] = []

    def score(self, prompts, completions, **_):
        out = [(float(len(c) % 2 == 0), 0.0) for c in completions]
        self.scored += [(p[-1]["content"], c, r) for p, c, (r, _) in zip(prompts, completions, out)]
        return out


def _completion_logprob(model, tok, prompt: str, completion: str) -> float:
    """log p(completion | chat prompt) under `model`, summed over the completion's tokens."""
    head = tok.apply_chat_template([{"role": "user", "content": prompt}], add_generation_prompt=True,
                                   tokenize=False)
    ids = tok(head + completion, add_special_tokens=False, return_tensors="pt")["input_ids"]
    n = len(tok(head, add_special_tokens=False)["input_ids"])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    target = ids[0, 1:]
    return float(logp[n - 1:].gather(1, target[n - 1:, None]).sum())


def test_a_grpo_step_moves_the_policy_toward_the_rewarded_completions(tiny_model, tmp_path):
    """After one step, the completions that earned c = 1 gained log-probability relative to
    those that earned 0. Fails with the rewards negated before TRL sees them (they would lose
    it), and with c = 1 for every sample (no advantage: nothing moves apart)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(0)
    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"task {i}"}], "task_id": f"t{i}"}
                            for i in range(4)])
    ca = CAGRPOConfig(group_size=8, prompts_per_step=2, learning_rate=3e-3, beta=0.0)
    args = grpo_args(str(tmp_path / "out"), group_size=8, prompts_per_step=2, max_steps=1,
                     learning_rate=3e-3, loss_type="grpo", kl_coef=0.0, max_completion_tokens=12,
                     temperature=1.0, seed=0)
    tok = AutoTokenizer.from_pretrained(tiny_model)
    before = AutoModelForCausalLM.from_pretrained(tiny_model).eval()
    reward = RecordingReward()
    trainer = CAGRPOTrainer(model=AutoModelForCausalLM.from_pretrained(tiny_model), reward=reward,
                            ca=ca, args=args, train_dataset=ds, processing_class=tok)
    trainer.train()
    after = trainer.model.eval()
    gains = {0.0: [], 1.0: []}
    for prompt, completion, c in reward.scored:
        gains[c].append(_completion_logprob(after, tok, prompt, completion)
                        - _completion_logprob(before, tok, prompt, completion))
    assert gains[0.0] and gains[1.0], "no group had both outcomes: pick another seed"
    mean = {c: sum(g) / len(g) for c, g in gains.items()}
    assert mean[1.0] - mean[0.0] > 0.05, mean


def _torchrun(n: int, model: Path, out: Path, gpus: bool = False) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    if not gpus:
        env["CUDA_VISIBLE_DEVICES"] = ""
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(n),
           "--master_addr", "127.0.0.1", "--master_port", str(29400 + n + os.getpid() % 500),
           str(HERE / "_train_ddp_worker.py"), str(model), str(out)]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(out.read_text())


def test_one_and_two_processes_give_identical_rewards(tiny_model, tmp_path):
    _check_identical(tiny_model, tmp_path, gpus=False)


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs 2 GPUs (nvidia-h200-x2): NCCL data parallel")
def test_one_and_two_gpus_give_identical_rewards(tiny_model, tmp_path):
    _check_identical(tiny_model, tmp_path, gpus=True)


def _check_identical(tiny_model, tmp_path, gpus: bool):
    one = _torchrun(1, tiny_model, tmp_path / "one.json", gpus)
    two = _torchrun(2, tiny_model, tmp_path / "two.json", gpus)
    assert (one["num_processes"], two["num_processes"]) == (1, 2)
    assert len(one["history"]) == len(two["history"]) == 2
    for a, b in zip(one["history"], two["history"]):
        assert a["correct"] == b["correct"] and a["speed"] == b["speed"]
        assert a["rewards"] == b["rewards"]
        assert a["task_ids"] == b["task_ids"]
    # task_ids are gathered in the order of c (the loop reads each pool task's p from them): each
    # group's flags are its task's row of the worker's table, on 1 process and across 2
    from _train_ddp_worker import G, TABLE
    for h in one["history"] + two["history"]:
        for g in range(0, len(h["correct"]), G):
            task = h["task_ids"][g]
            assert h["task_ids"][g:g + G] == [task] * G
            assert h["correct"][g:g + G] == TABLE[task][0]
    # The test can fail: in step 2 the group at rows 4..7 is split 2 + 2 over the ranks and is
    # [1, 0, 0, 0]; a per-process gate would see [1, 0] (rate 0.5) on rank 0 and open it.
    split = two["history"][1]["correct"][4:8]
    assert split == [1.0, 0.0, 0.0, 0.0]
    whole, _ = ca_grpo_rewards(split, two["history"][1]["speed"][4:8], 4)
    half, _ = ca_grpo_rewards(split[:2], two["history"][1]["speed"][4:6], 2)
    assert whole[:2] != half


def test_prompts_over_the_limit_are_left_out_not_cut(tiny_model):
    from transformers import AutoTokenizer

    from kernelzero.train.ca_grpo import fit_prompts

    tok = AutoTokenizer.from_pretrained(tiny_model)
    rows = [{"prompt": [{"role": "user", "content": "x " * n}], "task_id": str(n)} for n in (5, 50, 500)]
    lengths = [len(tok.apply_chat_template(r["prompt"], add_generation_prompt=True, tokenize=True)["input_ids"])
               for r in rows]
    kept = fit_prompts(rows, tok, lengths[1])
    assert [r["task_id"] for r in kept] == ["5", "50"]
    assert fit_prompts(rows, tok, lengths[0] - 1) == []


def test_updates_per_rollout_reuses_one_judged_batch_for_several_steps(tiny_model, tmp_path):
    """coder.updates_per_rollout = 2 (GRPO's mu): two optimizer steps, one batch of rollouts
    judged; both steps move the weights."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    ds = Dataset.from_list([{"prompt": [{"role": "user", "content": f"task {i}"}], "task_id": f"t{i}"}
                            for i in range(4)])
    ca = CAGRPOConfig(group_size=4, prompts_per_step=2, learning_rate=1e-2, updates_per_rollout=2)
    args = grpo_args(str(tmp_path / "out"), group_size=4, prompts_per_step=2, max_steps=2,
                     learning_rate=1e-2, loss_type="grpo", kl_coef=0.0, max_completion_tokens=16,
                     temperature=1.0, seed=0, updates_per_rollout=ca.updates_per_rollout)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    snapshots = []

    class Snap(TrainerCallback):
        def on_step_end(self, args, state, control, model=None, **kw):
            snapshots.append({n: p.detach().clone() for n, p in model.named_parameters()})

    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    trainer = CAGRPOTrainer(model=model, reward=LengthReward(), ca=ca, args=args, train_dataset=ds,
                            processing_class=AutoTokenizer.from_pretrained(tiny_model), callbacks=[Snap()])
    trainer.train()
    assert trainer.state.global_step == 2
    assert len(trainer.reward_history) == 1, "the second step should reuse the first step's rollouts"
    assert len(snapshots) == 2
    for prev, now in ((before, snapshots[0]), (snapshots[0], snapshots[1])):
        assert any(not torch.equal(prev[n], now[n]) for n in now), "an optimizer step moved nothing"
    with pytest.raises(ValueError, match="updates_per_rollout"):
        CAGRPOConfig(updates_per_rollout=0)
