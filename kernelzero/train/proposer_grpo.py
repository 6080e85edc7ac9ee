"""GRPO for the Proposer: prompts are operator API sets (with a summary of the Coder's weak
spots), completions are PyTorch modules, the reward is the frontier reward.

For each completion: extract the module; if it is not a valid task (does not parse, fails the
validation check) its reward is `rho`. Otherwise the current Coder attempts it G times, the
attempts are judged, and with p the Coder's correct rate the reward is `frontier_reward`
(1 - 2|p - 0.5|). Every valid module goes to the task pool with its correctness flags; those whose
p falls in the configured band (default 0 < p < 1) are what the Coder trains on next. All valid modules of a batch are sampled together and judged in
one parallel `judge_many` call.

Engine part: a plain `GRPOTrainer` (no gate here: the frontier reward is per module). Covers the
reward source, the prompt dataset and the phase runner. Does not cover how a module is checked
(`ProposerTools.validate`, the Proposer package's validation check), the formula
(`kernelzero.propose.reward.frontier_reward`) or the pool's storage (`kernelzero.propose.task_pool.TaskPool`).
"""
from __future__ import annotations

import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kernelzero.tasks import Candidate, Task
from kernelzero.train.config import TrainConfig
from kernelzero.train.judging import Judge


@dataclass
class ProposerTools:
    """What the Proposer phase needs from the Proposer package and the Coder side.

    prompt(api_set, weakness_summary) -> chat messages asking for one module.
    parse(completion) -> module source, or None when the completion holds no module.
    validate(task, apis) -> (ok, reason): the validation check (runs the module in the sandbox).
    reward(correct_flags, rho, valid) -> the frontier reward.
    coder_generate(prompts, n) -> n completions per chat prompt from the current Coder.
    coder_prompt(task) -> the Coder's chat prompt for a task.
    to_candidate(completion) -> Candidate.
    """

    prompt: Callable[[list[str], str], list[dict]]
    parse: Callable[[str], str | None]
    validate: Callable[[Task, list[str]], tuple[bool, str]]
    reward: Callable[..., float]
    coder_generate: Callable[[list[list[dict]], int], list[list[str]]]
    coder_prompt: Callable[[Task], list[dict]]
    to_candidate: Callable[[str], Candidate]


def proposer_rows(cfg: TrainConfig, tools: ProposerTools, sample_api_set: Callable[[random.Random, int], list[str]],
                  weakness: str, seed: int) -> list[dict]:
    """prompts_per_step * proposer_steps prompts, each an API set drawn with a seeded RNG."""
    rng = random.Random(seed)
    rows = []
    for _ in range(max(1, cfg.proposer.prompts_per_step * max(cfg.proposer_steps, 1))):
        apis = sample_api_set(rng, rng.choice(cfg.proposer.api_set_sizes))
        rows.append({"prompt": tools.prompt(apis, weakness), "api_set": ",".join(apis)})
    return rows


