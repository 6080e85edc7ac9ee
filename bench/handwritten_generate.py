"""Issue 22's user figure: `kernelzero generate M.py --device cpu -k K` with no `--model` (the
shipped Coder), run as a user runs it, on each hand-written family module
(kernelzero/examples/handwritten/), at one or more sampling temperatures. A module counts when the
command returns a verified kernel (`best` in its --json answer). Writes JSON with the per-module
outcomes, the share per temperature with a bootstrap CI, and the paired difference between the
first two temperatures.

    python bench/handwritten_generate.py --temperatures 0.7 1.0 -k 4 --out bench/results/handwritten.json
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

from ablation import _bootstrap  # noqa: E402 - bench/ is this script's own folder

ROOT = Path(__file__).resolve().parents[1]
MODULES = ROOT / "kernelzero" / "examples" / "handwritten"


def generate(module: Path, k: int, temperature: float, workers: int, seed: int,
             kernels: Path) -> dict:
    (kernels / f"T{temperature}").mkdir(parents=True, exist_ok=True)  # a folder, not a file name
    cmd = [sys.executable, "-m", "kernelzero", "generate", str(module), "--device", "cpu",
           "-k", str(k), "--temperature", str(temperature), "--workers", str(workers),
           "--seed", str(seed), "--out", str(kernels / f"T{temperature}"), "--json"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    wall = time.perf_counter() - t0
    try:
        doc = json.loads(r.stdout)
    except json.JSONDecodeError:
        return {"verified": False, "error": (r.stderr or r.stdout)[-300:], "wall_s": wall}
    statuses = [a.get("status") for a in doc.get("attempts") or []]
    return {"verified": doc.get("best") is not None, "statuses": statuses, "wall_s": round(wall, 1)}


def ci95(xs: list[float]) -> list[float]:
    """The percentile bootstrap over modules that bench/ablation.py uses for its arms."""
    return list(_bootstrap(xs)[1:])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--temperatures", type=float, nargs="+", default=[0.7])
    ap.add_argument("-k", type=int, default=4)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="bench/results/handwritten.json")
    ap.add_argument("--kernels", default="runs/handwritten_kernels",
                    help="where each verified kernel is written (a folder per temperature)")
    a = ap.parse_args()
    modules = sorted(MODULES.glob("*.py"))
    from tqdm import tqdm
    rows: dict[str, dict] = {}
    for t in a.temperatures:
        for m in tqdm(modules, desc=f"T={t}"):
            rows.setdefault(m.stem, {})[str(t)] = generate(m, a.k, t, a.workers, a.seed,
                                                               Path(a.kernels))
    summary = {}
    for t in a.temperatures:
        xs = [float(rows[m.stem][str(t)]["verified"]) for m in modules]
        summary[str(t)] = {"verified": int(sum(xs)), "modules": len(xs),
                           "share": sum(xs) / len(xs), "ci95": ci95(xs)}
    if len(a.temperatures) >= 2:
        t0, t1 = (str(t) for t in a.temperatures[:2])
        d = [float(rows[m.stem][t1]["verified"]) - float(rows[m.stem][t0]["verified"])
             for m in modules]
        summary[f"{t1} - {t0}"] = {"mean": sum(d) / len(d), "ci95": ci95(d)}
    doc = {"command": " ".join(sys.argv), "k": a.k, "seed": a.seed, "summary": summary,
           "modules": rows}
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps(doc, indent=1))
    for t, s in summary.items():
        print(t, json.dumps(s))
    print("->", a.out)


if __name__ == "__main__":
    main()
