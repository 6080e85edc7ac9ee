"""SFT steps that never wait for the device.

TRL's `SFTTrainer.compute_loss` reads three figures back from the device every step (`.item()` on
the entropy, the token accuracy and the token count), and the right-padding check that lets
attention take its causal fast path read the attention mask. Each read stops the host until the
device has finished everything queued, so the host cannot queue the next kernels while the device
runs these: for a model small enough that launching its kernels takes about as long as running
them, the device then sits idle for part of every step.

Here nothing is read back between logging steps:
- `RightPaddingDropped` checks the mask on the host, in the collator, before the batch is moved to
  the device; a batch padded on the right only loses its mask (a causal model never reads a later
  position, and the labels are -100 on the padding, so the loss and gradients are the same) and
  carries its count of real tokens instead. The model is then handed its masks as already built
  (none), so attention takes its causal fast path without transformers inspecting the batch.
- The Trainer's check of every step's loss for NaN (`logging_nan_inf_filter`) is a read too:
  `build_sft_trainer` turns it off, so a NaN loss shows in the logged loss instead of being
  skipped.
- `sync_free(SFTTrainer)` computes TRL's loss the same way, and sums the entropy, the top-1 hits,
  the completion tokens and the real tokens on the device; `log` reads them once and hands TRL the
  window's figures (ratios of the window's sums, where TRL averages per-step ratios).

Not covered: configurations whose loss TRL computes otherwise (a `compute_loss_func`, label
smoothing, auxiliary MoE losses, sequence parallelism); `sync_free` leaves those trainers as they
are.
"""
from __future__ import annotations

REAL_TOKENS = "real_tokens"  # the batch key that replaces a dropped attention mask


def right_padded(mask) -> bool:
    """Whether a 2-D 0/1 attention mask has its padding (if any) on the right of every row only,
    and every row at least one real token. Read on the host: `mask` is a CPU tensor here."""
    return bool(mask.dim() == 2 and mask.shape[1] > 0 and (mask[:, 1:] <= mask[:, :-1]).all()
                and mask[:, 0].ne(0).all())


def real_tokens(batch) -> int:
    """A collated batch's count of real (not padding) tokens, with its mask or without it."""
    return int(batch[REAL_TOKENS]) if REAL_TOKENS in batch else int(batch["attention_mask"].sum())


class RightPaddingDropped:
    """A collator wrapper: a batch padded on the right only goes to the model without its mask,
    with its count of real tokens under `REAL_TOKENS` (a 0-d tensor, moved with the batch)."""

    def __init__(self, collate):
        self.collate = collate

    def __call__(self, examples):
        import torch

        batch = self.collate(examples)
        mask = batch.get("attention_mask")
        if isinstance(mask, torch.Tensor) and mask.device.type == "cpu" and right_padded(mask):
            batch[REAL_TOKENS] = mask.sum()
            del batch["attention_mask"]
        return batch


def sync_free(base):
    """`base` (TRL's SFTTrainer or a subclass of it) with a compute_loss and log that keep the
    step's figures on the device until a log reads them."""
    import torch

    class SyncFreeSFTTrainer(base):
        def _plain_loss(self) -> bool:
            parallel = getattr(self.accelerator, "parallelism_config", None)
            return (self.compute_loss_func is None and self.label_smoother is None
                    and not self.aux_loss_enabled and self.args.loss_type in ("nll", "dft")
                    and not (parallel is not None and getattr(parallel, "sp_enabled", False)))

        def _no_masks(self):
            """The model's attention masks given as already built, all None: causal attention with
            no mask. Without this, transformers builds the masks itself and, given no padding
            mask, checks the positions for packed sequences, a read from the device every step.
            Models that name their attention kinds (`layer_types`) take such a mapping."""
            kinds = getattr(self.accelerator.unwrap_model(self.model).config, "layer_types", None)
            return {kind: None for kind in kinds} if kinds else None

        def take_real_tokens(self, inputs):
            """Pop a batch's real-token count; a batch that carried one (its mask dropped) gets its
            masks as already built instead. Every compute_loss of this trainer calls it first."""
            real = inputs.pop(REAL_TOKENS, None)
            if real is not None:
                inputs["attention_mask"] = self._no_masks()
            return real

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            real = self.take_real_tokens(inputs)
            if return_outputs or not self._plain_loss():
                # TRL's own path: evaluation asking for logits (which needs no mask), or a loss
                # computed otherwise (whose trainer never gets RightPaddingDropped: see install).
                return super().compute_loss(model, inputs, return_outputs, num_items_in_batch)
            mode = "train" if self.model.training else "eval"
            inputs["use_cache"] = False
            outputs = model(**inputs, fused_lm_head=True)
            # TRL's loss, term for term (SFTTrainer.compute_loss).
            per_token_loss = -outputs.log_probs
            if self.args.loss_type == "dft":
                per_token_loss = per_token_loss * outputs.log_probs.exp().detach()
            num_tokens = outputs.label_mask.sum() if num_items_in_batch is None else num_items_in_batch
            loss = per_token_loss.sum() / torch.as_tensor(num_tokens).clamp(min=1)
            if self.args.average_tokens_across_devices and num_items_in_batch is not None:
                loss = loss * (self.accelerator.num_processes // self.get_tp_size())
            if real is None:
                real = (inputs["attention_mask"].sum() if "attention_mask" in inputs
                        else torch.tensor(inputs["position_ids"].size(1)))
            step = torch.stack([outputs.label_mask.sum().float(), outputs.entropy.detach().sum().float(),
                                outputs.is_top1.sum().float(), real.float().to(loss.device)])
            sums = self.__dict__.setdefault("_device_sums", {})
            sums[mode] = step if mode not in sums else sums[mode] + step
            return loss

        def log(self, logs, start_time=None):
            mode = "train" if self.model.training else "eval"
            pending = self.__dict__.get("_device_sums", {}).pop(mode, None)
            if pending is not None:
                # One read for the whole window, summed over the processes.
                valid, entropy, correct, tokens = self.accelerator.gather(pending[None]).sum(0).tolist()
                self._metrics[mode]["entropy"] = [entropy / valid if valid else 0.0]
                self._metrics[mode]["mean_token_accuracy"] = [correct / valid if valid else 0.0]
                if mode == "train":
                    self._total_train_tokens += int(tokens) // self._tp_size
                self._metrics[mode]["num_tokens"] = [self._total_train_tokens]
            super().log(logs, start_time)

        def install_collator(self) -> bool:
            """Drop right-padding masks in the collator, if this trainer computes the loss itself
            (TRL's other paths count a batch's tokens from its mask). Returns whether it did."""
            if not self._plain_loss() or isinstance(self.data_collator, RightPaddingDropped):
                return False
            self.data_collator = RightPaddingDropped(self.data_collator)
            return True

    SyncFreeSFTTrainer.__name__ = SyncFreeSFTTrainer.__qualname__ = f"SyncFree{base.__name__}"
    return SyncFreeSFTTrainer
