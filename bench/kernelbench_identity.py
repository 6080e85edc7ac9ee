"""KernelBench at its real sizes (issue 24): every problem judged with its own reference as the
candidate, which must be `correct` every time; KernelBench's own harness on 20 of them; the
degenerate-task audit of Levels 1-2. One results file, each part merged into it.

    python bench/kernelbench_identity.py judge --levels 1 2 3 [--limit N] [--budget-s S]
    python bench/kernelbench_identity.py harness --harness DIR   # their eval_kernel_against_ref
    python bench/kernelbench_identity.py audit --levels 1 2 [--limit N]
    python bench/kernelbench_identity.py plan [--card-gib 140]   # CPU: footprints and the plan

judge: the identity candidates (`class ModelNew(Model): pass`) go through `kernelzero eval
--tasks KB --samples DIR --policy none` with default settings, a slice at a time (`--limit`
problems not yet in the store; `--budget-s`: no new slice once that much wall time has gone),
so a run cut short resumes where it stopped (the store skips what is judged). The results file
gets, per problem: status, reason when not correct, wall time, GPU time (the timed calls'
medians times the calls made, candidate and reference), the workers' peak device memory, the
task's footprint; and the totals, with each slice's wall time and the device's peak memory
(nvidia-smi, sampled). harness: the same identity candidates of Levels 1 and 2 problems 1-10
judged by KernelBench's own `eval_kernel_against_ref` (5 correctness trials, 100 timed calls,
one fresh process per problem, as its eval script does), and by `kernelzero eval` in a fresh
store, each timed whole. audit: `audit_task` on each problem (resumable through a JSON-lines
file beside the results); the results file lists every flagged problem with its reasons.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

# KernelBench's problems: beside the checkout (../shared), or carried into it (shared/, or the
# ignored third_party/kernelbench)
DEFAULT_KB = next((p for p in (ROOT.parent / "shared" / "kernelbench", ROOT / "shared" / "kernelbench",
                               ROOT / "third_party" / "kernelbench") if p.is_dir()),
                  ROOT.parent / "shared" / "kernelbench")
DEFAULT_OUT = ROOT / "bench" / "results" / "kernelbench_identity_h200.json"
HARNESS_PROBLEMS = [(1, p) for p in range(1, 11)] + [(2, p) for p in range(1, 11)]
RUN = "identity"


def identity_source(task_source: str) -> str:
    return task_source.rstrip() + "\n\n\nclass ModelNew(Model):\n    pass\n"


def sample_name(level: int, problem: int) -> str:
    return f"level_{level}_problem_{problem}_sample_0_kernel.py"


def write_samples(tasks, folder: Path) -> None:
    """The identity candidates of `tasks` (only they) in `folder`, KernelBench's run layout."""
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    for t in tasks:
        (folder / sample_name(t.level, t.problem_id)).write_text(identity_source(t.source))


def load_results(out: Path) -> dict:
    try:
        return json.loads(out.read_text())
    except (OSError, ValueError):
        return {}


def save_results(out: Path, section: str, value) -> None:
    data = load_results(out)
    data[section] = value
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
    os.replace(tmp, out)


class DevicePeak:
    """The device's used memory, sampled from nvidia-smi while the block runs (no CUDA context
    in this process); its peak in bytes, or None where there is no nvidia-smi."""

    def __init__(self, period_s: float = 0.25):
        self.period_s, self.peak = period_s, None
        self._stop = threading.Event()
        self._tool = shutil.which("nvidia-smi")

    def __enter__(self):
        if self._tool:
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        if self._tool:
            self._thread.join(5)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                out = subprocess.run([self._tool, "--query-gpu=memory.used",
                                      "--format=csv,noheader,nounits"], capture_output=True,
                                     text=True, timeout=5).stdout.split()
                used = max(int(x) for x in out) << 20
                self.peak = max(self.peak or 0, used)
            except (OSError, ValueError, subprocess.SubprocessError):
                pass
            self._stop.wait(self.period_s)


