"""A learning curve during training: greedy held-out pass@1 of the model being trained, every
`every` optimizer steps, judged by the evaluator like any candidate.

    curve = PassAtOneCurve(tasks, judge, tokenizer, prompt_config, every=500, max_new_tokens=1024)
    trainer.add_callback(curve.callback)      # curve.points: [{"step", "pass@1", "n", "s"}]

The weights are read from the trainer's model in memory (no checkpoint is written): the fast
sampler (kernelzero.models.fastgen) copies them at each point, samples greedily, and the model
goes back to training. Works with any TRL/transformers Trainer whose model is a Qwen2/Llama
causal LM; other models are sampled with `generate`.

Does not cover the held-out sets (heldout.py) or the final evaluation (round_report.py).
"""
from __future__ import annotations

import time


class PassAtOneCurve:
    def __init__(self, tasks: list, judge, tokenizer, prompt_config, every: int,
                 max_new_tokens: int = 1024, log=print, label: str = "held-out"):
        from kernelzero.coder.prompts import build_prompt
        from kernelzero.models.base import chat_messages

        self.tasks, self.judge, self.tok, self.every = tasks, judge, tokenizer, every
        self.max_new_tokens, self.log, self.label = max_new_tokens, log, label
        self.prompt_ids = []
        for t in tasks:
            ids = tokenizer.apply_chat_template(chat_messages(build_prompt(t, prompt_config)),
                                                add_generation_prompt=True, tokenize=True)
            self.prompt_ids.append(list(ids["input_ids"] if hasattr(ids, "keys") else ids))
        self.points: list[dict] = []
        self._gen = None
        from transformers import TrainerCallback

        curve = self

        class _Callback(TrainerCallback):
            def on_step_end(self, args, state, control, model=None, **kw):
                if curve.every and state.global_step % curve.every == 0 and model is not None:
                    curve.measure(model, state.global_step)

            def on_train_end(self, args, state, control, model=None, **kw):
                if model is not None and (not curve.points or curve.points[-1]["step"] != state.global_step):
                    curve.measure(model, state.global_step)

        self.callback = _Callback()

    def measure(self, model, step: int) -> dict:
        import torch

        from kernelzero.models import fastgen
        from kernelzero.tasks import Candidate
        from kernelzero.coder.extract import to_candidate

        t0 = time.perf_counter()
        was_training = model.training
        model.eval()
        eos, pad = self.tok.eos_token_id, self.tok.pad_token_id
        with torch.no_grad():
            if fastgen.supports(model):
                if self._gen is None:
                    longest = max(map(len, self.prompt_ids)) + self.max_new_tokens
                    self._gen = fastgen.FastGenerator(model, fastgen.FastGenConfig(
                        max_batch=min(256, len(self.prompt_ids)), max_len=longest))
                else:
                    self._gen.refresh()
                outs = self._gen.generate(self.prompt_ids, self.max_new_tokens, temperature=0,
                                          eos_token_ids=[eos], pad_token_id=pad)
            else:
                outs = [model.generate(torch.tensor([p], device=model.device), do_sample=False,
                                       max_new_tokens=self.max_new_tokens, pad_token_id=pad
                                       )[0, len(p):].tolist() for p in self.prompt_ids]
        if was_training:
            model.train()
        texts = self.tok.batch_decode(outs, skip_special_tokens=True)
        pairs = [(t, to_candidate(x) if x else Candidate(source="")) for t, x in zip(self.tasks, texts)]
        verdicts = self.judge.judge(pairs, context={"phase": "curve", "step": step})
        correct = sum(v.correct for v in verdicts)
        point = {"step": step, "pass@1": correct / len(verdicts), "n": len(verdicts),
                 "s": round(time.perf_counter() - t0, 2)}
        self.points.append(point)
        self.log(f"  {self.label} pass@1 at step {step}: {point['pass@1']:.3f} ({correct}/{len(verdicts)}, "
                 f"{point['s']:.0f} s)")
        return point
