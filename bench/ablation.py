"""The ablations of the seed's three claims, at equal compute, on held-out tasks, with CIs.

    python bench/ablation.py --base kernelzero/train/presets/ablation-cpu.yaml \
        --arms sft,uniform,frontier,frozen --seeds 0,1,2 --set proposer_steps=8 --out docs/ablation

Arms (each a `kernelzero train` run from the same cold-start Coder, the base config's `rounds`,
`coder_steps`, group size and prompts per step: the same Coder updates and judged rollouts):
    sft           no RL: the Coder as the cold start left it (the SFT-only baseline)
    uniform       CA-GRPO on family modules drawn uniformly (no Proposer, no frontier selection)
    frontier      CA-GRPO on the learned Proposer's modules in the frontier band only (no seed
                  tasks), the Proposer updated by GRPO on the frontier reward r_P = 1 - 2|p - 0.5|
    frozen        as frontier, the Proposer never updated (learning rate 0: same sampling)
    speed_first   CA-GRPO with the speed reward from the first step (alpha = 0)
    correct_only  correctness reward only (beta = 0)
(speed_first and correct_only differ from uniform only where candidates are timed: on a GPU.)

Resumable and accumulating: every (arm, seed) run lives in WORK/<arm>-s<seed>; a finished one
(summary.json written) is not run again, and results of earlier invocations are kept in
OUT.json under the base config's fingerprint (a run with another budget goes elsewhere). Each
invocation rewrites OUT.json, OUT.md (the tables) and OUT.png from everything done so far.

Every arm of a seed starts from the same Coder and is judged on the same held-out tasks, so its
round 0 (before RL) is the same for all: a new run gets the round-0 held-out verdicts of a run of
its seed already in WORK (copied lines, their integrity tags intact), and its round 0 costs the
sampling alone (on a GPU, judging 100 held-out modules takes minutes).

Figures: for every arm and held-out set, greedy pass@1 of the final round, pooled over seeds
(each task's correctness averaged over the seeds), with a percentile bootstrap CI over tasks;
and each arm's difference to `sft` (and `frontier` to `uniform`), paired by task, with its CI.
Where the held-out kernels were timed (eval.device=cuda), the same tables for fast_1 (correct
and strictly faster than eager, KernelBench's definition): the gate comparison reads those, e.g.
    python bench/ablation.py --base ablation-gate-gpu --arms sft,uniform,correct_only,speed_first \
        --seeds 0 --out docs/ablation-gate
"""
from __future__ import annotations

import argparse
import hashlib
import json
import random
import sys
import time
from pathlib import Path

ARMS = {
    "sft": {"rounds": 0, "proposer_model": "tiny"},
    "uniform": {"proposer_steps": 0, "proposer_model": "tiny"},
    "frontier": {"seed_tasks": "family:0"},
    "frozen": {"proposer": {"frozen": True}, "seed_tasks": "family:0"},
    "speed_first": {"proposer_steps": 0, "proposer_model": "tiny", "coder": {"alpha": 0.0}},
    "correct_only": {"proposer_steps": 0, "proposer_model": "tiny", "coder": {"beta": 0.0}},
}
RAN_ON = "ran_on.txt"  # in a run's folder: the machine and date it ran on
PAIRS = [("uniform", "sft"), ("frontier", "sft"), ("frontier", "uniform"), ("frozen", "uniform"),
         ("frontier", "frozen"), ("uniform", "correct_only"), ("speed_first", "uniform")]


def arm_config(base: dict, arm: str, seed: int, coder: str | None) -> dict:
    cfg = json.loads(json.dumps(base))
    for key, value in ARMS[arm].items():
        if isinstance(value, dict):
            cfg[key] = {**(cfg.get(key) or {}), **value}
        else:
            cfg[key] = value
    cfg["seed"] = seed
    cfg["name"] = f"{cfg.get('name', 'ablation')}-{arm}-s{seed}"
    if coder:
        cfg["coder_model"] = coder
    return cfg


def fingerprint(base: dict, coder: str | None) -> str:
    return hashlib.sha256(json.dumps([base, coder], sort_keys=True).encode()).hexdigest()[:12]