def run_eval(kb: Path, samples: Path, db: Path, run: str, extra: list[str]) -> tuple[float, int]:
    """`kernelzero eval` on `samples` (default settings, --policy none); (wall s, exit code)."""
    cmd = [sys.executable, "-m", "kernelzero", "eval", "--tasks", str(kb), "--samples",
           str(samples), "--policy", "none", "--db", str(db), "--run", run, *extra]
    t0 = time.perf_counter()
    rc = subprocess.run(cmd, cwd=ROOT).returncode
    return time.perf_counter() - t0, rc


def verdict_rows(db: Path, run: str) -> dict:
    """Task key -> the stored verdict's row (status, times, memory)."""
    from eval_throughput import gpu_seconds

    from kernelzero.eval import EvalConfig
    from kernelzero.store import Store
    cfg = EvalConfig()
    rows = {}
    with Store(db) as store:
        for rec in store.records(run):
            v = store.get(rec["key"], run=run)
            if v is None and rec["integrity"] == "other_key":
                # Judged on a machine whose key did not travel (before the key was kept
                # beside the store): its record is read, and flagged as unverifiable here.
                v = _verdict_unchecked(store, rec["key"], run)
            if v is None:
                continue
            mem = v.memory or {}
            ref_s = 0.0
            if v.ref_runtime_ms:  # the reference's calls: trials, re-checked calls, warm-up, timed
                calls = v.trials_run + cfg.timing_checked_calls + cfg.timing_warmup + \
                    v.ref_runtime_ms.n
                ref_s = calls * v.ref_runtime_ms.median_ms / 1e3
            rows[rec["task"]] = {
                "status": v.status, "reason": None if v.correct else v.reason[:400],
                "flags": v.flags, "wall_s": round(v.wall_s or 0.0, 3),
                "gpu_s": round(gpu_seconds(v, cfg) + ref_s, 4),
                "peak_mem_gib": round(((mem.get("candidate_peak_bytes") or 0)
                                       + (mem.get("reference_peak_bytes") or 0)) / 2**30, 3),
                "admitted_gib": round((mem.get("admitted_bytes") or 0) / 2**30, 3),
                "streamed": bool(mem.get("streamed")), "footprint": mem.get("footprint"),
                "integrity": rec["integrity"]}
    return rows


def _verdict_unchecked(store, key: str, run: str):
    from kernelzero.eval.verdict import Verdict
    row = store._db.execute("SELECT verdict_json FROM verdicts WHERE key = ? AND run = ? "
                            "ORDER BY id DESC LIMIT 1", (key, run)).fetchone()
    return Verdict.from_dict(json.loads(row[0])) if row else None


def cmd_judge(args) -> int:
    from kernelzero.store import Store
    from kernelzero.tasks import load_tasks
    tasks = load_tasks(args.kb, levels=args.levels)
    work = Path(args.work)
    db = work / "identity.db"
    work.mkdir(parents=True, exist_ok=True)
    prior = load_results(args.out).get("identity", {})
    slices = prior.get("slices", []) if prior.get("db") == str(db) else []
    t_start = time.perf_counter()
    while True:
        with Store(db) as store:
            done = {r["task"] for r in store.records(RUN)}
        todo = [t for t in tasks if t.key not in done][: args.limit or None]
        if not todo or (args.budget_s and time.perf_counter() - t_start > args.budget_s):
            break
        write_samples(todo, work / "slice")
        print(f"judging {len(todo)} problem(s), {len(done)} judged before", flush=True)
        t_slice, interrupted = time.perf_counter(), False
        with DevicePeak() as peak:
            try:
                wall, rc = run_eval(args.kb, work / "slice", db, RUN, args.eval_args)
            except KeyboardInterrupt:  # a time limit: keep what the store holds, resume later
                wall, rc, interrupted = time.perf_counter() - t_slice, 130, True
        slices.append({"problems": len(todo), "wall_s": round(wall, 2), "exit_code": rc,
                       "device_peak_gib": round(peak.peak / 2**30, 2) if peak.peak else None,
                       "first": todo[0].key, "last": todo[-1].key})
        save_results(args.out, "identity", summarise(db, tasks, slices))
        if interrupted:
            print("interrupted: what was judged is in the store; run again to go on", flush=True)
        if rc != 0 or not args.limit:
            break
    result = summarise(db, tasks, slices)
    save_results(args.out, "identity", result)
    t = result["totals"]
    print(f"{t['judged']}/{t['problems']} judged: {t['statuses']}; wall {t['wall_s']:.0f} s "
          f"(slices), GPU {t['gpu_s']:.1f} s; -> {args.out}")
    return 0


