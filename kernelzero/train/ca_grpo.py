"""CA-GRPO on TRL: a thin `GRPOTrainer` subclass and the evaluator-backed reward source.

Where the gate goes. TRL 1.16 calls `_calculate_rewards(inputs, prompts, completions,
completion_ids_list)` once per generation batch; each process scores its own slice of the
completions with the reward functions and the method ends with `gather(rewards_per_func)`, after
which every process holds the rewards of the whole global batch, in which each prompt's
`num_generations` completions sit next to each other (TRL's RepeatSampler). A group can straddle
two processes, so the gate T(G) cannot be applied inside the per-process reward function. We
override `_calculate_rewards`: the per-process reward source returns the raw correctness c_i
(through TRL, which gathers it) and keeps the speed score S_i aside; we gather S_i the same way,
and only then apply `ca_grpo_rewards` over whole groups. TRL sees a single reward function,
`ca_grpo`, whose values are the final r_i; its group-relative advantages follow unchanged.
`tests/test_train_ca_grpo.py` pins the name and signature of the overridden method.

Does not cover: the reward formula (rewards.py), judging (judging.py, kernelzero.eval), prompts
and code extraction (kernelzero.coder), or the loop (loop.py).
"""
from __future__ import annotations

import math
import time
from pathlib import Path
from typing import Callable

import torch
from accelerate.utils import gather, gather_object
from trl import GRPOConfig, GRPOTrainer

from kernelzero.coder.extract import to_candidate
from kernelzero.tasks import Candidate, Task
from kernelzero.train.attention_backend import NoCudnnAttentionMixin
from kernelzero.train.checkpoint import OptimizerCarryMixin
from kernelzero.train.config import CAGRPOConfig, TrainConfig
from kernelzero.train.fast_rollouts import FastRolloutMixin
from kernelzero.train.left_aligned import LeftAlignedLogpsMixin
from kernelzero.train.judging import Judge
from kernelzero.train.rewards import ca_grpo_rewards, verdict_reward_parts
from kernelzero.train.sft import checkpointing
from kernelzero.train.steplog import PhaseTimerMixin, quiet

# The TRL method we override, with its parameters; a test checks the pinned TRL still has it.
HOOK_NAME = "_calculate_rewards"
HOOK_PARAMS = ("self", "inputs", "prompts", "completions", "completion_ids_list")


def completion_text(completion) -> str:
    """The text of one TRL completion: a string, or a conversational list of messages."""
    if isinstance(completion, str):
        return completion
    return "".join(m.get("content") or "" for m in completion if m.get("role") == "assistant")


class RawRewardSource:
    """Per-process part of the CA-GRPO reward, called by TRL like any reward function.

    Returns c_i (1.0 correct, 0.0 not) for this process's completions and keeps the speed scores
    S_i in `last_speed` and the judging wall time in `last_latency_s`, which the trainer gathers
    itself. Subclasses implement `score(prompts, completions, **columns) -> [(c_i, S_i)]`.
    """

    __name__ = "ca_grpo"

    def __init__(self) -> None:
        self.last_speed: list[float] = []
        self.last_latency_s: float = 0.0

    def score(self, prompts, completions, **columns) -> list[tuple[float, float]]:
        raise NotImplementedError

    def __call__(self, prompts, completions, completion_ids=None, **kwargs) -> list[float]:
        columns = {k: v for k, v in kwargs.items() if k not in ("trainer_state", "log_extra", "log_metric")}
        t0 = time.perf_counter()
        scored = self.score(prompts, [completion_text(c) for c in completions], **columns)
        self.last_latency_s = time.perf_counter() - t0
        self.last_speed = [float(s) for _, s in scored]
        return [float(c) for c, _ in scored]


class EvaluatorReward(RawRewardSource):
    """c_i and S_i from the evaluator: extract the kernel, judge the batch in parallel (cached).

    tasks: task id (the dataset's `task_id` column) -> Task.
    to_candidate: completion text -> Candidate (the Coder's code extraction).
    context: extra fields stored with each new verdict (round, phase), read at call time.
    """

    def __init__(self, judge: Judge, tasks: dict[str, Task], to_candidate: Callable[[str], Candidate],
                 ca: CAGRPOConfig, context: Callable[[], dict] | None = None):
        super().__init__()
        self.judge, self.tasks, self.to_candidate, self.ca = judge, tasks, to_candidate, ca
        self.context = context or dict
        self.last_verdicts: list = []

    def score(self, prompts, completions, task_id=None, **_) -> list[tuple[float, float]]:
        if task_id is None:
            raise ValueError("the Coder dataset needs a `task_id` column naming each row's task")
        pairs = [(self.tasks[t], self.to_candidate(text)) for t, text in zip(task_id, completions)]
        verdicts = self.judge.judge(pairs, context=self.context())
        self.last_verdicts = verdicts
        return [verdict_reward_parts(v, self.ca.s_max, self.ca.speed_transform) for v in verdicts]


