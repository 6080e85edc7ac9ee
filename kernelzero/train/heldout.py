"""The Coder's held-out evaluation: tasks it never trained on, judged like any candidate.

Sets (HeldOutConfig names their sizes): `in_family` (op combinations, pairs and texts no
training module has; kernelzero.family.holdout), `ood_long` (4-6 ops, longer than trained),
`ood_pairs` (an adjacent op pair never seen in training), `handwritten` (family modules
written by hand, kernelzero/examples/handwritten) and `tasks` (a directory, e.g.
KernelBench problems, or the package's example tasks). Each set is sampled greedily (pass@1:
one completion per task at temperature 0) and, with `samples`, at the Coder's temperature
(pass@k); every completion is judged through the run's Judge (cached), and each set is
summarised with kernelzero.metrics (bootstrap CIs over tasks).

Does not cover the per-round report around it (round_report.py) or what is trained (loop.py).
"""
from __future__ import annotations

import time
from pathlib import Path

from kernelzero.train.config import TrainConfig


def heldout_sets(cfg: TrainConfig, default_tasks: Path) -> dict[str, list]:
    """The held-out task sets the config asks for, in report order (deterministic)."""
    from kernelzero.family import FamilyConfig
    from kernelzero.family import holdout as H
    from kernelzero.tasks import Task, load_tasks

    ho = cfg.heldout
    fam = FamilyConfig(**{**cfg.cold_start.family, "target": ho.family_target})
    sets: dict[str, list] = {}
    for name, n, make in (("in_family", ho.family, H.heldout_modules),
                          ("ood_long", ho.ood_long, H.ood_long_modules),
                          ("ood_pairs", ho.ood_pairs, H.ood_pair_modules)):
        if n:
            modules = make(n, seed=ho.seed, config=fam if name != "ood_pairs" else
                           FamilyConfig(**{**cfg.cold_start.family, "target": ho.family_target,
                                           "min_ops": max(2, fam.min_ops)}))
            sets[name] = [Task(source=m.source, name=f"{name}_{i}_{m.name}", meta=m.meta)
                          for i, m in enumerate(modules)]
    if ho.handwritten:
        sets["handwritten"] = load_tasks(default_tasks.parent / "handwritten")
    if ho.tasks is not None or not sets:
        tasks = load_tasks(ho.tasks or default_tasks)
        sets["tasks"] = tasks[-ho.limit:] if ho.limit else tasks
    return sets


def _records(pairs, verdicts, tasks_meta=True) -> list[dict]:
    return [{"task": t.key, "correct": v.correct, "speedup": v.speedup,
             "speedup_compile": v.speedup_compile, "status": v.status,
             **({"has_constants": bool(t.meta.get("has_constants"))} if tasks_meta and t.meta else {})}
            for (t, _), v in zip(pairs, verdicts)]


def _split_by_constants(records: list[dict], seed: int) -> dict:
    """pass@1 on tasks with and without numeric constants (family sets only)."""
    from kernelzero.metrics import summarize

    out = {}
    for key, flag in (("with_constants", True), ("without_constants", False)):
        rs = [r for r in records if r.get("has_constants") is flag]
        if rs:
            s = summarize(rs, ks=[1], n_boot=200, seed=seed)
            out[key] = {"n_tasks": s["n_tasks"], "pass@1": s["pass_at_k"]["1"]}
    return out


def sample_tasks(cfg: TrainConfig, backend, tasks: list, n: int, temperature: float,
                 seed: int) -> list[list[str]]:
    """`n` completions a task in the Coder's prompt style and length cap. A task the backend
    wrote nothing for (a replay record without it) gets one empty answer, so it is judged and
    stays in the pass@1 denominator as a failure."""
    from kernelzero.coder.prompts import build_prompt
    from kernelzero.models import SamplingConfig

    pc = cfg.coder.prompt_config()
    outs = backend.generate([build_prompt(t, pc) for t in tasks], n, SamplingConfig(
        temperature=temperature, top_p=1.0, max_new_tokens=cfg.coder.max_completion_tokens, seed=seed))
    return [cs or [""] for cs in outs]


