"""The processes a worker is made of, and waiting until they are really gone.

A jailed worker is a tree (bwrap, the PID namespace's init, then Python). When the judge kills it,
`Popen.wait` returns once the top process exits, while the Python below may still be tearing down
its CUDA context and holding its device memory (on an H200, 130 GiB for about a second after its
parent was reaped). A judge that lets a grant shrink then hands that memory to the next judgement
before the driver has it back: an out-of-memory verdict caused by the judge (issue 24). So a
worker closed to give its memory back is waited for down to its last descendant.

Each process is known by its pid and start time (/proc/PID/stat), so a pid reused by a new
process is not mistaken for the old one. Without /proc (not Linux) these find nothing and wait
for nothing.
"""
from __future__ import annotations

import os
import time


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a live process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return fields[0], fields[19]  # state (3rd field), starttime (22nd)


def _children(pid: int) -> list[int]:
    kids: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return kids
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children", encoding="ascii") as f:
                kids += [int(c) for c in f.read().split()]
        except (OSError, ValueError):
            pass
    return kids


def process_tree(pid: int) -> list[tuple[int, str]]:
    """`pid` and its descendants now, each as (pid, start time)."""
    seen: list[tuple[int, str]] = []
    todo = [pid]
    while todo:
        p = todo.pop()
        st = _stat(p)
        if st is None or any(p == q for q, _ in seen):
            continue
        seen.append((p, st[1]))
        todo += _children(p)
    return seen


def alive(procs: list[tuple[int, str]]) -> list[int]:
    """The pids of `procs` still running: not gone, not a zombie (a zombie has closed its files,
    its device's included), not replaced by a new process under the same pid."""
    left = []
    for pid, start in procs:
        st = _stat(pid)
        if st is not None and st[1] == start and st[0] not in ("Z", "X"):
            left.append(pid)
    return left


def wait_gone(procs: list[tuple[int, str]], timeout_s: float) -> list[int]:
    """Wait until none of `procs` runs, at most `timeout_s`; returns the pids still running."""
    deadline = time.monotonic() + timeout_s
    delay = 0.005
    while True:
        left = alive(procs)
        if not left or time.monotonic() >= deadline:
            return left
        time.sleep(delay)
        delay = min(delay * 2, 0.1)
