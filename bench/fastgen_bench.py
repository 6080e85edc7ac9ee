"""New tokens per second: the static-cache sampler (kernelzero.models.fastgen) against
transformers' `generate`, on models of the from-scratch presets, sampling like a rollout.

    python bench/fastgen_bench.py --presets cpu,gpu,large --rows 512 --new 256 --out fastgen.json

Each preset gets a random model (a tokenizer on a little family text; the weights do not change
the cost), bf16 on CUDA. Both samplers get the same prompts (family modules in the compact
prompt) and `--new` new tokens per row with no end token allowed to stop early (min_new_tokens
for `generate`; the fast sampler's rows are all counted to --new). Also checked: greedy outputs
of both in float32 agree on 8 prompts. Prints a table and writes JSON.
"""
from __future__ import annotations

import argparse
import json
import time


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--presets", default="cpu,gpu")
    ap.add_argument("--rows", type=int, default=512, help="sequences sampled at once")
    ap.add_argument("--new", type=int, default=256, help="new tokens per sequence")
    ap.add_argument("--hf-rows", type=int, default=0, help="rows for generate (default: --rows)")
    ap.add_argument("--cache", type=int, default=0,
                    help="KV-cache slots per row (default: prompt + --new; a rollout sizes it for "
                         "the longest completion allowed, e.g. 1280 new tokens)")
    ap.add_argument("--out", default="fastgen.json")
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kernelzero.coder.prompts import PromptConfig, build_prompt
    from kernelzero.family import FamilyConfig, generate
    from kernelzero.models.fastgen import FastGenConfig, FastGenerator
    from kernelzero.models.scratch import build_from_corpus
    from kernelzero.tasks import Task

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    mods = generate(FamilyConfig(), n=64, seed=0)
    results = {"device": torch.cuda.get_device_name() if device == "cuda" else "cpu", "rows": args.rows,
               "new_tokens": args.new, "presets": {}}
    for name in args.presets.split(","):
        d = build_from_corpus(f"/tmp/fastgen_bench_{name}", [m.source for m in mods], name, seed=0)
        tok = AutoTokenizer.from_pretrained(d)
        model = AutoModelForCausalLM.from_pretrained(d, dtype=dtype).to(device).eval()
        chats = [build_prompt(Task(source=m.source, name=f"t{i}"), PromptConfig(style="compact"))
                 for i, m in enumerate(mods)]
        prompts = [list(tok.apply_chat_template([{"role": c["role"], "content": c["content"]} for c in ch],
                                                add_generation_prompt=True, tokenize=True)["input_ids"])
                   for ch in chats]
        rows = [prompts[i % len(prompts)] for i in range(args.rows)]
        longest = max(map(len, rows))
        gen = FastGenerator(model, FastGenConfig(max_batch=args.rows,
                                                 max_len=max(args.cache, longest + args.new)))
        no_eos = [-1]  # no row may stop early: every row decodes --new tokens
        gen.generate(rows, 16, temperature=1.0, eos_token_ids=no_eos, pad_token_id=tok.pad_token_id, seed=0)
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        outs = gen.generate(rows, args.new, temperature=1.0, eos_token_ids=no_eos,
                            pad_token_id=tok.pad_token_id, seed=1)
        if device == "cuda":
            torch.cuda.synchronize()
        fast_s = time.perf_counter() - t0
        fast_tokens = sum(len(o) for o in outs)
        hf_rows = args.hf_rows or args.rows
        enc = tok([tok.decode(r) for r in rows[:hf_rows]], return_tensors="pt", padding=True,
                  add_special_tokens=False).to(device)
        kw = dict(do_sample=True, temperature=1.0, max_new_tokens=args.new, min_new_tokens=args.new,
                  pad_token_id=tok.pad_token_id)
        model.generate(**enc, **{**kw, "max_new_tokens": 16, "min_new_tokens": 16})
        if device == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        hf = model.generate(**enc, **kw)
        if device == "cuda":
            torch.cuda.synchronize()
        hf_s = time.perf_counter() - t0
        hf_tokens = (hf.shape[1] - enc["input_ids"].shape[1]) * hf.shape[0]
        # Exactness, in float32: greedy outputs of both samplers on 8 prompts.
        m32 = AutoModelForCausalLM.from_pretrained(d, dtype=torch.float32).to(device).eval()
        g32 = FastGenerator(m32, FastGenConfig(max_batch=8, max_len=longest + 64, dtype="float32"))
        mine = g32.generate(prompts[:8], 64, temperature=0, eos_token_ids=[tok.eos_token_id],
                            pad_token_id=tok.pad_token_id)
        agree = 0
        for p, o in zip(prompts[:8], mine):
            ref = m32.generate(torch.tensor([p], device=device), do_sample=False, max_new_tokens=64,
                               pad_token_id=tok.pad_token_id)[0, len(p):].tolist()
            if tok.eos_token_id in ref:
                ref = ref[:ref.index(tok.eos_token_id) + 1]
            agree += ref == o
        params = sum(p.numel() for p in model.parameters())
        results["presets"][name] = {
            "parameters": params, "fast_tok_s": fast_tokens / fast_s, "fast_s": fast_s,
            "hf_tok_s": hf_tokens / hf_s, "hf_s": hf_s, "hf_rows": hf_rows,
            "speedup": (fast_tokens / fast_s) / (hf_tokens / hf_s),
            "cuda_graph": gen.graph_error is None and device == "cuda", "graph_error": gen.graph_error,
            "greedy_agree_fp32": f"{agree}/8"}
        r = results["presets"][name]
        print(f"{name:6s} {params / 1e6:6.1f}M  fast {r['fast_tok_s']:>10,.0f} tok/s  generate "
              f"{r['hf_tok_s']:>9,.0f} tok/s  x{r['speedup']:.1f}  greedy agree {r['greedy_agree_fp32']}"
              f"  graph {'yes' if r['cuda_graph'] else 'no: ' + str(r['graph_error'])}", flush=True)
        del model, m32, gen, g32
        if device == "cuda":
            torch.cuda.empty_cache()
    with open(args.out, "w") as f:
        json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
