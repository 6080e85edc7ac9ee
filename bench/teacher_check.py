"""The teacher against the evaluator: compose family modules, compile each, judge every kernel.

    python bench/teacher_check.py --n 2000 --target cpu --seed 0             # CPU, interpreter
    python bench/teacher_check.py --n 100 --target gpu --device cuda --seed 0  # H200: + speedups

Composes N modules across the kinds (kernelzero.family), compiles each with the teacher
(kernelzero.teacher), judges every kernel with the evaluator (strict tolerance, strict policy;
on CPU through the Triton interpreter, on cuda compiled and timed against eager), and writes
OUT/teacher_check.json (one record per module) and OUT/summary.md (correct rate per kind, per
op, per chain length, with and without constants; every failure with its reason; the kernels'
sizes; on a GPU the geomean speedup, overall and on elementwise chains of >= 2 ops). Prints the
correct rate. Modules the teacher refuses count as not correct, with their reason. Stopped early
(Ctrl-C, or SIGTERM from `timeout`), it writes the verdicts it reached (the rest `not_judged`).
"""
from __future__ import annotations

import argparse
import json
import math
import signal
import statistics
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000, help="modules to compose (default 2000)")
    ap.add_argument("--target", choices=["cpu", "gpu"], default="cpu", help="module sizes")
    ap.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where kernels are judged")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--kinds", default="elementwise,rowwise,matmul")
    ap.add_argument("--min-ops", type=int, default=1)
    ap.add_argument("--max-ops", type=int, default=3)
    ap.add_argument("--workers", type=int, default=None, help="judging workers (default: 2 on cpu, 8 on cuda)")
    ap.add_argument("--timing-budget-s", type=float, default=2.0, help="timing budget per module on cuda")
    ap.add_argument("--no-timing", action="store_true", help="on cuda: judge correctness only")
    ap.add_argument("--family", action="append", default=[], metavar="KEY=VALUE",
                    help="a FamilyConfig field (e.g. p_kb_docstrings=0.3); repeatable")
    ap.add_argument("--out", default=None, help="results directory (default: runs/teacher_check-TARGET-DEVICE-nN-sS)")
    args = ap.parse_args(argv)

    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.family import FamilyConfig, generate
    from kernelzero.train.config_file import parse_overrides
    from kernelzero.tasks import Candidate, Task
    from kernelzero.teacher import compile_module

    out = Path(args.out or f"runs/teacher_check-{args.target}-{args.device}-n{args.n}-s{args.seed}")
    out.mkdir(parents=True, exist_ok=True)
    try:  # the same KEY=VALUE reading as `kernelzero train --set`
        cfg = FamilyConfig(kinds=tuple(args.kinds.split(",")), min_ops=args.min_ops, max_ops=args.max_ops,
                           target=args.target, **parse_overrides(args.family, "--family", "p_kb_docstrings=0.3"))
    except (ValueError, TypeError) as e:
        ap.error(str(e))
    t0 = time.perf_counter()
    modules = generate(cfg, args.n, seed=args.seed)
    t_compose = time.perf_counter() - t0
    records, pairs, where = [], [], []
    t0 = time.perf_counter()
    for i, m in enumerate(modules):
        r = compile_module(m.source)
        rec = {"index": i, "name": m.name, **{k: m.meta[k] for k in ("kind", "ops", "chain_length", "has_constants")},
               "teacher": r.kind if r.ok else None, "teacher_reason": r.reason, "status": "unsupported",
               "reason": r.reason, "speedup": None, "kernel_lines": None, "kernel_chars": None}
        if r.ok:
            rec["kernel_lines"] = r.kernel_source.count("\n")
            rec["kernel_chars"] = len(r.kernel_source)
            pairs.append((Task.from_source(m.source, f"{i}_{m.name}"), Candidate(r.kernel_source)))
            where.append(i)
        records.append(rec)
    t_compile = time.perf_counter() - t0
    print(f"composed {len(modules)} modules in {t_compose:.1f} s; the teacher compiled {len(pairs)} "
          f"in {t_compile:.1f} s; judging on {args.device} ...", file=sys.stderr, flush=True)
    workers = args.workers or (8 if args.device == "cuda" else 2)
    ecfg = EvalConfig(device=args.device, max_workers=workers, timing_budget_s=args.timing_budget_s,
                      timing=not args.no_timing)
    judged: dict[int, object] = {}
    t0 = time.perf_counter()

    def progress(i, v):
        judged[i] = v
        if len(judged) % 50 == 0 or len(judged) == len(pairs):
            rate = len(judged) / (time.perf_counter() - t0)
            print(f"  judged {len(judged)}/{len(pairs)} ({rate:.1f}/s)", file=sys.stderr, flush=True)

    def stop(signum, frame):  # `timeout` sends SIGTERM: keep what was judged
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, stop)
    interrupted = False
    try:
        with Evaluator(ecfg) as ev:
            ev.judge_many(pairs, on_verdict=progress)
    except KeyboardInterrupt:
        interrupted = True
        print(f"interrupted: writing the {len(judged)} verdicts reached", file=sys.stderr, flush=True)
    t_judge = time.perf_counter() - t0
    for k, i in enumerate(where):
        rec, v = records[i], judged.get(k)
        if v is None:
            rec.update(status="not_judged", reason="the run stopped before judging it")
            continue
        rec.update(status=v.status, reason=v.reason, speedup=v.speedup,
                   runtime_ms=v.runtime_ms.median_ms if v.runtime_ms else None,
                   ref_runtime_ms=v.ref_runtime_ms.median_ms if v.ref_runtime_ms else None,
                   wall_s=v.wall_s, phases_s=v.phases_s)  # where a judgement's time went
    summary = summarise(records, {"compose_s": t_compose, "compile_s": t_compile, "judge_s": t_judge},
                        vars(args))
    summary["interrupted"] = interrupted
    (out / "teacher_check.json").write_text(json.dumps({"summary": summary, "modules": records}, indent=1))
    (out / "summary.md").write_text(markdown(summary, records))
    rate = summary["correct_rate"]
    print(f"correct {summary['correct']}/{summary['n']} ({100 * rate:.2f}%); unsupported "
          f"{summary['unsupported']}; judged in {t_judge:.0f} s"
          + (f"; geomean speedup on elementwise chains >= 2 ops: {summary['geomean_speedup_chains2']:.2f}x"
             if summary.get("geomean_speedup_chains2") else "") + f" -> {out}/summary.md")
    return 1 if interrupted else 0