def summarise(db: Path, tasks, slices: list) -> dict:
    rows = verdict_rows(db, RUN)
    statuses: dict = {}
    for r in rows.values():
        statuses[r["status"]] = statuses.get(r["status"], 0) + 1
    levels = sorted({t.level for t in tasks})
    peaks = [s["device_peak_gib"] for s in slices if s.get("device_peak_gib")]
    return {"db": str(db), "levels": levels, "slices": slices, "problems": rows,
            "not_correct": {k: r["reason"] for k, r in rows.items() if r["status"] != "correct"},
            "totals": {"problems": len(tasks), "judged": len(rows), "statuses": statuses,
                       "correct": statuses.get("correct", 0),
                       "invalid_task": statuses.get("invalid_task", 0),
                       "wall_s": round(sum(s["wall_s"] for s in slices), 2),
                       "verdict_wall_s": round(sum(r["wall_s"] for r in rows.values()), 2),
                       "gpu_s": round(sum(r["gpu_s"] for r in rows.values()), 3),
                       "streamed": sum(r["streamed"] for r in rows.values()),
                       "device_peak_gib": max(peaks) if peaks else None}}


# ----------------------------------------------------------------------------- harness
def cmd_harness(args) -> int:
    """Ours and theirs on the same 20 identity candidates, each timed whole. Saved after every
    problem of theirs; `--resume` keeps ours and what of theirs is done, and runs the rest."""
    from kernelzero.tasks import load_tasks
    by_id = {(t.level, t.problem_id): t for t in load_tasks(args.kb, levels=[1, 2])}
    tasks = [by_id[p] for p in HARNESS_PROBLEMS if p in by_id][: args.limit or None]
    work = Path(args.work) / "harness"
    prior = load_results(args.out).get("harness") if args.resume else None
    if prior is None:
        shutil.rmtree(work, ignore_errors=True)
        write_samples(tasks, work / "samples")
        with DevicePeak() as peak:
            ours_wall, rc = run_eval(args.kb, work / "samples", work / "ours.db", "harness",
                                     args.eval_args)
        prior = {"problems": [t.key for t in tasks], "ours_wall_s": round(ours_wall, 2),
                 "ours_exit_code": rc, "ours": verdict_rows(work / "ours.db", "harness"),
                 "device_peak_gib_ours": round(peak.peak / 2**30, 2) if peak.peak else None,
                 "theirs": {},
                 "settings": "theirs: eval_kernel_against_ref, 5 correctness trials, 100 timed "
                             "calls (cuda_event), measure_performance, one process per problem"}
    result = prior
    if not (work / "samples").is_dir():  # resumed on a fresh machine
        write_samples(tasks, work / "samples")
    for t in tasks:
        if t.key in result["theirs"]:
            continue
        cand = work / "samples" / sample_name(t.level, t.problem_id)
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, __file__, "_kb_one", "--harness", args.harness,
                                   "--ref", str(t.path), "--cand", str(cand)],
                                  capture_output=True, text=True, timeout=args.timeout_s)
            out, err = proc.stdout, proc.stderr
        except subprocess.TimeoutExpired:
            out, err = "", f"timed out after {args.timeout_s:g} s"
        wall = time.perf_counter() - t0
        line = next((x for x in out.splitlines()[::-1] if x.startswith("KB-RESULT ")), None)
        res = json.loads(line[len("KB-RESULT "):]) if line else {"error": (err or out)[-400:]}
        result["theirs"][t.key] = {**res, "wall_s": round(wall, 2)}
        print(f"theirs {t.key}: {res.get('correctness')} in {wall:.1f} s", flush=True)
        _harness_totals(result)
        save_results(args.out, "harness", result)
    _harness_totals(result)
    save_results(args.out, "harness", result)
    print(f"ours {result['ours_wall_s']:.0f} s vs theirs {result['theirs_wall_s']:.0f} s over "
          f"{len(result['theirs'])} problems (ratio {result['ours_over_theirs']}); ours not "
          f"correct: {result['ours_false_verdicts']}")
    return 0


