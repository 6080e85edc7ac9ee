"""The processes a worker is made of, read from /proc: its tree, its use of processes and host
memory (the limits the judge polices), and waiting until they are really gone.

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


def stat_fields(pid: int | str) -> list[bytes] | None:
    """/proc/PID/stat's fields after the command name (index 0 is field 3, the state), or None
    once the process is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _stat(pid: int) -> tuple[str, str] | None:
    """(state, start time) of a live process, or None once it is gone."""
    fields = stat_fields(pid)
    if fields is None or len(fields) < 20:
        return None
    return fields[0].decode(), fields[19].decode()  # state (field 3), starttime (field 22)


def session_usage(sid: int) -> tuple[int, int]:
    """(process count, resident bytes) of every process in session `sid`, from /proc."""
    n, rss = 0, 0
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        fields = stat_fields(entry)
        try:
            if fields is None or int(fields[3]) != sid:  # field 6 of stat, the session id
                continue
            n += 1
            rss += int(fields[21]) * page  # field 24, resident pages
        except (IndexError, ValueError):
            continue
    return n, rss


def uid_usage(uid: int) -> tuple[int, int]:
    """(process count, resident bytes) of every live process whose real uid is `uid`, from
    /proc (status, not the folder's owner, which a process can make root's: PR_SET_DUMPABLE)."""
    n, rss = 0, 0
    want = b"\nUid:\t%d\t" % uid
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/status", "rb") as f:
                status = f.read()
        except OSError:
            continue
        if want not in status or b"\nState:\tZ" in status:  # a zombie is dead (init may not
            continue                                          # have reaped it yet)
        n += 1
        at = status.find(b"\nVmRSS:")
        if at >= 0:
            rss += int(status[at + 7:status.index(b"kB", at)]) * 1024
    return n, rss


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
    seen: dict[int, str] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        st = _stat(p)
        if st is None or p in seen:
            continue
        seen[p] = st[1]
        todo += _children(p)
    return list(seen.items())


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
