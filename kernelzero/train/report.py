"""Per-round reports of the alternating loop: the Coder's held-out evaluation, the Proposer's
figures, the pool, and a plot across rounds.

Covers: `heldout_eval` (sample the current Coder on the held-out tasks, judge, summarise with
kernelzero.metrics, write the usual report with kernelzero.report) and `write_round_report`
(reports/round_{R}.json and .md, reports/rounds.png, TensorBoard scalars under `round/`).
Does not cover the training itself (loop.py) or how the metrics are defined (kernelzero.metrics).
"""
from __future__ import annotations

import json
from pathlib import Path

from kernelzero.train.config import TrainConfig
from kernelzero.train.judging import Judge

ROUND_SERIES = ("proposer_valid_rate", "frontier_reward_mean", "pool_size", "pass@1", "pass@k",
                "fast_1", "gate_open_rate")


def heldout_eval(cfg: TrainConfig, coder_model: str, tasks: list, judge: Judge, out_dir: Path,
                 context: dict) -> dict:
    """pass@k / fast_p of the Coder on held-out tasks; returns the metrics summary (+ timings)."""
    import time

    from kernelzero.coder.prompts import PromptConfig, build_prompt
    from kernelzero.metrics import summarize
    from kernelzero.models import SamplingConfig
    from kernelzero.report import write_report
    from kernelzero.train.ca_grpo import to_candidate
    from kernelzero.train.proposer_tools import coder_backend

    ho = cfg.heldout
    t0 = time.perf_counter()
    backend = coder_backend(cfg, coder_model)
    pc = PromptConfig(backend=cfg.coder.backend, example=cfg.coder.prompt_example)
    outs = backend.generate([build_prompt(t, pc) for t in tasks], ho.samples,
                            SamplingConfig(temperature=cfg.coder.temperature,
                                           max_new_tokens=cfg.coder.max_completion_tokens,
                                           seed=cfg.seed + context.get("round", 0)))
    del backend
    t_gen = time.perf_counter() - t0
    pairs = [(t, to_candidate(c)) for t, cs in zip(tasks, outs) for c in cs]
    verdicts = judge.judge(pairs, context=context)
    records = [{"task": t.key, "correct": v.correct, "speedup": v.speedup,
                "speedup_compile": v.speedup_compile, "status": v.status}
               for (t, _), v in zip(pairs, verdicts)]
    summary = summarize(records, ks=list(ho.ks), n_boot=200, seed=cfg.seed)
    summary["timings_s"] = {"generation": t_gen, "evaluation": judge.last.latency_s}
    write_report(summary, out_dir, title=f"Coder held-out evaluation, round {context.get('round')}")
    return summary


def _metric(summary: dict, *path):
    cur = summary
    for p in path:
        if not isinstance(cur, dict) or p not in cur or cur[p] is None:
            return None
        cur = cur[p]
    return cur.get("value") if isinstance(cur, dict) else cur


def p_histogram(pool, bins: int = 5) -> list[int]:
    """Counts of the pool's latest p in `bins` equal bins over [0, 1] (modules never measured left out)."""
    counts = [0] * bins
    for e in pool.entries():
        if e.latest_p is not None:
            counts[min(int(e.latest_p * bins), bins - 1)] += 1
    return counts


