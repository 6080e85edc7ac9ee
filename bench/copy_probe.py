"""Where a Coder's tokens go wrong, read with the teacher's kernel as the answer (teacher forcing).

For held-out family modules, the Coder reads its prompt and the teacher's kernel, and at each
kernel token we ask whether its most likely next token is the teacher's. Tokens are split into:

- `copied_number`: inside a numeric literal of the kernel whose text is also in the module (a
  constant the Coder must copy: `0.918`, `1e-5`, `3.0`);
- `other_number`: inside a numeric literal that is not in the module (block sizes, 0.5 in GELU);
- `name`: inside an identifier that is also in the module (`self.lo`, `inp`, `weight`);
- `other`: the rest (the kernel's own structure).

Per class: token accuracy, and for copied numbers the share of literals with every token right
(what a greedy decoder needs). One greedy step per token, no sampling: a property of the weights.

    python bench/copy_probe.py [--model PATH] [--modules 100] [--json]

The model defaults to the shipped Coder; results go to bench/results/copy_probe.json.
"""
from __future__ import annotations

import argparse
import json
import re
import time
from pathlib import Path

import torch

NUMBER = re.compile(r"(?<![\w.])-?\d+(?:\.\d*)?(?:e-?\d+)?(?![\w.])")
NAME = re.compile(r"[A-Za-z_]\w*")
CLASSES = ("copied_number", "other_number", "name", "other")


def spans(completion: str, module: str) -> list[tuple[int, int, str]]:
    """(start, end, class) of the kernel's numeric literals and identifiers."""
    out = []
    for m in NUMBER.finditer(completion):
        lit = m.group().lstrip("-")
        copied = re.search(r"(?<![\w.])" + re.escape(lit) + r"(?![\w])", module) is not None
        out.append((m.start(), m.end(), "copied_number" if copied else "other_number"))
    names = set(NAME.findall(module))
    taken = [(s, e) for s, e, _ in out]
    for m in NAME.finditer(completion):
        if m.group() in names and not any(s <= m.start() < e for s, e in taken):
            out.append((m.start(), m.end(), "name"))
    return out


def classify(offsets, start: int, sp) -> list[str]:
    """The class of each token from its character offsets (relative to the full text)."""
    classes = []
    for a, b in offsets:
        a, b = a - start, b - start
        cls = "other"
        for s, e, c in sp:
            if a < e and b > s:  # the token overlaps the span
                cls = c
                break
        classes.append(cls)
    return classes


def probe(model_path: str, n: int, seed: int) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from kernelzero.coder.prompts import PromptConfig, build_prompt
    from kernelzero.family.holdout import heldout_modules
    from kernelzero.models import prompt_style_of
    from kernelzero.tasks import Task
    from kernelzero.teacher import compile_module

    tok = AutoTokenizer.from_pretrained(model_path)
    model = AutoModelForCausalLM.from_pretrained(model_path).eval()
    style = prompt_style_of(f"hf:{model_path}") or "compact"
    right = {c: 0 for c in CLASSES}
    total = {c: 0 for c in CLASSES}
    literals = {"all_right": 0, "n": 0}
    per_module = []
    for mod in heldout_modules(n, seed=seed):
        kernel = compile_module(mod.source).kernel_source
        if kernel is None:
            continue
        task = Task(source=mod.source, name=mod.name, meta=mod.meta)
        msgs = build_prompt(task, PromptConfig(style=style, example=False))
        answer = f"```python\n{kernel.strip()}\n```"
        prefix = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
        enc = tok(prefix + answer, return_offsets_mapping=True, add_special_tokens=False)
        n_prompt = len(tok(prefix, add_special_tokens=False)["input_ids"])
        ids = torch.tensor([enc["input_ids"]])
        with torch.no_grad():
            pred = model(ids).logits[0, :-1].argmax(-1)
        hit = (pred[n_prompt - 1:] == ids[0, n_prompt:]).tolist()
        sp = spans(answer, mod.source)
        classes = classify(enc["offset_mapping"][n_prompt:], len(prefix), sp)
        for h, c in zip(hit, classes):
            right[c] += h
            total[c] += 1
        # whole literals: every token overlapping a copied number right
        offs = enc["offset_mapping"][n_prompt:]
        for s, e, c in sp:
            if c != "copied_number":
                continue
            toks = [h for h, (a, b) in zip(hit, offs) if a - len(prefix) < e and b - len(prefix) > s]
            if toks:
                literals["n"] += 1
                literals["all_right"] += all(toks)
        per_module.append({"name": mod.name, "token_accuracy": sum(hit) / max(1, len(hit))})
    acc = {c: (right[c] / total[c] if total[c] else None) for c in CLASSES}
    return {"model": str(model_path), "modules": len(per_module), "seed": seed,
            "token_accuracy": acc, "tokens": total,
            "copied_literal_all_right": (literals["all_right"] / literals["n"]
                                         if literals["n"] else None),
            "copied_literals": literals["n"], "per_module": per_module}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="a Coder checkpoint (default: the shipped one)")
    ap.add_argument("--modules", type=int, default=100)
    ap.add_argument("--seed", type=int, default=123, help="the held-out stream (heldout's own)")
    ap.add_argument("--out", default="bench/results/copy_probe.json")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args()
    from kernelzero.models.shipped import shipped_model
    t0 = time.time()
    res = probe(args.model or shipped_model("coder"), args.modules, args.seed)
    res["wall_s"] = round(time.time() - t0, 1)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    if args.json:
        print(json.dumps({k: v for k, v in res.items() if k != "per_module"}, indent=1))
        return
    print(f"{res['modules']} held-out modules, teacher-forced next-token accuracy of {res['model']}:")
    for c in CLASSES:
        a = res["token_accuracy"][c]
        print(f"  {c:14s} {'-' if a is None else f'{a:6.1%}'}  over {res['tokens'][c]} tokens")
    lit = res["copied_literal_all_right"]
    print(f"  copied literals with every token right: {'-' if lit is None else f'{lit:.1%}'} "
          f"of {res['copied_literals']}")
    print(f"({res['wall_s']} s; {args.out})")


if __name__ == "__main__":
    main()