def _harness_totals(result: dict) -> None:
    theirs = result["theirs"]
    wall = sum(r["wall_s"] for r in theirs.values())
    result["theirs_wall_s"] = round(wall, 2)
    result["theirs_done"] = len(theirs)
    complete = len(theirs) == len(result["problems"])
    result["ours_over_theirs"] = round(result["ours_wall_s"] / wall, 3) if complete and wall \
        else None
    result["ours_false_verdicts"] = [k for k, r in result["ours"].items()
                                     if r["status"] != "correct"]
    result["theirs_not_correct"] = [k for k, r in theirs.items() if not r.get("correctness")]


def cmd_kb_one(args) -> int:
    """One problem through KernelBench's harness, in this fresh process (stand-ins for the
    imports its package needs only for LLM calls: bench/kb_standins, after the real ones)."""
    sys.path.insert(0, str(Path(args.harness) / "src"))
    sys.path.append(str(ROOT / "bench" / "kb_standins"))
    import torch
    from kernelbench.eval import eval_kernel_against_ref
    ref, cand = Path(args.ref).read_text(), Path(args.cand).read_text()
    build = Path(args.cand).parent / f"build_{Path(args.cand).stem}"
    res = eval_kernel_against_ref(ref, cand, num_correct_trials=5, num_perf_trials=100,
                                  measure_performance=True, build_dir=str(build),
                                  device=torch.device("cuda:0"), backend="cuda")
    out = {"compiled": getattr(res, "compiled", None),
           "correctness": getattr(res, "correctness", None),
           "runtime_us": getattr(res, "runtime", None),
           "ref_runtime_us": getattr(res, "ref_runtime", None),
           "metadata": {k: str(v)[:200] for k, v in (getattr(res, "metadata", {}) or {}).items()}}
    print("KB-RESULT " + json.dumps(out), flush=True)
    return 0


