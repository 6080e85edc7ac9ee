"""Fast batched sampling for small Qwen2/Llama-style causal LMs: a static KV cache and, on a GPU,
one decode step captured as a CUDA graph.

Why: for the small Coders KernelZero trains from scratch (3M-100M parameters), Hugging Face
`generate` is bound by Python and kernel-launch latency, not by the GPU (about 80 ms a step for
512 rows on an H200: ~6K new tokens/s, while training runs at 180K-800K tokens/s). Here a decode
step is a fixed sequence of kernels over fixed-size buffers, so it is captured once and replayed:
no Python, no allocation, no host synchronisation inside the loop.

How (read top to bottom):
- `DecoderWeights` copies the model's weights into fused matrices (q|k|v, gate|up) in the
  sampling dtype. `refresh()` copies them again in place after an optimizer step (the captured
  graph keeps pointing at the same buffers).
- Prompts are left-padded to one length L0 and prefilled in one pass; row b's pad slots are
  masked out of attention and its rotary positions start at 0 at its first real token.
- A decode step embeds the last tokens, writes K/V into slot `cur`, attends over every slot with
  a mask (slot <= cur, slot >= pad of the row), samples (temperature, top-p, top-k; Gumbel race
  on the CUDA generator, graph-safe), marks rows that produced an end token as finished and
  advances `cur` and the positions — all on the device.
- The host replays the step and looks at the finished flags every `check_every` steps.

Covers Qwen2ForCausalLM and LlamaForCausalLM without sliding windows or rope scaling other than
the default. `supports(model)` says whether a model qualifies; callers fall back to `generate`.
Not covered: beam search, repetition penalties, speculative decoding, tensor parallelism.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F


def supports(model) -> bool:
    """True for the decoder-only architectures this module reimplements exactly."""
    cfg = getattr(model, "config", None)
    if cfg is None or getattr(cfg, "model_type", None) not in ("qwen2", "llama"):
        return False
    rope = getattr(cfg, "rope_parameters", None) or {"rope_type": "default"}
    if rope.get("rope_type", "default") != "default":
        return False
    if getattr(cfg, "use_sliding_window", False):
        return False
    return getattr(cfg, "hidden_act", "silu") == "silu"


@dataclass
class FastGenConfig:
    """Sizes of the static buffers.

    max_batch: rows decoded at once (prompts x samples); a larger request is split.
    max_len: prompt plus completion tokens per row (the KV cache's length).
    dtype: sampling dtype: `auto` (bf16 on CUDA, fp32 on CPU), `float32` or `bfloat16`.
    cuda_graph: capture the decode step as a CUDA graph (CUDA only).
    check_every: decode steps between looks at the finished flags (one host sync each).
    compact: without a graph (the CPU), decode only the rows still running: at a look, once a
        quarter of the batch has finished, its rows leave the batch (their K/V with them), so a
        batch's cost follows its rows' lengths, not its longest row's. A graph has fixed shapes.
    grouped_decode: on the CPU, a decode step's attention takes the query heads that share a
        key-value head as that head's query positions, instead of `enable_gqa` (which copies the
        keys for every query head); the same tokens (bench/heldout_sampling.py --compare
        grouped). Not measured on a GPU, so not used there.
    """

    max_batch: int = 256
    max_len: int = 2048
    dtype: str = "auto"
    cuda_graph: bool = True
    check_every: int = 16
    compact: bool = True
    grouped_decode: bool = True

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_len < 2 or self.check_every < 1:
            raise ValueError("FastGenConfig: max_batch >= 1, max_len >= 2, check_every >= 1")
        if self.dtype not in ("auto", "float32", "bfloat16"):
            raise ValueError(f"FastGenConfig.dtype={self.dtype!r}: auto, float32 or bfloat16")


class DecoderWeights:
    """The model's weights, fused and cast for sampling; `refresh()` re-copies them in place."""

    def __init__(self, model, dtype: torch.dtype, device: torch.device):
        self.model, self.dtype, self.device = model, dtype, device
        cfg = model.config
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.eps = cfg.rms_norm_eps
        rot = model.model.rotary_emb
        self.inv_freq = rot.inv_freq.detach().to(device=device, dtype=torch.float32)
        self.rope_scale = float(getattr(rot, "attention_scaling", 1.0))
        self.layers: list[dict] = []
        self.refresh()

    @torch.no_grad()
    def refresh(self) -> None:
        m = self.model.model
        fresh = not self.layers
        for i, layer in enumerate(m.layers):
            a, mlp = layer.self_attn, layer.mlp
            qkv_b = [p.bias if p.bias is not None else torch.zeros(p.weight.shape[0], device=p.weight.device)
                     for p in (a.q_proj, a.k_proj, a.v_proj)]
            tensors = {
                "ln1": layer.input_layernorm.weight, "ln2": layer.post_attention_layernorm.weight,
                "qkv": torch.cat([a.q_proj.weight, a.k_proj.weight, a.v_proj.weight]),
                "qkv_b": torch.cat(qkv_b),
                "o": a.o_proj.weight,
                "gate_up": torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]),
                "down": mlp.down_proj.weight,
            }
            if fresh:
                self.layers.append({k: v.detach().to(self.device, self.dtype).clone() for k, v in tensors.items()})
            else:
                for k, v in tensors.items():
                    self.layers[i][k].copy_(v.detach())
        top = {"embed": m.embed_tokens.weight, "norm": m.norm.weight,
               "lm_head": self.model.get_output_embeddings().weight}
        if fresh:
            self.top = {k: v.detach().to(self.device, self.dtype).clone() for k, v in top.items()}
        else:
            for k, v in top.items():
                self.top[k].copy_(v.detach())