def _geomean(xs):
    xs = [x for x in xs if x]
    return math.exp(statistics.fmean(math.log(x) for x in xs)) if xs else None


def _rate(recs):
    return {"n": len(recs), "correct": sum(r["status"] == "correct" for r in recs),
            "rate": (sum(r["status"] == "correct" for r in recs) / len(recs)) if recs else None}


def summarise(records, times, args) -> dict:
    n = len(records)
    correct = sum(r["status"] == "correct" for r in records)
    by = defaultdict(lambda: defaultdict(list))
    for r in records:
        by["kind"][r["kind"]].append(r)
        by["chain_length"][str(r["chain_length"])].append(r)
        by["constants"]["with" if r["has_constants"] else "without"].append(r)
        for op in set(r["ops"]):
            by["op"][op].append(r)
    lines = [r["kernel_lines"] for r in records if r["kernel_lines"]]
    chars = [r["kernel_chars"] for r in records if r["kernel_chars"]]
    chains2 = [r["speedup"] for r in records if r["kind"] == "elementwise" and r["chain_length"] >= 2
               and r["status"] == "correct"]
    return {
        "n": n, "correct": correct, "correct_rate": correct / n if n else 0.0,
        "unsupported": sum(r["status"] == "unsupported" for r in records),
        "statuses": dict(Counter(r["status"] for r in records)),
        "by": {k: {g: _rate(v) for g, v in sorted(d.items())} for k, d in by.items()},
        "kernel_lines": {"median": statistics.median(lines), "max": max(lines)} if lines else None,
        "kernel_chars": {"median": statistics.median(chars), "max": max(chars)} if chars else None,
        "geomean_speedup": _geomean([r["speedup"] for r in records if r["status"] == "correct"]),
        "geomean_speedup_by_kind": {k: _geomean([r["speedup"] for r in v if r["status"] == "correct"])
                                    for k, v in by["kind"].items()},
        "geomean_speedup_chains2": _geomean(chains2),
        "times_s": {k: round(v, 1) for k, v in times.items()}, "args": args,
        "judgement_phases_s": _phase_medians(records),
    }


def _phase_medians(records) -> dict:
    """The median seconds of each judging phase over the judged modules (Verdict.phases_s: the
    reference's wait, a worker's take, the first trial with its compile, the timing, ...)."""
    phases = defaultdict(list)
    for r in records:
        for k, v in (r.get("phases_s") or {}).items():
            if k.endswith("_s") and isinstance(v, (int, float)):
                phases[k].append(v)
        if r.get("wall_s") is not None:
            phases["wall_s"].append(r["wall_s"])
    return {k: round(statistics.median(v), 3) for k, v in sorted(phases.items())}


def markdown(s, records) -> str:
    out = [f"# Teacher check: {s['args']['n']} family modules, target {s['args']['target']}, "
           f"judged on {s['args']['device']} (seed {s['args']['seed']})", "",
           f"Correct: **{s['correct']}/{s['n']} ({100 * s['correct_rate']:.2f}%)**; statuses: "
           + ", ".join(f"{k} {v}" for k, v in sorted(s["statuses"].items())) + ".",
           f"Times: compose {s['times_s']['compose_s']} s, compile {s['times_s']['compile_s']} s, "
           f"judge {s['times_s']['judge_s']} s."
           + (" **Interrupted**: modules not reached are `not_judged`." if s.get("interrupted") else ""), ""]
    if s.get("judgement_phases_s"):
        out += ["Median seconds of a judgement, by phase: " + ", ".join(
            f"{k[:-2]} {v}" for k, v in s["judgement_phases_s"].items()) + ".", ""]
    if s["kernel_lines"]:
        out.append(f"Kernel files: median {s['kernel_lines']['median']} lines / "
                   f"{s['kernel_chars']['median']} chars (~{s['kernel_chars']['median'] // 4} tokens), "
                   f"max {s['kernel_lines']['max']} lines.")
    if s["geomean_speedup"]:
        out.append(f"Geomean speedup vs eager: {s['geomean_speedup']:.2f}x overall; elementwise chains "
                   f"of >= 2 ops: {s['geomean_speedup_chains2'] or float('nan'):.2f}x; by kind: "
                   + ", ".join(f"{k} {v:.2f}x" for k, v in s["geomean_speedup_by_kind"].items() if v) + ".")
    for key in ("kind", "chain_length", "constants", "op"):
        out += ["", f"## By {key.replace('_', ' ')}", "", "| group | modules | correct | rate |", "|---|---|---|---|"]
        for g, r in s["by"][key].items():
            out.append(f"| {g} | {r['n']} | {r['correct']} | {100 * r['rate']:.1f}% |")
    fails = [r for r in records if r["status"] != "correct"]
    out += ["", f"## Not correct ({len(fails)})", ""]
    out += [f"- {r['index']}_{r['name']} ({r['kind']}: {' > '.join(r['ops'])}): {r['status']}: "
            f"{(r['reason'] or '')[:300]}" for r in fails] or ["(none)"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    sys.exit(main())