# ----------------------------------------------------------------------------- plan
def cmd_plan(args) -> int:
    """Every problem's footprint (footprint.measure, in a child process: the problems' code never
    runs in this one) and what the judge plans for it on a card of --card-gib: kept or streamed,
    the memory a reference run and a judgement are admitted for. CPU only: no device needed."""
    from kernelzero.eval import EvalConfig, RuntimeConfig
    from kernelzero.eval.device.footprint import Footprint
    from kernelzero.eval.device.memory_plan import MemoryPlan
    from kernelzero.tasks import load_tasks
    tasks = load_tasks(args.kb, levels=args.levels)
    child = subprocess.run([sys.executable, __file__, "_measure", "--kb", str(args.kb), "--levels",
                            *map(str, args.levels)], capture_output=True, text=True, cwd=ROOT)
    measured = json.loads(child.stdout.strip().splitlines()[-1])
    cfg = EvalConfig(device="cuda")
    spares = cfg.spare_pool_size
    rt = cfg.runtime
    budget_mb = int(args.card_gib * 1024) - rt.memory_margin_mb - spares * rt.worker_overhead_mb
    budget = RuntimeConfig(memory_budget_mb=budget_mb)
    plan = MemoryPlan(EvalConfig(device="cuda", runtime=budget), spares)
    n = cfg.correctness_trials + 1 + 3 + cfg.timing_checked_calls  # + poke, hardening, re-checks
    rows, GiB = {}, 2 ** 30
    for t in tasks:
        fp = Footprint.from_dict(measured.get(t.key))
        streamed = plan.streamed(fp, n)
        rows[t.key] = {"known": fp.known, "fake_forward": bool(fp.forward_bytes),
                       "input_gib": round(fp.input_bytes / GiB, 3),
                       "output_gib": round(fp.output_bytes / GiB, 3),
                       "streamed": streamed,
                       "reference_gib": round(plan.reference_bytes(fp, n, streamed) / GiB, 2),
                       "judgement_gib": round(plan.judgement_bytes(
                           fp, n - cfg.timing_checked_calls, cfg.timing_checked_calls,
                           streamed) / GiB, 2)}
    worst = max(rows.items(), key=lambda kv: kv[1]["judgement_gib"])
    result = {"card_gib": args.card_gib, "budget_gib": round(budget_mb / 1024, 1),
              "problems": len(rows), "streamed": sum(r["streamed"] for r in rows.values()),
              "unknown": [k for k, r in rows.items() if not r["known"]],
              "no_fake_forward": [k for k, r in rows.items() if not r["fake_forward"]],
              "largest_judgement": {"task": worst[0], **worst[1]},
              "over_budget": [k for k, r in rows.items()
                              if r["judgement_gib"] > budget_mb / 1024], "rows": rows}
    save_results(args.out, "plan", result)
    print(f"{len(rows)} problems: {result['streamed']} streamed, largest judgement "
          f"{worst[1]['judgement_gib']} GiB ({worst[0]}) of a {result['budget_gib']} GiB budget; "
          f"over budget: {result['over_budget']}; footprint unknown: {result['unknown']}")
    return 0


def cmd_measure(args) -> int:
    """(child of `plan`) every problem's footprint as one JSON line."""
    import importlib.util

    import torch

    from kernelzero.eval.device.footprint import measure
    from kernelzero.tasks import load_tasks
    out = {}
    for t in load_tasks(args.kb, levels=args.levels):
        spec = importlib.util.spec_from_file_location(f"kb_{t.level}_{t.problem_id}", t.path)
        module = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(module)
            out[t.key] = measure(torch, module).to_dict()
        except Exception as e:  # noqa: BLE001 - reported as unknown
            print(f"{t.key}: {type(e).__name__}: {e}", file=sys.stderr)
    print(json.dumps(out))
    return 0