def final_outcomes(run_dir: Path) -> tuple[dict[str, dict[str, float]], dict[str, dict[str, float]]]:
    """(pass@1, fast_1) outcomes of the last held-out round's greedy samples: set -> task -> 0/1,
    from the outcomes the run wrote beside that round's report (reports/round_R/SET/outcomes.jsonl).
    Not from the verdict records: a pair judged in an earlier round (a task whose greedy kernel
    RL left unchanged) is answered from the cache and gets no new record. fast_1 (correct and
    speedup over eager > 1) only for sets whose kernels were timed (some speedup measured)."""
    from kernelzero.train.heldout import greedy_records

    summary = json.loads((run_dir / "summary.json").read_text())
    last = max(h["round"] for h in summary["heldout"])
    correct, fast = {}, {}
    for d in sorted((run_dir / "reports" / f"round_{last}").glob("*")):
        rows = greedy_records(d)
        if not rows:
            continue
        correct[d.name] = {r["task"]: float(bool(r["correct"])) for r in rows}
        if any(r.get("speedup") is not None for r in rows):
            fast[d.name] = {r["task"]: float(bool(r["correct"]) and (r.get("speedup") or 0.0) > 1.0)
                            for r in rows}
    if not correct:
        raise SystemExit(f"{run_dir}: no outcomes.jsonl under reports/round_{last}/ (a run made "
                         "before held-out outcomes were written: run it again)")
    return correct, fast


def share_baseline(work: Path, seed: int, run_dir: Path) -> tuple[int, str | None]:
    """Before a new run starts in `run_dir`: copy the round-0 held-out verdict records of another
    run of `seed` in `work` into `run_dir/verdicts.jsonl`, so the new run's judge answers its
    round 0 from its cache (which checks every record's tag as it loads them, as on a resume).
    Only round 0's held-out records: rollouts and later rounds are each arm's own. Returns
    (records copied, the run they came from)."""
    from kernelzero.train.judging import load_verdict_records

    for other in sorted(work.glob(f"*-s{seed}")):
        if other == run_dir:
            continue
        recs = [{k: v for k, v in r.items() if k != "integrity"} for r in load_verdict_records(other)
                if r.get("phase") == "heldout" and r.get("round") == 0]
        if recs:
            run_dir.mkdir(parents=True, exist_ok=True)
            (run_dir / "verdicts.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs),
                                                    encoding="utf-8")
            return len(recs), other.name
    return 0, None


