"""The learned Proposer of the op family: an API set in, a PyTorch module out.

A small model made from zero like the Coder (kernelzero.models.scratch): distilled from the family
generator (the composer) on (op set -> module) pairs, then updated by GRPO on the frontier reward
in the loop's Proposer phases (proposer_grpo.py). Its prompt names the ops and carries the
Coder's feedback: the ops whose modules the Coder fails most, and, where candidates are timed,
the ops whose correct kernels are slower than eager (the seed's "failures and inefficiencies").

    family_tools(cfg, evaluator, coder_model) -> (ProposerTools, close)   the loop's hook
    make_proposer(cfg, out_dir, log) -> model dir                         the Proposer's cold start

A proposed module is valid when it parses, has the KernelBench format, is no duplicate, the
teacher compiles it (it is in the family the Coder learns), it runs in the sandbox and the audit
finds it not degenerate (kernelzero.propose.validate's sandbox stage) within the memory cap. The
pool records it under the API set its prompt asked for.

Does not cover the reward (propose/reward.py), the GRPO phase (proposer_grpo.py) or the pool.
"""
from __future__ import annotations

import random
from pathlib import Path

from kernelzero.train.config import TrainConfig

FEEDBACK_LINES = 3


def proposer_prompt(ops: list[str], feedback: str = "") -> list[dict]:
    text = "PyTorch module with: " + ", ".join(ops)
    if feedback:
        text += "\nCoder feedback: " + feedback
    return [{"role": "user", "content": text}]


def api_set(module_meta: dict) -> list[str]:
    """A module's API set: its distinct ops, sorted (the order is the Proposer's to choose)."""
    return sorted(set(module_meta["ops"]))


def sample_api_set(rng: random.Random, k: int, family: dict | None = None) -> list[str]:
    """An op set of the family's own co-occurrence: a training module's ops (k is a hint: a set
    of about that many ops is preferred)."""
    from kernelzero.family import FamilyConfig
    from kernelzero.family.generator import make_module

    cfg = FamilyConfig(**{**(family or {}), "min_ops": max(1, min(k, 3)), "max_ops": max(1, min(k, 3))})
    from kernelzero.family.holdout import role
    while True:
        m = make_module(cfg, seed=rng.randrange(2**31), index=0)
        if role(m.meta) == "train":
            return api_set(m.meta)


def feedback_text(per_op: dict[str, dict], rng: random.Random | None = None) -> str:
    """One line from per-op figures {op: {"p": solve rate, "slow": share slower than eager}}."""
    if not per_op:
        return ""
    fails = sorted((v["p"], op) for op, v in per_op.items() if v.get("p") is not None)[:FEEDBACK_LINES]
    slow = sorted(((-v["slow"], op) for op, v in per_op.items() if v.get("slow")),)[:FEEDBACK_LINES]
    parts = []
    if fails:
        parts.append("fails on " + ", ".join(f"{op} ({p:.0%})" for p, op in fails))
    if slow:
        parts.append("slow on " + ", ".join(f"{op} ({-s:.0%})" for s, op in slow))
    return "; ".join(parts)


def _random_feedback(rng: random.Random, ops: list[str]) -> str:
    """SFT prompts carry feedback lines of the real format with random figures, so the format is
    familiar when GRPO starts to reward modules that follow it."""
    if rng.random() < 0.3:
        return ""
    picked = rng.sample(ops, min(len(ops), rng.randint(1, FEEDBACK_LINES)))
    return feedback_text({op: {"p": rng.random(), "slow": rng.random() if rng.random() < 0.3 else 0.0}
                          for op in picked})


def pool_feedback(entries, verdict_speedups: dict[str, list[float]] | None = None) -> str:
    """Feedback from the task pool: each op's mean p over the modules that use it, and (where
    timed) the share of its correct kernels slower than eager. `verdict_speedups`: speed-ups over
    eager of the correct kernels of each pool entry, by its task hash."""
    per_op: dict[str, dict] = {}
    for e in entries:
        p = e.latest_p
        if p is None:
            continue
        for op in e.apis:
            d = per_op.setdefault(op, {"ps": [], "speeds": []})
            d["ps"].append(p)
            d["speeds"] += (verdict_speedups or {}).get(e.task_hash, [])
    return feedback_text({op: {"p": sum(d["ps"]) / len(d["ps"]),
                               "slow": (sum(s < 1.0 for s in d["speeds"]) / len(d["speeds"])
                                        if d["speeds"] else 0.0)} for op, d in per_op.items()})


def sft_rows(n: int, seed: int, family: dict | None = None) -> list[dict]:
    """(API set + feedback -> canonical module) rows from the family generator's training modules."""
    from kernelzero.family import FamilyConfig
    from kernelzero.family.holdout import training_modules
    from kernelzero.tasks import canonical_source

    rng = random.Random(f"proposer-sft/{seed}")
    rows = []
    for m in training_modules(n, seed=seed + 101, config=FamilyConfig(**(family or {}))):
        ops = api_set(m.meta)
        rows.append({"prompt": proposer_prompt(ops, _random_feedback(rng, ops)),
                     "completion": [{"role": "assistant",
                                     "content": f"```python\n{canonical_source(m.source)}```"}]})
    return rows


