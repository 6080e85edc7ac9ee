"""Is this kernel verified? Its verdicts against a reference, from the results store, and the rule.

A kernel is identified by its candidate hash and the reference by its task hash (both
`tasks.source_hash` of the file's text), so a renamed or moved file is still found, and a kernel
judged against another reference is not. The rule: the store holds at least one verdict for the
pair, and on every device it was judged on, the latest verdict is `correct` (a kernel correct
under the CPU interpreter but wrong on the GPU is not verified).

Reads the store through a read-only connection of its own (the store has no lookup by hash).
"""
from __future__ import annotations

import json
import sqlite3
from pathlib import Path

from kernelzero.eval.verdict import Verdict
from kernelzero.store import Store


def stored_verdicts(db: str | Path, task_hash: str, candidate_hash: str) -> list[Verdict]:
    """Every verdict `db` holds for the candidate against the task, oldest first ([] when the
    file does not exist). StoreError when the file is not a KernelZero results store."""
    path = Path(db)
    if not path.is_file():
        return []
    Store(path).close()  # stamps and schema checked (StoreError otherwise)
    con = sqlite3.connect(f"{path.resolve().as_uri()}?mode=ro", uri=True)
    try:
        rows = con.execute(
            "SELECT verdict_json FROM verdicts WHERE json_extract(verdict_json, '$.candidate_hash')"
            " = ? AND json_extract(verdict_json, '$.task_hash') = ? ORDER BY id",
            (candidate_hash, task_hash)).fetchall()
    finally:
        con.close()
    return [Verdict.from_dict(json.loads(r[0])) for r in rows]


def latest_per_device(verdicts: list[Verdict]) -> dict[str, Verdict]:
    """The last verdict on each device, from a list oldest first."""
    return {v.device: v for v in verdicts}


def is_verified(verdicts: list[Verdict]) -> bool:
    latest = latest_per_device(verdicts)
    return bool(latest) and all(v.correct for v in latest.values())


def summary(verdicts: list[Verdict]) -> str:
    """One line: each device's latest verdict (`correct on cpu; incorrect on cuda: ...`)."""
    parts = []
    for device, v in latest_per_device(verdicts).items():
        speed = f", {v.speedup:.2f}x over eager" if v.speedup else ""
        parts.append(f"{v.status} on {device}{speed}" + ("" if v.correct else f" ({v.reason})"))
    return "; ".join(parts) or "never judged"


def provenance(verdicts: list[Verdict]) -> list[dict]:
    """What the exported module records of each device's latest verdict."""
    return [{"device": d, "status": v.status, "reason": v.reason, "speedup": v.speedup,
             "backend": v.backend, "policy": v.policy,
             "gpu": (v.env or {}).get("gpu"), "torch": (v.env or {}).get("torch")}
            for d, v in latest_per_device(verdicts).items()]