def _bootstrap(values: list[float], n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    rng = random.Random(seed)
    n = len(values)
    means = sorted(sum(values[rng.randrange(n)] for _ in range(n)) / n for _ in range(n_boot))
    return sum(values) / n, means[int(0.025 * n_boot)], means[int(0.975 * n_boot) - 1]


def pooled(results: dict, arm: str) -> dict[str, dict[str, float]]:
    """set -> task -> correctness averaged over the arm's seeds."""
    per: dict[str, dict[str, list[float]]] = {}
    for seed_res in results.get(arm, {}).values():
        for s, tasks in seed_res.items():
            for t, c in tasks.items():
                per.setdefault(s, {}).setdefault(t, []).append(c)
    return {s: {t: sum(v) / len(v) for t, v in tasks.items()} for s, tasks in per.items()}


def tables(results: dict, metric: str = "pass@1") -> dict:
    from kernelzero.metrics import paired_difference

    arms = [a for a in ARMS if a in results]
    figs: dict = {"arms": {}, "differences": []}
    for arm in arms:
        p = pooled(results, arm)
        figs["arms"][arm] = {"seeds": sorted(results[arm]), "sets": {
            s: dict(zip((metric, "lo", "hi"), _bootstrap(list(v.values())))) | {"n_tasks": len(v)}
            for s, v in p.items()}}
    for a, b in PAIRS:
        if a in results and b in results:
            pa, pb = pooled(results, a), pooled(results, b)
            for s in sorted(set(pa) & set(pb)):
                d = paired_difference(pb[s], pa[s])  # a - b over the tasks both have
                if d["n_tasks"]:
                    figs["differences"].append({"a": a, "b": b, "set": s, "delta": d["delta"],
                                                "lo": d["lo"], "hi": d["hi"], "n_tasks": d["n_tasks"]})
    return figs


def markdown(figs: dict, meta: dict, metric: str = "pass@1", title: bool = True) -> str:
    sets = sorted({s for a in figs["arms"].values() for s in a["sets"]})
    head = [f"# Ablation: held-out greedy {metric} of the final round", "",
            f"Base config `{meta['base']}` (fingerprint {meta['fingerprint']}), Coder "
            f"`{meta['coder']}`; pooled over seeds, 95% bootstrap CI over tasks. "
            f"Tables written by `python bench/ablation.py` on {meta['written']} ({meta['machine']}).",
            *([f"Runs: {meta['ran_on']}."] if meta.get("ran_on") else []), ""]
    lines = (head if title else [f"## Greedy {metric} of the final round", ""]) + [
        "| arm | seeds | " + " | ".join(sets) + " |", "|---|---|" + "---|" * len(sets)]
    for arm, a in figs["arms"].items():
        cells = []
        for s in sets:
            m = a["sets"].get(s)
            cells.append(f"{m[metric]:.3f} [{m['lo']:.3f}, {m['hi']:.3f}] (n={m['n_tasks']})" if m else "n/a")
        lines.append(f"| {arm} | {len(a['seeds'])} | " + " | ".join(cells) + " |")
    if figs["differences"]:
        lines += ["", f"Paired differences in {metric} (a - b), by task:", "", "| a - b | set | delta | 95% CI | holds? |",
                  "|---|---|---|---|---|"]
        for d in figs["differences"]:
            verdict = "yes" if d["lo"] > 0 else ("no: lower" if d["hi"] < 0 else "not shown (CI spans 0)")
            lines.append(f"| {d['a']} - {d['b']} | {d['set']} | {d['delta']:+.3f} | "
                         f"[{d['lo']:+.3f}, {d['hi']:+.3f}] | {verdict} |")
    return "\n".join(lines) + "\n"


def plot(figs: dict, path: Path, metric: str = "pass@1") -> None:
    try:
        from matplotlib.figure import Figure
    except ImportError:
        return
    arms = list(figs["arms"])
    sets = sorted({s for a in figs["arms"].values() for s in a["sets"]})
    if not arms or not sets:
        return
    fig = Figure(figsize=(2 + 1.6 * len(sets) * max(1, len(arms)) / 3, 4))
    ax = fig.subplots()
    width = 0.8 / len(arms)
    for i, arm in enumerate(arms):
        xs, ys, lo, hi = [], [], [], []
        for j, s in enumerate(sets):
            m = figs["arms"][arm]["sets"].get(s)
            if m:
                xs.append(j + i * width)
                ys.append(m[metric])
                lo.append(m[metric] - m["lo"])
                hi.append(m["hi"] - m[metric])
        ax.bar(xs, ys, width, yerr=[lo, hi], capsize=2, label=arm)
    ax.set_xticks([j + 0.4 - width / 2 for j in range(len(sets))])
    ax.set_xticklabels(sets)
    ax.set_ylabel(f"greedy {metric} (final round)")
    ax.set_ylim(0, 1)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=90)


