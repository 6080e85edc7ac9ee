"""GRPO's log-probabilities scored with each prompt rotated to the start of its row
(kernelzero.train.left_aligned) must equal TRL's own, value and gradient."""
import pytest
import torch

pytest.importorskip("trl")


def _trainer(cls):
    from accelerate import Accelerator

    t = object.__new__(cls)  # only the scoring method is exercised: it reads the accelerator
    t.accelerator = Accelerator(cpu=True)
    return t


@pytest.fixture(scope="module")
def batch():
    """Four rows as TRL lays them out: prompts left-padded, completions right-padded."""
    from transformers import Qwen2Config, Qwen2ForCausalLM
    from trl.trainer.utils import add_fused_lm_head

    torch.manual_seed(0)
    model = Qwen2ForCausalLM(Qwen2Config(
        vocab_size=97, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=256, initializer_range=0.3, pad_token_id=0))
    add_fused_lm_head(model, temperature=1.3, outputs=("log_probs", "entropy"))
    prompts, completions = [5, 9, 3, 9], [6, 2, 8, 1]
    P, C = max(prompts), max(completions)
    ids = torch.zeros(4, P + C, dtype=torch.long)
    mask = torch.zeros(4, P + C, dtype=torch.long)
    for i, (p, c) in enumerate(zip(prompts, completions)):
        ids[i, P - p:P + c] = torch.randint(3, 97, (p + c,))
        mask[i, P - p:P + c] = 1
    return model, ids, mask, C


def _scores(cls, model, ids, mask, C):
    model.zero_grad()
    logps, ent, _ = _trainer(cls)._get_per_token_logps_and_entropies(model, ids, mask, C, compute_entropy=True)
    (logps * torch.linspace(0.5, 2.0, C)).sum().backward()
    grads = [p.grad.clone() for p in model.parameters() if p.grad is not None]
    return logps.detach(), ent, grads


def test_rotated_rows_score_as_trl_does(batch):
    from trl import GRPOTrainer

    from kernelzero.train.left_aligned import LeftAlignedLogpsMixin

    class Trl(GRPOTrainer):
        pass

    seen = []

    class Ours(LeftAlignedLogpsMixin, GRPOTrainer):
        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, *a, **k):
            seen.append(bool(attention_mask[:, 0].all()))
            return super()._get_per_token_logps_and_entropies(model, input_ids, attention_mask, *a, **k)

    model, ids, mask, C = batch
    ref, ref_ent, ref_grads = _scores(Trl, model, ids, mask, C)
    got, got_ent, got_grads = _scores(Ours, model, ids, mask, C)
    assert ref.shape == got.shape == (4, C)
    assert ref[mask[:, -C:] == 1].abs().min() > 0  # real completion tokens were scored
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(got_ent, ref_ent, atol=1e-5, rtol=1e-4)
    for g, r in zip(got_grads, ref_grads, strict=True):
        torch.testing.assert_close(g, r, atol=1e-4, rtol=1e-3)  # fp32 sums in another order


def test_rotation_helpers():
    from kernelzero.train.left_aligned import left_pads, rotate_left

    mask = torch.tensor([[0, 0, 1, 1, 0], [1, 1, 1, 0, 0], [0, 0, 0, 0, 0]])
    assert left_pads(mask).tolist() == [2, 0, 0]
    x = torch.arange(10).view(2, 5)
    assert rotate_left(x, torch.tensor([2, 0])).tolist() == [[2, 3, 4, 0, 1], [5, 6, 7, 8, 9]]