def evaluate_coder(cfg: TrainConfig, coder_model: str, sets: dict[str, list], judge, context: dict,
                   log=print) -> dict:
    """Sample, judge and summarise every set; returns {"sets": {name: figures}, "timings_s"}.
    Each set's figures keep every task's outcome under `outcomes` (greedy, sampled): a task
    whose pair was judged before has no new verdict record, but it has its outcome here."""
    from kernelzero.metrics import summarize
    from kernelzero.coder.extract import to_candidate
    from kernelzero.train.proposer_tools import coder_backend

    ho = cfg.heldout
    seed = cfg.seed + 1000 * context.get("round", 0)
    backend = coder_backend(cfg, coder_model)
    t_gen = t_judge = 0.0
    figures: dict = {}
    for name, tasks in sets.items():
        fig: dict = {"n_tasks": len(tasks)}
        runs = []
        if ho.greedy:
            runs.append(("greedy", 1, 0.0))
        if ho.samples:
            runs.append(("sampled", ho.samples, cfg.coder.temperature))
        for label, n, temperature in runs:
            t0 = time.perf_counter()
            outs = sample_tasks(cfg, backend, tasks, n, temperature, seed)
            took = time.perf_counter() - t0
            t_gen += took
            pairs = [(t, to_candidate(c)) for t, cs in zip(tasks, outs) for c in cs]
            # A set can take minutes to judge (on cuda each kernel is built in its own process).
            log(f"  held-out {name} ({label}): {len(pairs)} kernels written in {took:.0f} s; judging them")
            t0 = time.perf_counter()
            verdicts = judge.judge(pairs, context={**context, "set": name, "sampling": label})
            t_judge += time.perf_counter() - t0
            records = _records(pairs, verdicts)
            fig.setdefault("outcomes", {})[label] = records
            ks = [1] if label == "greedy" else list(ho.ks)
            s = summarize(records, ks=ks, n_boot=500, seed=cfg.seed)
            fig[label] = s
            if label == "greedy":
                fig["by_constants"] = _split_by_constants(records, cfg.seed)
        main = fig.get("greedy") or fig["sampled"]
        fig["pass@1"] = main["pass_at_k"]["1"]
        if "sampled" in fig:
            fig["pass@k"] = fig["sampled"]["pass_at_k"]
        eager = (main.get("fast_p") or {}).get("eager")
        fig["fast_1"] = eager.get("1") if isinstance(eager, dict) else None
        fig["geomean_speedup"] = (main.get("geomean_speedup") or {}).get("eager")
        figures[name] = fig
        p = fig["pass@1"]
        ci = f" [{p['lo']:.2f}, {p['hi']:.2f}]" if p.get("lo") is not None else ""
        log(f"  held-out {name}: pass@1 {p['value']:.3f}{ci} over {len(tasks)} tasks")
    del backend
    return {"sets": figures, "timings_s": {"generation": t_gen, "evaluation": t_judge}}


def headline(result: dict, round_idx: int) -> dict:
    """The summary.json entry of one evaluation: the first set's figures, and every set's."""
    sets = result["sets"]
    first = next(iter(sets.values()))

    def value(m):
        return m.get("value") if isinstance(m, dict) else m

    return {"round": round_idx, "pass@1": value(first["pass@1"]),
            "pass@1_ci": [first["pass@1"].get("lo"), first["pass@1"].get("hi")],
            "pass@k": {k: value(v) for k, v in (first.get("pass@k") or {}).items()},
            "fast_1": value(first.get("fast_1")), "n_tasks": first["n_tasks"],
            "sets": {name: {"pass@1": value(f["pass@1"]), "pass@1_ci": [f["pass@1"].get("lo"), f["pass@1"].get("hi")],
                            "pass@k": {k: value(v) for k, v in (f.get("pass@k") or {}).items()},
                            "fast_1": value(f.get("fast_1")), "n_tasks": f["n_tasks"],
                            "by_constants": {k: value(v["pass@1"]) for k, v in f.get("by_constants", {}).items()}}
                     for name, f in sets.items()}}


def greedy_records(set_dir: Path) -> list[dict]:
    """The greedy rows (task, correct, speedup, status, ...) of one set's outcomes.jsonl; [] if
    the set has none."""
    import json

    path = Path(set_dir) / "outcomes.jsonl"
    if not path.exists():
        return []
    rows = (json.loads(line) for line in path.read_text().splitlines() if line.strip())
    return [r for r in rows if r.get("sampling") == "greedy"]


def greedy_outcomes(set_dir: Path) -> dict[str, float]:
    """task -> 1.0 / 0.0: the greedy outcome of each task in one set's outcomes.jsonl."""
    return {r["task"]: float(bool(r["correct"])) for r in greedy_records(set_dir)}


def change_since_start(reports: Path, last_round: int, seed: int = 0) -> dict:
    """Per held-out set: greedy pass@1 after round `last_round` minus before RL (round 0), paired
    by task, with its bootstrap CI (kernelzero.metrics.paired_difference); {} before any round."""
    from kernelzero.metrics import paired_difference

    if last_round < 1:
        return {}
    out = {}
    for set_dir in sorted(p for p in (Path(reports) / "round_0").glob("*") if p.is_dir()):
        before = greedy_outcomes(set_dir)
        after = greedy_outcomes(Path(reports) / f"round_{last_round}" / set_dir.name)
        if before and after:
            out[set_dir.name] = {"from_round": 0, "to_round": last_round,
                                 **paired_difference(before, after, seed=seed)}
    return out