def _machine() -> str:
    import os

    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name()}, {os.cpu_count()} CPU cores"
    return f"CPU only, {os.cpu_count()} cores"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--base", required=True, help="the arms' common config (preset name or YAML)")
    ap.add_argument("--coder", default=None, help="the cold-start Coder every arm starts from "
                    "(default: the base config's coder_model)")
    ap.add_argument("--arms", default="sft,uniform,frontier,frozen")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--out", default="docs/ablation", help="OUT.json, OUT.md and OUT.png")
    ap.add_argument("--work", default="runs/ablation", help="where the runs live")
    ap.add_argument("--max-runs", type=int, default=0, help="stop after this many new runs (0: all)")
    ap.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a value of the base config for every arm, as `kernelzero train "
                         "--set` does (e.g. coder.learning_rate=1e-5); part of the fingerprint")
    args = ap.parse_args(argv)

    import yaml

    from kernelzero.train.config_file import PRESET_DIR, from_dict, merge_overrides, parse_overrides
    from kernelzero.train.loop import Loop

    base_path = Path(args.base)
    if not base_path.exists():
        base_path = PRESET_DIR / f"{args.base}.yaml"
    base = yaml.safe_load(base_path.read_text())
    try:
        merge_overrides(base, parse_overrides(args.set))
    except ValueError as e:
        ap.error(str(e))
    arms = [a.strip() for a in args.arms.split(",") if a.strip()]
    unknown = [a for a in arms if a not in ARMS]
    if unknown:
        ap.error(f"unknown arms {unknown}; choose from {', '.join(ARMS)}")
    proposer_arms = [a for a in arms if a in ("frontier", "frozen")]
    if proposer_arms and not base.get("proposer_steps"):
        ap.error(f"arms {proposer_arms} train on the Proposer's modules: the base config has "
                 "proposer_steps 0, so they would have no task (add --set proposer_steps=8)")
    seeds = [int(s) for s in args.seeds.split(",")]
    fp = fingerprint(base, args.coder)
    out = Path(args.out)
    store_path = out.with_suffix(".json")
    store = json.loads(store_path.read_text()) if store_path.exists() else {}
    entry = store.setdefault(fp, {"base": str(args.base), "coder": args.coder, "results": {}})
    work = Path(args.work) / fp
    new, stopped = 0, False
    for arm in arms:
        if stopped:
            break
        for seed in seeds:
            if str(seed) in entry["results"].get(arm, {}):
                continue
            run_dir = work / f"{arm}-s{seed}"
            if not (run_dir / "summary.json").exists():
                if args.max_runs and new >= args.max_runs:
                    continue
                print(f"== ablation {arm} seed {seed} -> {run_dir}", flush=True)
                if not run_dir.exists():
                    n, src = share_baseline(work, seed, run_dir)
                    if n:
                        print(f"   round 0: {n} held-out verdicts from {src} (the same Coder, the same "
                              "tasks)", flush=True)
                t0 = time.perf_counter()
                cfg = from_dict(arm_config(base, arm, seed, args.coder))
                try:
                    Loop(cfg, run_dir, resume=run_dir.exists()).run()
                except KeyboardInterrupt:  # a time limit's SIGINT (bench/learning_gpu.sh gate)
                    print(f"== {arm} seed {seed} stopped after {time.perf_counter() - t0:.0f} s, before "
                          f"its end: not counted (its work is in {run_dir}); the tables below hold the "
                          "runs that finished", flush=True)
                    stopped = True
                    break
                new += 1
                print(f"== {arm} seed {seed} done in {time.perf_counter() - t0:.0f} s", flush=True)
                # Where each run ran (a timed arm's speed-ups are of that card), kept in the run's
                # folder too: a later invocation that finds the run finished, without the store
                # this one writes (another call on the same machine), still knows it.
                (run_dir / RAN_ON).write_text(f"{_machine()}, {time.strftime('%Y-%m-%d')}\n")
            if (run_dir / RAN_ON).exists():
                entry.setdefault("ran_on", {}).setdefault(arm, {})[str(seed)] = \
                    (run_dir / RAN_ON).read_text().strip()
            correct, fast = final_outcomes(run_dir)
            entry["results"].setdefault(arm, {})[str(seed)] = correct
            if fast:
                entry.setdefault("fast_1", {}).setdefault(arm, {})[str(seed)] = fast
            store_path.parent.mkdir(parents=True, exist_ok=True)
            store_path.write_text(json.dumps(store, indent=1) + "\n")
    if not entry["results"]:
        print("no run has finished: no tables yet", flush=True)
        return 130 if stopped else 0
    figs = tables(entry["results"])
    entry["tables"] = figs
    meta = {"base": " ".join([args.base, *(f"--set {x}" for x in args.set)]), "fingerprint": fp, "coder": args.coder or base.get("coder_model"),
            "written": time.strftime("%Y-%m-%d"), "machine": _machine(),
            "ran_on": "; ".join(f"{arm} s{seed}: {where}" for arm, by in entry.get("ran_on", {}).items()
                                for seed, where in by.items())}
    md = markdown(figs, meta)
    plot(figs, out.with_suffix(".png"))
    if entry.get("fast_1"):  # timed held-out kernels: the same tables for fast_1
        entry["tables_fast_1"] = tables(entry["fast_1"], metric="fast_1")
        md += "\n" + markdown(entry["tables_fast_1"], meta, metric="fast_1", title=False)
        plot(entry["tables_fast_1"], out.with_name(out.name + "-fast_1.png"), metric="fast_1")
    store_path.write_text(json.dumps(store, indent=1) + "\n")
    out.with_suffix(".md").write_text(md)
    print(md)
    return 130 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