class CAGRPOTrainer(NoCudnnAttentionMixin, PhaseTimerMixin, OptimizerCarryMixin, FastRolloutMixin,
                    LeftAlignedLogpsMixin, GRPOTrainer):
    """GRPOTrainer whose rewards are CA-GRPO's, with the group gate applied after the gather.

    `reward` is the per-process RawRewardSource; `ca` holds alpha, beta and the group size.
    After each generation batch `reward_history[-1]` holds the gathered c, S, r, the dataset's
    `task_id` of each completion (`task_ids`, aligned with c; None without that column) and the
    components (identical on every process); the components are logged as `ca_grpo/*` metrics.
    The loop reads each pool task's latest pass rate from `correct` and `task_ids`.
    """

    def __init__(self, *, reward: RawRewardSource, ca: CAGRPOConfig, **kwargs):
        if "reward_funcs" in kwargs:
            raise TypeError("CAGRPOTrainer takes `reward=`, not `reward_funcs=`")
        super().__init__(reward_funcs=[reward], **kwargs)
        self.ca, self.reward_source = ca, reward
        self.reward_history: list[dict] = []

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        correct = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        device = correct.device
        speed = gather(torch.tensor(self.reward_source.last_speed, dtype=torch.float32, device=device))
        latency = gather(torch.tensor([self.reward_source.last_latency_s], dtype=torch.float32, device=device))
        group = self.num_generations if self.model.training else self.num_generations_eval
        # Gathered like the rewards (rank by rank), so task_ids[i] is the task of correct[i].
        task_ids = gather_object([x.get("task_id") for x in inputs])
        c = [0.0 if math.isnan(x) else x for x in correct[:, 0].tolist()]
        rewards, comps = ca_grpo_rewards(c, speed.tolist(), group, self.ca.alpha, self.ca.beta)
        mode = "train" if self.model.training else "eval"
        metrics = self._metrics[mode]
        metrics["ca_grpo/correct_rate"].append(comps.correct_rate)
        metrics["ca_grpo/gate_open_rate"].append(comps.gate_open_rate)
        metrics["ca_grpo/mixed_group_rate"].append(comps.mixed_group_rate)
        metrics["ca_grpo/mean_speed_score"].append(
            comps.mean_speed_score if comps.mean_speed_score is not None else float("nan"))
        metrics["ca_grpo/eval_latency_s"].append(float(latency.max()))
        self.reward_history.append({"step": self.state.global_step, "correct": c, "speed": speed.tolist(),
                                    "rewards": rewards, "task_ids": list(task_ids), "components": comps.to_dict(),
                                    "eval_latency_s": float(latency.max())})
        return torch.tensor(rewards, dtype=torch.float32, device=device).unsqueeze(1)


def grpo_args(out_dir: str, *, group_size: int, prompts_per_step: int, max_steps: int,
              learning_rate: float, loss_type: str, kl_coef: float, max_completion_tokens: int,
              temperature: float, seed: int, num_processes: int = 1, bf16: bool = False,
              gradient_checkpointing: bool = False, use_vllm: bool = False,
              vllm_mode: str = "colocate", report_to: list[str] | None = None,
              logging_dir: str | None = None, updates_per_rollout: int = 1) -> GRPOConfig:
    """TRL GRPOConfig for one phase: one generation batch per optimizer step, whole groups.

    The global batch is prompts_per_step * group_size completions, split evenly over processes
    (a group may straddle processes; the gate does not care, see the module docstring).
    `updates_per_rollout` > 1 reuses each batch of judged rollouts for that many optimizer steps
    (TRL's num_iterations, GRPO's mu, with its clipped ratio); max_steps counts optimizer steps.
    """
    total = prompts_per_step * group_size
    if total % num_processes:
        raise ValueError(f"{prompts_per_step} prompts x {group_size} samples = {total} completions do "
                         f"not split evenly over {num_processes} processes")
    kw = dict(
        output_dir=out_dir, per_device_train_batch_size=total // num_processes,
        gradient_accumulation_steps=1, num_generations=group_size, max_steps=max_steps,
        learning_rate=learning_rate, loss_type=loss_type, beta=kl_coef,
        max_completion_length=max_completion_tokens, temperature=temperature, seed=seed,
        logging_steps=1, save_strategy="no", report_to=report_to or [], bf16=bf16,
        **checkpointing(GRPOConfig, gradient_checkpointing), use_vllm=use_vllm, vllm_mode=vllm_mode,
        use_cpu=not torch.cuda.is_available(), disable_tqdm=True, shuffle_dataset=True,
        dataloader_num_workers=0, lr_scheduler_type="constant", num_iterations=updates_per_rollout,
    )
    if logging_dir:
        kw["logging_dir"] = logging_dir
    return GRPOConfig(**kw)


