"""Rollouts for TRL's GRPO from the static-cache sampler (kernelzero.models.fastgen) instead of
transformers' `generate`: the same prompts, temperature, top-p, top-k and end tokens, the same
output (completion ids up to and including the first end token, no logprobs, which TRL then
computes itself), at the speed of a captured decode step.

Mixed into a GRPOTrainer subclass before GRPOTrainer; it overrides `_generate_single_turn`, the
one method TRL 1.16 samples through when vLLM is off (`tests/test_fast_rollouts.py` pins its
name and parameters). Falls back to TRL's own path with vLLM, with sharded weights (DeepSpeed
ZeRO-3, FSDP: the full weights are not in this process), for multimodal prompts, and for models
fastgen does not reimplement. Sampling is seeded from the trainer's seed and the step, so a
re-run phase samples the same completions.
"""
from __future__ import annotations

HOOK_NAME = "_generate_single_turn"
HOOK_PARAMS = ("self", "prompt_ids", "images", "multimodal_fields", "num_generations", "has_tool_images")


class FastRolloutMixin:
    fast_rollouts: bool = True       # set False to sample with TRL's own path
    _fast_gen = None
    _fast_calls = 0

    def _fast_generator(self, rows: int, length: int):
        from kernelzero.models import fastgen

        if (not self.fast_rollouts or self.use_vllm or getattr(self, "is_deepspeed_enabled", False)
                or getattr(self, "is_fsdp_enabled", False)):
            return None
        model = self.accelerator.unwrap_model(self.model)
        if not fastgen.supports(model):
            return None
        g = self._fast_gen
        if g is None or g.config.max_batch < rows or g.config.max_len < length:
            self._fast_gen = g = fastgen.FastGenerator(model, fastgen.FastGenConfig(
                max_batch=max(rows, g.config.max_batch if g else 0),
                max_len=max(length, g.config.max_len if g else 0)))
        else:
            g.refresh()  # the optimizer changed the weights since the last rollout
        return g

    def _generate_single_turn(self, prompt_ids, images, multimodal_fields, num_generations,
                              has_tool_images=False):
        longest = max((len(p) for p in prompt_ids), default=0)
        gen = None if images or multimodal_fields else self._fast_generator(
            len(prompt_ids), longest + self.max_completion_length)
        if gen is None:
            return super()._generate_single_turn(prompt_ids, images, multimodal_fields, num_generations,
                                                 has_tool_images)
        self._fast_calls += 1
        seed = (self.args.seed * 1_000_003 + self.state.global_step * 7_919 + self._fast_calls) % 2**63
        was_training = gen.w.model.training
        completion_ids = gen.generate(
            [list(p) for p in prompt_ids], self.max_completion_length,
            temperature=self.temperature, top_p=self.top_p if self.top_p is not None else 1.0,
            top_k=self.top_k or 0, eos_token_ids=list(self.eos_token_ids),
            pad_token_id=self._tokenizer.pad_token_id, seed=seed)
        if was_training:
            gen.w.model.train()
        return completion_ids, None