def round_figures(phases: dict, held: dict, pool, ks: tuple[int, ...], band=(0.0, 1.0)) -> dict:
    prop, coder = phases["proposer"], phases["coder"]
    kmax = str(max(ks))
    return {
        "proposer_valid_rate": prop.get("valid_rate"),
        "frontier_reward_mean": prop.get("frontier_mean"),
        "proposer_reward_mean": prop.get("reward_mean"),
        "valid_modules_this_round": prop.get("valid"),
        "in_band_this_round": prop.get("in_band"),
        "pool_size": len(pool),
        "pool_in_band": len(pool.in_band(*band)),
        "pool_p_histogram": {"bins": [0, 0.2, 0.4, 0.6, 0.8, 1.0], "counts": p_histogram(pool, 5)},
        "pass@1": _metric(held, "pass_at_k", "1"),
        "pass@k": _metric(held, "pass_at_k", kmax),
        "k": int(kmax),
        "fast_1": _metric(held, "fast_p", "eager", "1"),
        "gate_open_rate": coder.get("gate_open_rate"),
        "coder_train_correct_rate": coder.get("correct_rate"),
        "heldout_statuses": held.get("statuses", {}),
        "times_s": {"proposer": prop.get("times_s", {}), "coder": coder.get("times_s", {}),
                    "heldout": held.get("timings_s", {})},
    }


def write_round_report(out: Path, r: int, phases: dict, held: dict, pool, steps: list[dict], tb=None) -> dict:
    from kernelzero.train.config import from_dict
    import yaml

    cfg = from_dict(yaml.safe_load((out / "config.yaml").read_text()))
    fig = round_figures(phases, held, pool, cfg.heldout.ks, cfg.proposer.band)
    fig["round"] = r
    fig["steps"] = {p: phases[p].get("steps") for p in phases}
    rep = out / "reports"
    rep.mkdir(parents=True, exist_ok=True)
    (rep / f"round_{r}.json").write_text(json.dumps(fig, indent=1) + "\n")
    (rep / f"round_{r}.md").write_text(_markdown(fig))
    if tb is not None:
        for k in ROUND_SERIES:
            if isinstance(fig.get(k), (int, float)):
                tb.add_scalar(f"round/{k}", fig[k], r)
        tb.flush()
    plot_rounds(rep)
    return fig


def _fmt(v) -> str:
    if v is None:
        return "n/a"
    return f"{v:.3f}" if isinstance(v, float) else str(v)


def _markdown(fig: dict) -> str:
    t = fig["times_s"]
    lines = [f"# Round {fig['round']}", "",
             "| figure | value |", "|---|---|"]
    for k in ("proposer_valid_rate", "frontier_reward_mean", "valid_modules_this_round",
              "in_band_this_round", "pool_size", "pool_in_band",
              "pass@1", "pass@k", "fast_1", "gate_open_rate", "coder_train_correct_rate"):
        label = f"pass@{fig['k']}" if k == "pass@k" else k
        lines.append(f"| {label} | {_fmt(fig.get(k))} |")
    h = fig["pool_p_histogram"]
    lines += ["", "Pool p histogram (bins of 0.2 over [0, 1]): " + ", ".join(map(str, h["counts"])), "",
              "Held-out statuses: " + (", ".join(f"{k} {v}" for k, v in fig["heldout_statuses"].items()) or "none"),
              "", "Wall time (s): " + "; ".join(
                  f"{ph}: " + ", ".join(f"{k.replace('_s', '')} {v:.1f}" for k, v in t[ph].items())
                  for ph in ("proposer", "coder", "heldout") if t.get(ph)), ""]
    return "\n".join(lines)


def plot_rounds(rep: Path) -> Path | None:
    """reports/rounds.png: every round figure against the round number."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    figs = sorted((json.loads(p.read_text()) for p in rep.glob("round_*.json")), key=lambda f: f["round"])
    if not figs:
        return None
    fig = Figure(figsize=(12, 6))
    axes = fig.subplots(2, 4).ravel()
    xs = [f["round"] for f in figs]
    for ax, key in zip(axes, ROUND_SERIES):
        ys = [f.get(key) if f.get(key) is not None else float("nan") for f in figs]
        ax.plot(xs, ys, marker="o")
        ax.set_title(key)
        ax.set_xlabel("round")
        ax.set_xticks(xs)
    axes[-1].axis("off")
    fig.tight_layout()
    path = rep / "rounds.png"
    fig.savefig(path, dpi=80)
    return path