# ----------------------------------------------------------------------------- audit
def cmd_audit(args) -> int:
    from concurrent.futures import ThreadPoolExecutor

    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.eval.audit import audit_task
    from kernelzero.tasks import load_tasks
    tasks = load_tasks(args.kb, levels=args.levels)
    log = Path(args.work) / "audit.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    done = {}
    if log.exists():
        for line in log.read_text().splitlines():
            try:
                r = json.loads(line)
                done[r["task"]] = r
            except (ValueError, KeyError):
                continue
    todo = [] if args.write_only else [t for t in tasks if t.key not in done][: args.limit or None]
    device = args.device or ("cuda" if shutil.which("nvidia-smi") else "cpu")
    lock = threading.Lock()
    t0 = time.perf_counter()

    def one(ev, t):
        t1 = time.perf_counter()
        res = audit_task(ev, t)
        row = {"task": t.key, "ok": res.ok, "reasons": res.reasons,
               "warnings": res.details.get("warnings", []),
               "peak_mem_gib": round((res.details.get("peak_mem_bytes") or 0) / 2**30, 3),
               "wall_s": round(time.perf_counter() - t1, 2)}
        with lock:
            with log.open("a") as f:
                f.write(json.dumps(row) + "\n")
            done[t.key] = row
        print(f"{'OK  ' if res.ok else 'FLAG'} {t.key}: {'; '.join(res.reasons)[:160]}",
              flush=True)

    if todo:
        with Evaluator(EvalConfig(device=device, max_workers=args.workers)) as ev, \
                ThreadPoolExecutor(args.workers) as pool:
            list(pool.map(lambda t: one(ev, t), todo))
    rows = [done[t.key] for t in tasks if t.key in done]
    codes = lambda r: {x.split(":", 1)[0] for x in r["reasons"]}  # noqa: E731
    result = {"levels": args.levels, "audited": len(rows), "problems": len(tasks),
              "wall_s_this_run": round(time.perf_counter() - t0, 1),
              "probe_failed": [r["task"] for r in rows if "probe_failed" in codes(r)],
              "flagged": {r["task"]: r["reasons"] for r in rows if not r["ok"]},
              "degenerate": {r["task"]: r["reasons"] for r in rows if codes(r) & {
                  "zeros", "constant", "identity", "seed_independent"}},
              "rows": rows}
    save_results(args.out, "audit", result)
    print(f"audited {len(rows)}/{len(tasks)}: {len(result['flagged'])} flagged, "
          f"{len(result['probe_failed'])} probe_failed -> {args.out}")
    return 0


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="part", required=True)
    for name in ("judge", "harness", "audit", "plan", "_kb_one", "_measure"):
        q = sub.add_parser(name)
        q.add_argument("--kb", type=Path, default=DEFAULT_KB, help="KernelBench's problems")
        q.add_argument("--out", type=Path, default=DEFAULT_OUT, help="the results file")
        q.add_argument("--work", default=str(ROOT / "runs" / "kb_identity"),
                       help="store, samples and logs (kept between runs: resumable)")
        q.add_argument("--limit", type=int, default=0, help="problems per slice (0: all)")
        q.add_argument("--levels", type=int, nargs="+", default=[1, 2, 3])
        q.add_argument("--eval-args", nargs=argparse.REMAINDER, default=[],
                       help="further `kernelzero eval` arguments (default settings without)")
    sub.choices["judge"].add_argument("--budget-s", type=float, default=0,
                                      help="no new slice once this much wall time has gone")
    sub.choices["harness"].add_argument("--harness", required=True,
                                        help="a copy of the KernelBench repository")
    sub.choices["harness"].add_argument("--timeout-s", type=float, default=300)
    sub.choices["harness"].add_argument("--resume", action="store_true",
                                        help="keep ours and theirs done so far; run the rest")
    sub.choices["_kb_one"].add_argument("--harness", required=True)
    sub.choices["_kb_one"].add_argument("--ref", required=True)
    sub.choices["_kb_one"].add_argument("--cand", required=True)
    sub.choices["plan"].add_argument("--card-gib", type=float, default=140.0)
    sub.choices["audit"].add_argument("--workers", type=int, default=4)
    sub.choices["audit"].add_argument("--device", choices=["cpu", "cuda"], default=None)
    sub.choices["audit"].add_argument("--write-only", action="store_true",
                                      help="audit nothing: write the results file from the log "
                                           "(a run cut short by its time limit)")
    args = p.parse_args()
    if args.part in ("judge", "harness", "audit", "plan") and not (args.kb / "level1").is_dir():
        p.error(f"--kb {args.kb}: no level1/ there; give the folder that holds KernelBench's "
                "level1/ ... level4/ (a wrong folder would load whatever tasks lie under it)")
    return {"judge": cmd_judge, "harness": cmd_harness, "audit": cmd_audit, "plan": cmd_plan,
            "_kb_one": cmd_kb_one, "_measure": cmd_measure}[args.part](args)


if __name__ == "__main__":
    sys.exit(main())