class FrontierRewardSource:
    """TRL reward function for the Proposer (per process; no group gate needed).

    `valid_modules` collects (task, api list, correct flags) of every valid module; `speedups`
    each valid module's speed-ups over eager of its correct, timed attempts, by task hash (the
    pool's key: the Proposer's feedback names the ops whose kernels are slower than eager);
    `last` holds per-completion records of the latest batch (valid, reason, p, reward, in_band).
    """

    __name__ = "frontier"

    def __init__(self, cfg: TrainConfig, tools: ProposerTools, judge: Judge, context: Callable[[], dict]):
        self.cfg, self.tools, self.judge, self.context = cfg, tools, judge, context
        self.valid_modules: list[tuple[Task, list[str], list[bool]]] = []
        self.speedups: dict[str, list[float]] = {}
        self.last: list[dict] = []
        self.history: list[dict] = []

    def __call__(self, prompts, completions, completion_ids=None, api_set=None, log_metric=None, **_):
        from kernelzero.train.ca_grpo import completion_text

        t0 = time.perf_counter()
        pc = self.cfg.proposer
        texts = [completion_text(c) for c in completions]
        recs: list[dict] = []
        valid_tasks: list[tuple[int, Task]] = []
        for i, text in enumerate(texts):
            source = self.tools.parse(text)
            if source is None:
                recs.append({"valid": False, "reason": "no module in the completion"})
                continue
            apis = [a for a in (api_set or [""] * len(texts))[i].split(",") if a]
            task = Task.from_source(source, name=f"proposed_{'_'.join(apis)}_{Task.from_source(source).hash[:8]}")
            task.meta = {"apis": apis}
            ok, reason = self.tools.validate(task, apis)
            recs.append({"valid": ok, "reason": reason, "task": task.key})
            if ok:
                valid_tasks.append((i, task))
        flags_by_index: dict[int, list[bool]] = {}
        if valid_tasks:
            outs = self.tools.coder_generate([self.tools.coder_prompt(t) for _, t in valid_tasks],
                                             pc.coder_attempts)
            pairs = [(t, self.tools.to_candidate(c)) for (_, t), cs in zip(valid_tasks, outs) for c in cs]
            verdicts = self.judge.judge(pairs, context={**self.context(), "role": "proposer-attempt"})
            k = 0
            for (i, task), cs in zip(valid_tasks, outs):
                mine = verdicts[k:k + len(cs)]
                flags_by_index[i] = [v.correct for v in mine]
                timed = [v.speedup for v in mine if v.correct and v.speedup is not None]
                if timed:
                    self.speedups[task.hash] = timed  # the pool's key (source_hash)
                k += len(cs)
        rewards = []
        for i, rec in enumerate(recs):
            if not rec["valid"]:
                r = self.tools.reward([], rho=pc.rho, valid=False)
            else:
                flags = flags_by_index[i]
                p = sum(flags) / len(flags)
                rec["p"] = p
                r = self.tools.reward(flags, rho=pc.rho, valid=True)
                task = dict(valid_tasks)[i]
                self.valid_modules.append((task, task.meta["apis"], flags))
                rec["in_band"] = pc.band[0] < p < pc.band[1]
            rec["reward"] = r
            rewards.append(r)
        self.last = recs
        self.history.extend(recs)
        if log_metric is not None:
            log_metric("proposer/valid_rate", sum(r["valid"] for r in recs) / len(recs))
            ps = [r["p"] for r in recs if "p" in r]
            if ps:
                log_metric("proposer/coder_p_mean", sum(ps) / len(ps))
            log_metric("proposer/in_band", float(sum(bool(r.get("in_band")) for r in recs)))
            log_metric("proposer/eval_latency_s", time.perf_counter() - t0)
        return rewards


def run_proposer_phase(cfg: TrainConfig, model_path: str, rows: list[dict], reward: FrontierRewardSource,
                       out_dir: Path, seed: int, callbacks: list, optimizer_in: str | None,
                       num_processes: int = 1):
    """N_P GRPO steps of the Proposer; returns the trained trainer (weights in memory)."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOTrainer

    from kernelzero.train.attention_backend import NoCudnnAttentionMixin
    from kernelzero.train.ca_grpo import fill_batch, fit_prompts, grpo_args
    from kernelzero.train.checkpoint import OptimizerCarryMixin
    from kernelzero.train.fast_rollouts import FastRolloutMixin
    from kernelzero.train.left_aligned import LeftAlignedLogpsMixin
    from kernelzero.train.steplog import PhaseTimerMixin, quiet

    class ProposerTrainer(NoCudnnAttentionMixin, PhaseTimerMixin, OptimizerCarryMixin, FastRolloutMixin,
                          LeftAlignedLogpsMixin, GRPOTrainer):
        pass

    pc = cfg.proposer
    args = grpo_args(str(out_dir), group_size=pc.group_size, prompts_per_step=pc.prompts_per_step,
                     max_steps=cfg.proposer_steps, learning_rate=0.0 if pc.frozen else pc.learning_rate,
                     loss_type=pc.loss_type,
                     kl_coef=pc.kl_coef, max_completion_tokens=pc.max_completion_tokens,
                     temperature=pc.temperature, seed=seed, num_processes=num_processes, bf16=cfg.bf16,
                     gradient_checkpointing=cfg.gradient_checkpointing, use_vllm=cfg.use_vllm,
                     vllm_mode=cfg.vllm_mode)
    tok = AutoTokenizer.from_pretrained(model_path)
    rows = fit_prompts(rows, tok, pc.max_prompt_tokens)
    if not rows:
        raise ValueError(f"every Proposer prompt is longer than proposer.max_prompt_tokens={pc.max_prompt_tokens}")
    rows = fill_batch(rows, pc.prompts_per_step)
    trainer = ProposerTrainer(model=AutoModelForCausalLM.from_pretrained(model_path), reward_funcs=[reward],
                              args=args, train_dataset=Dataset.from_list(rows), processing_class=tok,
                              callbacks=callbacks)
    trainer.optimizer_state_in = optimizer_in
    quiet(trainer)
    trainer.train()
    return trainer
