"""Reports of a summary (from `kernelzero.metrics.summarize`): markdown, JSON, plots, a text table.

Covers: rendering numbers that already exist. Does not compute any metric (metrics.py does) and
does not read the store. Plots need matplotlib (drawn on an Agg canvas through `Figure`: no
pyplot, no global backend, no display); without it the markdown and JSON are still written and
the report says the plots were skipped.
Numbers are rounded here, for display only; summary.json keeps them unrounded.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

PLOT_SPEEDUPS = "speedup_hist.png"
PLOT_PASS_AT_K = "pass_at_k.png"


def _pct(m: dict | None) -> str:
    if not m or m.get("value") is None:
        return "n/a"
    s = f"{100 * m['value']:.1f}%"
    if m.get("lo") is not None:
        s += f" [{100 * m['lo']:.1f}, {100 * m['hi']:.1f}]"
    return s


def _times(m: dict | None) -> str:
    if not m or m.get("value") is None:
        return "n/a"
    s = f"{m['value']:.2f}x"
    if m.get("lo") is not None:
        s += f" [{m['lo']:.2f}, {m['hi']:.2f}]"
    return s


def _rows(summary: dict) -> dict[str, list[list[str]]]:
    """The report's tables as rows of strings (first row = header), shared by markdown and text."""
    ci = f"{int(round(100 * summary['ci']['level']))}% CI" if summary["ci"]["n_boot"] else "no CI"
    tables = {"pass@k": [["k", f"pass@k [{ci}]"]]}
    for k, m in summary["pass_at_k"].items():
        tables["pass@k"].append([k, _pct(m)])
    fp = summary["fast_p"]
    ps = next((list(v) for v in fp.values() if v), [])
    tables["fast_p"] = [["p", f"vs eager [{ci}]", f"vs torch.compile [{ci}]"]]
    for p in ps:
        tables["fast_p"].append([p, _pct((fp.get("eager") or {}).get(p)),
                                 _pct((fp.get("compile") or {}).get(p))])
    if not ps:
        tables["fast_p"].append(["any", "not measured", "not measured"])
    tables["geomean speedup"] = [["baseline", f"geomean speedup [{ci}]", "correct samples timed"]]
    for name, label in (("eager", "eager"), ("compile", "torch.compile")):
        m = summary["geomean_speedup"][name]
        tables["geomean speedup"].append([label, _times(m), str(m["n"])])
    if summary.get("statuses"):
        tables["statuses"] = [["status", "count", "share"]]
        for st, n in summary["statuses"].items():
            tables["statuses"].append([st, str(n), f"{100 * n / summary['n_records']:.1f}%"])
    return tables


def _headline(summary: dict) -> str:
    sp = summary["samples_per_task"]
    n = str(sp["min"]) if sp["min"] == sp["max"] else f"{sp['min']}..{sp['max']}"
    line = (f"{summary['n_tasks']} tasks, {summary['n_records']} samples ({n} per task), "
            f"{summary['n_correct']} correct")
    return line + _integrity(summary.get("integrity"))


def _integrity(integrity: dict | None) -> str:
    """The records' integrity check (kernelzero.integrity), when the summary came from a store."""
    if not integrity:
        return ""
    bad = sum(len(integrity.get(k, [])) for k in ("tampered", "unsigned", "other_key"))
    if not bad:
        return f"; integrity: all {integrity['verified']} records verified"
    return f"; integrity: {integrity['verified']} records verified, {bad} NOT VERIFIED"