def coder_rows(tasks: list[Task], pc) -> list[dict]:
    """One dataset row per task: the Coder's chat prompt (PromptConfig `pc`) and the task's content
    hash as its id."""
    from kernelzero.coder.prompts import build_prompt

    return [{"prompt": [{"role": m["role"], "content": m["content"]} for m in build_prompt(t, pc)],
             "task_id": t.hash} for t in tasks]


def fill_batch(rows: list[dict], prompts_per_step: int) -> list[dict]:
    """At least one step's prompts: with fewer rows than prompts_per_step, TRL's sampler finds
    no complete batch and ends the phase at step 0 (seen with 3 seed tasks and 4 prompts per
    step on the device). Rows are repeated in order; a task twice in a step is two groups."""
    if not rows or len(rows) >= prompts_per_step:
        return rows
    return [rows[i % len(rows)] for i in range(prompts_per_step)]


def fit_prompts(rows: list[dict], tokenizer, max_tokens: int) -> list[dict]:
    """The rows whose chat prompt is at most `max_tokens` tokens long (TRL 1.16 never truncates)."""
    keep = []
    for row in rows:
        ids = tokenizer.apply_chat_template(row["prompt"], add_generation_prompt=True, tokenize=True)
        n = len(ids["input_ids"]) if isinstance(ids, dict) or hasattr(ids, "keys") else len(ids)
        if n <= max_tokens:
            keep.append(row)
    return keep


def run_coder_phase(cfg: TrainConfig, model_path: str, tasks: list[Task], judge: Judge, out_dir: Path,
                    seed: int, callbacks: list, optimizer_in: str | None, context: dict,
                    num_processes: int = 1) -> CAGRPOTrainer:
    """N_C CA-GRPO steps of the Coder on `tasks`; returns the trained trainer (weights in memory)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer

    ca = cfg.coder
    by_id = {t.hash: t for t in tasks}
    if not by_id:
        raise ValueError("the Coder phase has no task to train on: no pool module is in the band and "
                         "seed_tasks gives none that is not held out (widen proposer.band, give the "
                         "Proposer more steps, or point seed_tasks at more tasks)")
    reward = EvaluatorReward(judge, by_id, to_candidate, ca, context=lambda: dict(context))
    args = grpo_args(str(out_dir), group_size=ca.group_size, prompts_per_step=ca.prompts_per_step,
                     max_steps=cfg.coder_steps, learning_rate=ca.learning_rate, loss_type=ca.loss_type,
                     kl_coef=ca.kl_coef, max_completion_tokens=ca.max_completion_tokens,
                     temperature=ca.temperature, seed=seed, num_processes=num_processes, bf16=cfg.bf16,
                     gradient_checkpointing=cfg.gradient_checkpointing, use_vllm=cfg.use_vllm,
                     vllm_mode=cfg.vllm_mode, updates_per_rollout=ca.updates_per_rollout)
    tok = AutoTokenizer.from_pretrained(model_path)
    rows = fit_prompts(coder_rows(list(by_id.values()), ca.prompt_config()), tok, ca.max_prompt_tokens)
    if not rows:
        raise ValueError(f"every Coder prompt is longer than coder.max_prompt_tokens={ca.max_prompt_tokens}")
    rows = fill_batch(rows, ca.prompts_per_step)
    model = AutoModelForCausalLM.from_pretrained(model_path)
    trainer = CAGRPOTrainer(model=model, reward=reward, ca=ca, args=args, train_dataset=Dataset.from_list(rows),
                            processing_class=tok, callbacks=callbacks)
    trainer.optimizer_state_in = optimizer_in
    quiet(trainer)
    trainer.train()
    return trainer
