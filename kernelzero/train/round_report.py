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
                "fast_1", "gate_open_rate", "mixed_group_rate")


def heldout_eval(cfg: TrainConfig, coder_model: str, sets: dict, judge: Judge, out_dir: Path,
                 context: dict, log=print) -> dict:
    """The Coder on every held-out set (kernelzero.train.heldout); writes each set's usual report
    (report.md, summary.json, plots) and every task's outcome (outcomes.jsonl) under
    out_dir/<set>/, and returns the summary.json entry
    (`heldout.headline`) with the full figures under `detail`."""
    from kernelzero.report import write_report
    from kernelzero.train.heldout import evaluate_coder, headline

    result = evaluate_coder(cfg, coder_model, sets, judge, context, log=log)
    for name, fig in result["sets"].items():
        main = fig.get("greedy") or fig["sampled"]
        write_report(main, Path(out_dir) / name,
                     title=f"Coder held-out evaluation ({name}), round {context.get('round')}")
        # every task's outcome, one JSON line each: what paired comparisons across runs read
        with open(Path(out_dir) / name / "outcomes.jsonl", "w") as f:
            for sampling, records in fig.pop("outcomes", {}).items():
                for rec in records:
                    f.write(json.dumps({"sampling": sampling, **rec}) + "\n")
    entry = headline(result, context.get("round", 0))
    entry["timings_s"] = result["timings_s"]
    entry["statuses"] = (next(iter(result["sets"].values())).get("greedy") or {}).get("statuses", {})
    return entry


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
        "pass@1": held.get("pass@1"),
        "pass@1_ci": held.get("pass@1_ci"),
        "pass@k": (held.get("pass@k") or {}).get(kmax),
        "k": int(kmax),
        "fast_1": held.get("fast_1"),
        "heldout_sets": held.get("sets", {}),
        "gate_open_rate": coder.get("gate_open_rate"),
        "mixed_group_rate": coder.get("mixed_group_rate"),
        "coder_train_correct_rate": coder.get("correct_rate"),
        "heldout_statuses": held.get("statuses", {}),
        "frontier_band_share": prop.get("band_share"),
        "times_s": {"proposer": prop.get("times_s", {}), "coder": coder.get("times_s", {}),
                    "heldout": held.get("timings_s", {})},
    }


def write_round_report(out: Path, r: int, phases: dict, held: dict, pool, steps: list[dict], tb=None) -> dict:
    from kernelzero.train.config_file import from_dict
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
    fig = Figure(figsize=(12, 9))
    axes = fig.subplots(3, 3).ravel()
    xs = [f["round"] for f in figs]
    for ax, key in zip(axes, ROUND_SERIES):
        ys = [f.get(key) if f.get(key) is not None else float("nan") for f in figs]
        ax.plot(xs, ys, marker="o")
        ax.set_title(key)
        ax.set_xlabel("round")
        ax.set_xticks(xs)
    for ax in axes[len(ROUND_SERIES):]:
        ax.axis("off")
    fig.tight_layout()
    path = rep / "rounds.png"
    fig.savefig(path, dpi=80)
    return path


def plot_heldout(rep: Path, heldout: list[dict]) -> Path | None:
    """reports/heldout.png: greedy pass@1 of every held-out set against the round (round 0 is
    before RL), with the bootstrap CI as error bars."""
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return None
    if not heldout:
        return None
    rep.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    names = list(heldout[0].get("sets", {}))
    for name in names:
        pts = [(h["round"], h["sets"][name]) for h in heldout if name in h.get("sets", {})]
        xs = [r for r, _ in pts]
        ys = [s["pass@1"] for _, s in pts]
        lo = [s["pass@1"] - (s["pass@1_ci"][0] if s["pass@1_ci"][0] is not None else s["pass@1"]) for _, s in pts]
        hi = [(s["pass@1_ci"][1] if s["pass@1_ci"][1] is not None else s["pass@1"]) - s["pass@1"] for _, s in pts]
        ax.errorbar(xs, ys, yerr=[lo, hi], marker="o", capsize=3, label=name)
    ax.set_xlabel("round (0 = before RL)")
    ax.set_ylabel("greedy pass@1")
    ax.set_ylim(0, 1)
    ax.set_xticks([h["round"] for h in heldout])
    ax.legend()
    ax.set_title("Coder held-out pass@1")
    fig.tight_layout()
    path = rep / "heldout.png"
    fig.savefig(path, dpi=90)
    return path


def phase_line(info: dict) -> str:
    """What a phase did (loop.py), in one line a person reads: its modules or its kernels."""
    pct = lambda x: "n/a" if x is None else f"{100 * x:.0f}%"  # noqa: E731
    if info["phase"] == "proposer":
        rej = ", ".join(f"{k} {n}" for k, n in sorted(info.get("rejections", {}).items(),
                                                      key=lambda kv: -kv[1])[:3])
        return (f"  proposer: {info.get('valid', 0)}/{info.get('modules', 0)} modules valid, "
                f"{info.get('in_band', 0)} in the band" + (f"; refused: {rej}" if rej else ""))
    return (f"  coder: {info.get('tasks', 0)} tasks ({info.get('pool_tasks', 0)} from the pool), "
            f"kernels correct {pct(info.get('correct_rate'))}, speed gate open "
            f"{pct(info.get('gate_open_rate'))}, groups with a reward spread "
            f"{pct(info.get('mixed_group_rate'))}")


def mean(xs) -> float | None:
    xs = [float(x) for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def count(xs) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in xs:
        out[x] = out.get(x, 0) + 1
    return dict(sorted(out.items(), key=lambda kv: -kv[1]))