def render_table(summary: dict) -> str:
    """A plain-text rendering of the summary for the terminal (no colour, no dependencies)."""
    lines = [_headline(summary)]
    for name, rows in _rows(summary).items():
        widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
        lines += ["", name]
        for j, r in enumerate(rows):
            lines.append("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())
            if j == 0:
                lines.append("  " + "  ".join("-" * w for w in widths))
    for note in summary.get("notes", []):
        lines.append(f"note: {note}")
    return "\n".join(lines) + "\n"


def _markdown(summary: dict, title: str, plots: list[str], plot_notes: list[str]) -> str:
    md = [f"# {title}", "", _headline(summary) + ".", ""]
    ci = summary["ci"]
    if ci["n_boot"]:
        md += [f"Intervals: {ci['method']}, {ci['n_boot']} resamples, seed {ci['seed']}.", ""]
    for name, rows in _rows(summary).items():
        md += [f"## {name}", "", "| " + " | ".join(rows[0]) + " |",
               "|" + "|".join("---" for _ in rows[0]) + "|"]
        md += ["| " + " | ".join(r) + " |" for r in rows[1:]] + [""]
    if plots or plot_notes:
        md += ["## Plots", ""]
        md += [f"![{p}]({p})" for p in plots] + [f"_{n}_" for n in plot_notes] + [""]
    if summary.get("notes"):
        md += ["## Notes", ""] + [f"- {n}" for n in summary["notes"]] + [""]
    return "\n".join(md)


def _plot_speedups(Figure, summary: dict, path: Path) -> bool:
    series = [(lbl, summary["speedups"][k]) for k, lbl in (("eager", "vs eager"),
                                                           ("compile", "vs torch.compile"))
              if summary["speedups"].get(k)]
    if not series:
        return False
    allv = [v for _, xs in series for v in xs]
    lo, hi = math.log10(min(allv + [0.5])), math.log10(max(allv + [2.0]))
    bins = [10 ** (lo + (hi - lo) * i / 40) for i in range(41)]
    fig = Figure(figsize=(7, 4))
    ax = fig.subplots()
    for lbl, xs in series:
        ax.hist(xs, bins=bins, alpha=0.6, label=f"{lbl} (n={len(xs)})")
    ax.set_xscale("log")
    from matplotlib.ticker import FuncFormatter, MaxNLocator
    label = FuncFormatter(lambda v, _: f"{v:g}x")
    ax.xaxis.set_major_formatter(label)
    if hi - lo <= 1.2:  # under about a decade: label the minor ticks too
        ax.xaxis.set_minor_formatter(label)
    ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    ax.axvline(1.0, color="black", linestyle="--", linewidth=1, label="1x (baseline)")
    ax.set_xlabel("speedup (baseline runtime / candidate runtime), log scale")
    ax.set_ylabel("correct samples")
    ax.set_title("Speedup of correct samples")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def _plot_pass_at_k(Figure, summary: dict, path: Path) -> bool:
    pk = summary["pass_at_k"]
    if not pk:
        return False
    ks = [int(k) for k in pk]
    vals = [100 * m["value"] for m in pk.values()]
    fig = Figure(figsize=(6, 4))
    ax = fig.subplots()
    ax.plot(ks, vals, marker="o", label="pass@k")
    if all(m["lo"] is not None for m in pk.values()):
        lo = [100 * m["lo"] for m in pk.values()]
        hi = [100 * m["hi"] for m in pk.values()]
        ax.fill_between(ks, lo, hi, alpha=0.25,
                        label=f"{int(round(100 * summary['ci']['level']))}% CI")
        if len(ks) == 1:
            ax.errorbar(ks, vals, yerr=[[vals[0] - lo[0]], [hi[0] - vals[0]]], capsize=4)
    ax.set_xlabel("k (samples drawn per task)")
    ax.set_ylabel("pass@k (%)")
    ax.set_ylim(0, 100)
    if len(ks) <= 20:
        ax.set_xticks(ks)
    ax.set_title(f"pass@k over {summary['n_tasks']} tasks")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return True


def write_report(summary: dict, out_dir: str | Path,
                 title: str = "KernelZero report") -> dict[str, Path]:
    """Write report.md, summary.json and (with matplotlib) PNG plots into `out_dir`.

    Returns {file name: path} for every file written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    files: dict[str, Path] = {}
    plots, plot_notes = [], []
    try:
        from matplotlib.figure import Figure  # no pyplot: no global backend, no display
    except ImportError:
        Figure = None
        plot_notes.append("Plots skipped: matplotlib is not installed "
                          "(pip install 'kernelzero[report]').")
    if Figure is not None:
        for name, draw, why in ((PLOT_SPEEDUPS, _plot_speedups, "no correct sample has a speedup"),
                                (PLOT_PASS_AT_K, _plot_pass_at_k, "no pass@k values")):
            if draw(Figure, summary, out / name):
                plots.append(name)
                files[name] = out / name
            else:
                plot_notes.append(f"{name} not drawn: {why}.")
    (out / "summary.json").write_text(json.dumps(summary, indent=2, allow_nan=False) + "\n")
    files["summary.json"] = out / "summary.json"
    (out / "report.md").write_text(_markdown(summary, title, plots, plot_notes))
    files["report.md"] = out / "report.md"
    return files


def render_heldout_change(change: dict) -> str:
    """summary.json's `heldout_change`: each set's greedy pass@1 after the last round minus before
    RL, paired by task, with its CI, and how many tasks were gained and lost."""
    lines = []
    for name, c in (change or {}).items():
        if c.get("delta") is None:
            continue
        holds = "above 0" if c["lo"] > 0 else "below 0" if c["hi"] < 0 else "includes 0"
        lines.append(f"{name}: round {c['to_round']} - round 0 = {100 * c['delta']:+.1f} points "
                     f"[{100 * c['lo']:+.1f}, {100 * c['hi']:+.1f}] (95% CI, paired by task; {holds}); "
                     f"{c['gained']} tasks gained, {c['lost']} lost of {c['n_tasks']}")
    return "".join(line + "\n" for line in lines)


def render_heldout(heldout: list[dict]) -> str:
    """A training run's held-out greedy pass@1 (summary.json's `heldout`): one row per round
    (round 0 is before RL), one column per set, each with its bootstrap CI."""
    if not heldout:
        return "no held-out evaluation yet\n"
    sets = list(heldout[0].get("sets", {}))
    rows = [["round"] + [f"{s} pass@1" for s in sets]]
    for h in heldout:
        cells = []
        for s in sets:
            f = h.get("sets", {}).get(s)
            cells.append(_pct({"value": f["pass@1"], "lo": f["pass@1_ci"][0], "hi": f["pass@1_ci"][1]})
                         if f else "n/a")
        rows.append([str(h["round"]) + (" (before RL)" if h["round"] == 0 else "")] + cells)
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return "".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() + "\n" for r in rows)
