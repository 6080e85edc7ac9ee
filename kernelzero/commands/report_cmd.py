"""`kernelzero report`: summarize one run of the results store into tables, JSON and plots.

Covers: argument parsing, choosing the run, the records' integrity, and where the files go. The
numbers come from `kernelzero.metrics`, the files from `kernelzero.report`, the records from
`kernelzero.store`.

Integrity: every record carries a tag only the judge can make (kernelzero.integrity). A run with a
record whose tag does not check out (edited behind the judge's back, untagged, or tagged with
another user's key) is refused unless `--unverified skip` (report without those records) or
`--unverified include` (report them, flagged); either way the report says how many there were.
"""
from __future__ import annotations

import argparse
import json
import re
from pathlib import Path


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "report", help="summarize a run's verdicts: pass@k, fast_p, speedups (table, JSON, plots)",
        description="Summarize the verdicts of one run in a results database: pass@k, fast_p "
                    "against eager and torch.compile, geometric-mean speedup, each with a "
                    "bootstrap 95% CI over tasks. Writes report.md, summary.json and PNG plots.")
    p.add_argument("--db", default="kernelzero.db", help="results database (default: %(default)s)")
    p.add_argument("--train", default=None, metavar="RUN_DIR",
                   help="report a training run instead (a `kernelzero train --out` directory): "
                        "held-out pass@1 before RL and after each round, per set, with CIs")
    p.add_argument("--run", default=None,
                   help="run to report (default: the most recent run in the database)")
    p.add_argument("--out", default=None,
                   help="directory for the report files (default: runs/<run>/)")
    p.add_argument("--json", action="store_true", help="print one JSON document instead of tables")
    p.add_argument("--boot", type=int, default=1000, metavar="N",
                   help="bootstrap resamples for the confidence intervals; 0 = none "
                        "(default: %(default)s)")
    p.add_argument("--unverified", choices=UNVERIFIED, default="refuse",
                   help="records whose integrity tag does not check out (edited after the judge "
                        "wrote them, untagged, or tagged with another key): refuse the report, "
                        "skip them, or include them flagged (default: %(default)s)")
    p.set_defaults(func=run)


UNVERIFIED = ("refuse", "skip", "include")


def integrity_summary(records: list[dict]) -> dict:
    """How many records' tags check out, and the keys of those that do not, by kind."""
    out: dict = {"verified": 0, "tampered": [], "unsigned": [], "other_key": []}
    for r in records:
        kind = r.get("integrity", "unsigned")
        if kind == "ok":
            out["verified"] += 1
        else:
            out.setdefault(kind, []).append(r["key"])
    return out


def _unverified_keys(integrity: dict) -> list[str]:
    return [k for kind in ("tampered", "unsigned", "other_key") for k in integrity[kind]]


def _integrity_problem(integrity: dict, name: str) -> str:
    parts = [f"{len(integrity[kind])} {label}" for kind, label in
             (("tampered", "edited after the judge wrote them"),
              ("unsigned", "without an integrity tag"),
              ("other_key", "tagged with a key this user does not have")) if integrity[kind]]
    first = ", ".join(_unverified_keys(integrity)[:3])
    return (f"run {name!r} has records that fail the integrity check ({'; '.join(parts)}; e.g. "
            f"{first}); judge them again (`kernelzero eval` with the same --db and --run replaces "
            "them), or pass --unverified skip (report without them) or --unverified include")


def _safe_dir_name(run: str) -> str:
    """A run name as one path component (runs are free text; directories are not)."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", run).strip("._")
    return name or "run"


def run_training(args: argparse.Namespace) -> int:
    """A training run's summary.json: the held-out table (and the plot's path)."""
    from kernelzero.cli import UsageError
    from kernelzero.report import render_heldout, render_heldout_change

    path = Path(args.train) / "summary.json"
    if not path.is_file():
        raise UsageError(f"{args.train}: no summary.json (a `kernelzero train --out` directory "
                         "writes one when its run ends)")
    summary = json.loads(path.read_text())
    if args.json:
        print(json.dumps({k: summary.get(k) for k in ("out", "coder_model", "cold_start", "heldout",
                                                       "heldout_change", "frontier_band_share", "steps",
                                                       "wall_s")}))
        return 0
    print(f"training run {args.train} (Coder: {summary.get('coder_model')}, {summary.get('steps')} "
          f"RL steps, {summary.get('wall_s', 0):.0f} s)")
    print(render_heldout(summary.get("heldout") or []), end="")
    print(render_heldout_change(summary.get("heldout_change")), end="")
    shares = [s for s in summary.get("frontier_band_share") or [] if s.get("share") is not None]
    if shares:
        print("Proposer modules in the frontier band: " + ", ".join(
            f"round {s['round']} {100 * s['share']:.0f}% of {s['valid']}" for s in shares))
    plot = Path(args.train) / "reports" / "heldout.png"
    if plot.exists():
        print(f"plot: {plot}")
    return 0


def run(args: argparse.Namespace) -> int:
    if args.train:
        return run_training(args)
    from kernelzero.cli import UsageError
    from kernelzero.metrics import summarize
    from kernelzero.report import render_table, write_report
    from kernelzero.store import Store, StoreError

    db = Path(args.db)
    if not db.is_file():
        raise UsageError(f"no results database at {db} (judge something with --db {db} first, "
                         "or point --db at an existing file)")
    if args.boot < 0:
        raise UsageError(f"--boot must be >= 0, got {args.boot}")
    try:
        store = Store(db)
    except StoreError as e:
        raise UsageError(str(e)) from e
    with store:
        runs = store.runs()
        if not runs:
            raise UsageError(f"{db} holds no verdicts yet")
        name = args.run if args.run is not None else runs[-1]
        if name not in runs:
            raise UsageError(f"no run named {name!r} in {db}; runs: {', '.join(runs)}")
        records = store.records(name)
    integrity = integrity_summary(records)
    bad = set(_unverified_keys(integrity))
    if bad and args.unverified == "refuse":
        raise UsageError(_integrity_problem(integrity, name))
    if bad and args.unverified == "skip":
        records = [r for r in records if r["key"] not in bad]
        if not records:
            raise UsageError(f"run {name!r} has no record that passes the integrity check")
    summary = summarize(records, n_boot=args.boot)
    if bad:
        summary["notes"].append(
            f"{len(bad)} record(s) fail the integrity check and are "
            f"{'left out' if args.unverified == 'skip' else 'INCLUDED, unverified'} "
            f"(tampered {len(integrity['tampered'])}, unsigned {len(integrity['unsigned'])}, "
            f"other key {len(integrity['other_key'])})")
    summary = {"run": name, "db": str(db), "integrity": integrity, **summary}
    out = Path(args.out) if args.out else Path("runs") / _safe_dir_name(name)
    files = write_report(summary, out, title=f"KernelZero report: {name}")
    if args.json:
        print(json.dumps({**summary, "files": {k: str(v) for k, v in files.items()}},
                         allow_nan=False))
    else:
        print(f"run {name!r} in {db}")
        print(render_table(summary), end="")
        print(f"report written to {files['report.md']} ({len(files)} files in {out})")
    return 0