def make_proposer(cfg: TrainConfig, out_dir: Path, log=print) -> str:
    """The Proposer's cold start: generator rows, a tokenizer on them, a `cold_start.preset`
    model, SFT (the Coder's cold-start SFT settings, or its time budget). Returns the model dir."""
    import json

    from kernelzero.models.scratch import build_from_corpus, is_complete
    from kernelzero.train.cold_start import corpus, within_budget
    from kernelzero.train.sft import run_sft

    out = Path(out_dir)
    done = out / "proposer_cold_start.json"
    if done.exists():
        return json.loads(done.read_text())["model"]
    cs = cfg.cold_start
    rows = sft_rows(cfg.proposer.sft_modules, seed=cfg.seed, family=cs.family)
    init = out / "model-init"
    if not is_complete(init):
        build_from_corpus(init, corpus(rows[:cs.tokenizer_rows]), cs.preset, seed=cfg.seed + 1)
    sft = cs.sft_config()
    if cs.time_budget_s:
        sft = within_budget(sft, cs.time_budget_s / 2)
    log(f"proposer cold start: SFT on {len(rows)} (op set -> module) rows")
    figures = run_sft(str(init), rows, out / "model", sft, log=log)
    figures["model"] = str(out / "model")
    from kernelzero.train.cold_start import _record
    _record(out / "model", init, role="proposer", made_by="proposer cold start (family generator)")
    figures["static_validity"] = static_validity(cfg, out / "model", n=64)
    v = figures["static_validity"]
    log(f"proposer cold start: {v['in_family']}/{v['n']} sampled modules parse and are in the family")
    done.write_text(json.dumps(figures, indent=1) + "\n")
    return figures["model"]


def static_validity(cfg: TrainConfig, model_dir: Path, n: int = 64) -> dict:
    """Of n modules the Proposer writes for sampled op sets (at its temperature): how many parse
    as KernelBench modules the teacher compiles. No sandbox run: a cheap figure, not the
    validation check (which the loop's Proposer phases apply to every module)."""
    from kernelzero.models import SamplingConfig, load_backend
    from kernelzero.propose.llm import ParseError, parse_module
    from kernelzero.teacher import compile_module

    rng = random.Random(f"proposer-validity/{cfg.seed}")
    sets = [sample_api_set(rng, rng.choice(cfg.proposer.api_set_sizes), cfg.cold_start.family)
            for _ in range(n)]
    backend = load_backend(f"hf:{model_dir}", device="cuda" if cfg.device == "cuda" else "cpu")
    outs = backend.generate([proposer_prompt(a) for a in sets], 1, SamplingConfig(
        temperature=cfg.proposer.temperature, max_new_tokens=cfg.proposer.max_completion_tokens,
        seed=cfg.seed))
    in_family = 0
    for (text,) in outs:
        try:
            in_family += compile_module(parse_module(text)).ok
        except ParseError:
            continue
    return {"n": n, "in_family": in_family}


def family_tools(cfg: TrainConfig, evaluator, coder_model: str):
    """ProposerTools for the op family: prompt, parse, the validation check, the frontier reward
    and the current Coder's side (proposer_tools.coder_side)."""
    from kernelzero.propose.dedup import Deduper, canonical_hash
    from kernelzero.propose.reward import frontier_reward
    from kernelzero.propose.validate import ValidationConfig, Validator
    from kernelzero.tasks.task import static_check_task
    from kernelzero.teacher import compile_module
    from kernelzero.train.proposer_grpo import ProposerTools
    from kernelzero.train.proposer_tools import coder_side, parse_or_none

    validator = Validator(evaluator, ValidationConfig(target=cfg.proposer.target))
    seen = Deduper()

    def validate(task, apis):
        try:
            compile(task.source, "<proposed>", "exec", dont_inherit=True)
        except SyntaxError as e:
            return False, f"parse: does not parse: {e.msg} (line {e.lineno})"
        problem = static_check_task(task.source)
        if problem:
            return False, f"format: {problem}"
        taught = compile_module(task.source)
        if not taught.ok:
            return False, f"outside_family: {taught.reason}"
        chash = canonical_hash(task.source)
        if chash in seen.hashes:
            return False, "duplicate: a module with the same canonical form was accepted before"
        res = validator.run_checks(task)
        if not res.ok:
            return False, "; ".join(res.reasons)
        seen.hashes.add(chash)
        return True, "ok"

    generate, coder_prompt, to_candidate, close = coder_side(cfg, coder_model)
    tools = ProposerTools(prompt=proposer_prompt, parse=parse_or_none, validate=validate, reward=frontier_reward,
                          coder_generate=generate, coder_prompt=coder_prompt, to_candidate=to_candidate)
    return tools, close