def _rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    xf = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)
    return w * xf.to(x.dtype)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rotated * sin


class FastGenerator:
    """Samples completions for token-id prompts from a causal LM with a static KV cache.

        gen = FastGenerator(model, FastGenConfig(max_batch=512, max_len=1024))
        outs = gen.generate(prompt_ids, max_new_tokens=256, temperature=1.0, top_p=1.0,
                            eos_token_ids=[eos], pad_token_id=pad, seed=0)

    `outs[i]` holds row i's new tokens up to and including its first end token. Call
    `refresh()` after the model's weights changed.
    """

    def __init__(self, model, config: FastGenConfig | None = None, device: str | torch.device | None = None):
        if not supports(model):
            raise ValueError("FastGenerator supports Qwen2/Llama models with default rope and no "
                             "sliding window; use the model's generate() for this one")
        self.config = config or FastGenConfig()
        self.device = torch.device(device) if device is not None else next(model.parameters()).device
        dt = self.config.dtype
        if dt == "auto":
            dt = "bfloat16" if self.device.type == "cuda" else "float32"
        self.dtype = getattr(torch, dt)
        self.w = DecoderWeights(model, self.dtype, self.device)
        B, T = self.config.max_batch, self.config.max_len
        shape = (self.w.n_layers, B, self.w.n_kv, T, self.w.head_dim)
        self.k_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        self.v_cache = torch.zeros(shape, dtype=self.dtype, device=self.device)
        # Decode state, updated in place by the step (so a captured graph sees it).
        self.tok = torch.zeros(B, dtype=torch.long, device=self.device)
        self.pos = torch.zeros(B, dtype=torch.long, device=self.device)      # rotary position
        self.pad = torch.zeros(B, dtype=torch.long, device=self.device)      # first real slot
        self.cur = torch.zeros(1, dtype=torch.long, device=self.device)      # cache slot to write
        self.step_idx = torch.zeros(1, dtype=torch.long, device=self.device)
        self.finished = torch.zeros(B, dtype=torch.bool, device=self.device)
        self.out = torch.zeros(B, T, dtype=torch.long, device=self.device)
        self.eos = torch.zeros(1, dtype=torch.long, device=self.device)
        self.pad_id = torch.zeros(1, dtype=torch.long, device=self.device)
        self.temperature = torch.ones(1, dtype=torch.float32, device=self.device)
        self.top_p = torch.ones(1, dtype=torch.float32, device=self.device)
        self.slots = torch.arange(T, device=self.device)
        self._graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self.graph_error: str | None = None  # why decoding runs without a graph, if it does
        self._generator = torch.Generator(device=self.device)

    def refresh(self) -> None:
        """Re-copy the model's weights (after an optimizer step)."""
        self.w.refresh()

    # ------------------------------------------------------------------ the network
    def _forward(self, ids: torch.Tensor, pos: torch.Tensor, start, mask: torch.Tensor) -> torch.Tensor:
        """Logits of the last position. ids/pos [B, t]; K/V written to slots start..start+t-1
        (`start` an int, or a 1-element tensor for the decode step); mask [B, 1, t, S] over the
        first S slots."""
        w = self.w
        B, t = ids.shape
        S = mask.shape[-1]
        h = F.embedding(ids, w.top["embed"])
        freqs = pos.to(torch.float32)[..., None] * w.inv_freq          # [B, t, D/2]
        emb = torch.cat((freqs, freqs), dim=-1)
        cos = (emb.cos() * w.rope_scale).to(self.dtype)[:, None]       # [B, 1, t, D]
        sin = (emb.sin() * w.rope_scale).to(self.dtype)[:, None]
        H, KV, D = w.n_heads, w.n_kv, w.head_dim
        for li, L in enumerate(w.layers):
            x = _rms_norm(h, L["ln1"], w.eps)
            qkv = F.linear(x, L["qkv"], L["qkv_b"])
            q, k, v = qkv.split([H * D, KV * D, KV * D], dim=-1)
            q = _rope(q.view(B, t, H, D).transpose(1, 2), cos, sin)
            k = _rope(k.view(B, t, KV, D).transpose(1, 2), cos, sin)
            v = v.view(B, t, KV, D).transpose(1, 2)
            kc, vc = self.k_cache[li, :B], self.v_cache[li, :B]
            if isinstance(start, int):
                kc[:, :, start:start + t] = k
                vc[:, :, start:start + t] = v
            else:  # decode: one slot, index on the device
                kc.index_copy_(2, start, k)
                vc.index_copy_(2, start, v)
            if t == 1 and H != KV and self.config.grouped_decode and ids.device.type == "cpu":
                # Decode: the query heads of a key-value group read the same keys, so they enter
                # as that group's query positions (one mask serves them all).
                att = F.scaled_dot_product_attention(q.reshape(B, KV, H // KV, D), kc[:, :, :S], vc[:, :, :S],
                                                     attn_mask=mask).view(B, H, 1, D)
            else:
                att = F.scaled_dot_product_attention(q, kc[:, :, :S], vc[:, :, :S], attn_mask=mask,
                                                     enable_gqa=H != KV)
            h = h + F.linear(att.transpose(1, 2).reshape(B, t, H * D), L["o"])
            x = _rms_norm(h, L["ln2"], w.eps)
            gate, up = F.linear(x, L["gate_up"]).chunk(2, dim=-1)
            h = h + F.linear(F.silu(gate) * up, L["down"])
        h = _rms_norm(h[:, -1], w.top["norm"], w.eps)
        return F.linear(h, w.top["lm_head"]).float()

    def _sample(self, logits: torch.Tensor, mode: tuple) -> torch.Tensor:
        greedy, top_k, nucleus = mode
        if greedy:
            return logits.argmax(-1)
        logits = logits / self.temperature
        if top_k:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        probs = logits.softmax(-1)
        if not nucleus:  # top_p = 1 keeps every token: no sort (a sixth of a CPU decode step)
            race = torch.empty_like(probs).exponential_(generator=self._generator)
            return (probs / race).argmax(-1)
        sorted_p, idx = probs.sort(-1, descending=True)
        # Keep the smallest prefix whose mass reaches top_p (the first token always stays).
        drop_sorted = (sorted_p.cumsum(-1) - sorted_p) >= self.top_p
        drop = torch.zeros_like(drop_sorted).scatter(-1, idx, drop_sorted)
        probs = probs.masked_fill(drop, 0.0)
        race = torch.empty_like(probs).exponential_(generator=self._generator)
        return (probs / race).argmax(-1)

    def _decode_step(self, mode: tuple, filled: int | None = None, rows: int | None = None) -> None:
        """One token for every row. `filled` (eager decoding only): the slots written so far plus
        this one, so attention reads those instead of the whole cache (on the CPU, attending over
        a 2K-slot cache cost a third of a step); a captured graph has fixed shapes and reads all.
        `rows` (eager only): decode the first `rows` rows, those still running after compaction."""
        B = self.config.max_batch if rows is None else rows
        tok, pos, pad, finished, out = (t[:B] for t in (self.tok, self.pos, self.pad, self.finished, self.out))
        slots = self.slots if filled is None else self.slots[:filled]
        mask = (slots[None, :] <= self.cur) & (slots[None, :] >= pad[:, None])
        logits = self._forward(tok[:, None], pos[:, None], self.cur, mask[:, None, None, :])
        nxt = self._sample(logits, mode)
        nxt = torch.where(finished, self.pad_id.expand(B), nxt)
        out.index_copy_(1, self.step_idx, nxt[:, None])
        finished |= torch.isin(nxt, self.eos)
        tok.copy_(nxt)
        pos += 1
        self.cur += 1
        self.step_idx += 1

    def _eager(self) -> bool:
        return not (self.config.cuda_graph and self.device.type == "cuda") or self.graph_error is not None

    def _step(self, mode: tuple, filled: int, rows: int) -> None:
        if self._eager():
            self._decode_step(mode, filled, rows)
            return
        graph = self._graphs.get(mode)
        if graph is None:
            try:
                graph = self._capture(mode)
            except RuntimeError as e:  # a capture this driver or build refuses: decode eagerly
                import warnings
                self.graph_error = f"{type(e).__name__}: {e}"
                warnings.warn(f"fastgen: CUDA graph capture failed, decoding without it ({self.graph_error})")
                torch.cuda.synchronize()
                self._decode_step(mode, rows=rows)
                return
        graph.replay()

    def _compact(self, keep: torch.Tensor, written: int, steps: int) -> None:
        """Move rows `keep` (ascending) to the front: their state, outputs and the K/V of the
        `written` slots so far. The right-hand sides are copies (advanced indexing), so a row
        moving onto one that moves later is safe."""
        k = keep.numel()
        self.k_cache[:, :k, :, :written] = self.k_cache[:, keep, :, :written]
        self.v_cache[:, :k, :, :written] = self.v_cache[:, keep, :, :written]
        for t in (self.tok, self.pos, self.pad, self.finished):
            t[:k] = t[keep]
        self.out[:k, :steps] = self.out[keep, :steps]

    def _capture(self, mode: tuple):
        """Capture one decode step as a CUDA graph: warm up on a side stream (lazy init),
        then capture; the state is saved and restored around both, so capturing does not
        advance the decode."""
        saved = [t.clone() for t in self._state()]
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            for _ in range(2):
                self._decode_step(mode)
        torch.cuda.current_stream().wait_stream(s)
        for t, v in zip(self._state(), saved):
            t.copy_(v)
        graph = torch.cuda.CUDAGraph()
        graph.register_generator_state(self._generator)
        with torch.cuda.graph(graph):
            self._decode_step(mode)
        for t, v in zip(self._state(), saved):
            t.copy_(v)
        self._graphs[mode] = graph
        return graph

    def _state(self) -> list[torch.Tensor]:
        return [self.tok, self.pos, self.cur, self.step_idx, self.finished, self.out,
                self.k_cache, self.v_cache]

    # ------------------------------------------------------------------ the public call
    @torch.no_grad()
    def generate(self, prompts: list[list[int]], max_new_tokens: int, *, temperature: float = 1.0,
                 top_p: float = 1.0, top_k: int = 0, eos_token_ids: list[int], pad_token_id: int,
                 seed: int | None = None, progress=None) -> list[list[int]]:
        """New tokens for each prompt (up to and including the first end token)."""
        if not prompts:
            return []
        B = self.config.max_batch
        if seed is not None:
            self._generator.manual_seed(seed)
        out: list[list[int]] = []
        for start in range(0, len(prompts), B):
            chunk = prompts[start:start + B]
            out.extend(self._generate_chunk(chunk, max_new_tokens, temperature, top_p, top_k,
                                            eos_token_ids, pad_token_id))
            if progress is not None:
                progress(len(chunk))
        return out

    def _generate_chunk(self, prompts, max_new, temperature, top_p, top_k, eos_ids, pad_id):
        B, T = self.config.max_batch, self.config.max_len
        n = len(prompts)
        L0 = max(len(p) for p in prompts)
        if L0 + max_new > T:
            raise ValueError(f"prompt ({L0} tokens) + max_new_tokens ({max_new}) > max_len ({T}); "
                             "raise FastGenConfig.max_len")
        if min(len(p) for p in prompts) < 1:
            raise ValueError("every prompt needs at least one token")
        # A graph decodes all B rows (dummies marked finished); eager decoding only the n real ones.
        live = n if self._eager() else B
        ids = torch.full((live, L0), pad_id, dtype=torch.long)
        pad = torch.full((live,), L0 - 1, dtype=torch.long)             # dummy rows: one slot
        for i, p in enumerate(prompts):
            ids[i, L0 - len(p):] = torch.tensor(p, dtype=torch.long)
            pad[i] = L0 - len(p)
        ids, pad = ids.to(self.device), pad.to(self.device)
        slots = torch.arange(L0, device=self.device)
        pos = (slots[None, :] - pad[:, None]).clamp(min=0)
        # Query i sees keys j with pad <= j <= i; a pad query sees itself (no empty softmax row).
        causal = slots[None, :] <= slots[:, None]
        mask = (causal[None] & (slots[None, None, :] >= pad[:, None, None])) | torch.eye(L0, dtype=torch.bool, device=self.device)[None]
        eos = torch.tensor(sorted(set(eos_ids)) or [-1], dtype=torch.long, device=self.device)
        if eos.numel() != self.eos.numel():
            self.eos = eos
            self._graphs.clear()
        else:
            self.eos.copy_(eos)
        self.pad_id.fill_(pad_id)
        self.temperature.fill_(max(float(temperature), 1e-6))
        self.top_p.fill_(float(top_p))
        mode = (temperature == 0, int(top_k), float(top_p) < 1.0)
        logits = self._forward(ids, pos, 0, mask[:, None])
        first = self._sample(logits, mode)
        self.out.zero_()
        self.out[:live, 0] = first
        self.finished[:live] = torch.isin(first, self.eos)
        self.finished[n:] = True
        self.tok[:live] = first
        self.pos[:live] = pos[:, -1] + 1
        self.pad[:live] = pad
        self.cur.fill_(L0)
        self.step_idx.fill_(1)
        origin = list(range(live))   # batch row -> prompt index, as rows leave the batch
        done: dict[int, list[int]] = {}
        steps = 1
        while steps < max_new:
            k = min(self.config.check_every, max_new - steps)
            for i in range(k):
                self._step(mode, L0 + steps + i, live)  # slot L0 + steps + i - 1 is written now
            steps += k
            finished = self.finished[:live]
            if bool(finished.all()):
                break
            if self.config.compact and self._eager() and 4 * int(finished.sum()) >= live:
                for j in finished.nonzero().flatten().tolist():
                    done[origin[j]] = self.out[j, :steps].tolist()
                keep = (~finished).nonzero().flatten()
                self._compact(keep, L0 + steps, steps)
                origin = [origin[j] for j in keep.tolist()]
                live = len(origin)
        for j, o in enumerate(origin):
            if o < n:
                done[o] = self.out[j, :steps].tolist()
        rows = [done[i] for i in range(n)]
        eos_set = set(eos_ids)
        result = []
        for r in rows:
            cut = next((i for i, t in enumerate(r) if t in eos_set), None)
            result.append(r if cut is None else r[:cut + 1])
        return result
