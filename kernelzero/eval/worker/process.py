"""The worker process: its entry point (`main`) and the line protocol with the judge.

Started by `sandbox.SandboxWorker` as a fresh `python -I` process (or forked from the fork
server) in a private temp directory with a scrubbed environment. Before it reads its first
command it isolates its network (when asked), sets its rlimits and makes its `Worker` (worker.py,
whose imports capture what times and profiles a module before any untrusted code loads). Then it
reads one JSON command per line on stdin and answers one JSON line on a private copy of the
original stdout; the candidate's own prints go to a log file (fd 1 and 2 are redirected), so
nothing it prints can be mistaken for a reply. Every command is answered, whatever it raised.

What this does NOT defend against: a candidate can, in principle, forge this process's replies.
The judge therefore trusts only the outputs it compares itself, checks timings for
plausibility, and treats every claim in a reply as advisory.
"""
from __future__ import annotations

import json
import os
import resource
import sys

from kernelzero.eval.worker.failures import one_line
from kernelzero.eval.worker.worker import Worker

_REPLY = None  # file object on the private reply fd


def _reply(obj: dict) -> None:
    _REPLY.write(json.dumps(obj) + "\n")
    _REPLY.flush()


def _set_limits(cfg: dict) -> None:
    """rlimits before any untrusted code runs (see docs/threats.md)."""
    for name, value in cfg.items():
        res = getattr(resource, name, None)
        if res is None or value is None:
            continue
        try:
            soft, hard = resource.getrlimit(res)
            new = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
            resource.setrlimit(res, (new, new))
        except (ValueError, OSError):
            pass


def main() -> None:
    global _REPLY
    if os.environ.pop("KZ_NO_NETWORK", ""):  # before any candidate code loads (network.py)
        from kernelzero.eval.worker.network import isolate_network
        isolate_network()
    # The reply channel is a private duplicate of stdout; fd 1 and 2 then go to the log file so
    # that nothing the candidate prints can reach the judge as a reply.
    reply_fd = os.dup(1)
    log_fd = os.open("worker.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    os.dup2(log_fd, 1)
    os.dup2(log_fd, 2)
    os.close(log_fd)
    _REPLY = os.fdopen(reply_fd, "w", buffering=1)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    cmd_in = sys.stdin
    limits = json.loads(os.environ.pop("KZ_RLIMITS", "{}") or "{}")
    _set_limits(limits)
    worker = Worker()
    _reply({"ok": True, "ready": True, "pid": os.getpid()})
    for line in cmd_in:
        cmd = json.loads(line)
        op = cmd.get("op")
        if op == "exit":
            break
        handler = {"load": worker.load, "build": worker.build, "run": worker.run,
                   "time": worker.time, "warm": worker.warm, "arena": worker.arena,
                   "profile": worker.profile, "reserve": worker.reserve}.get(op)
        worker.begin_command()
        if handler is None:
            _reply({"ok": False, "status": "runtime_error", "reason": f"unknown op {op!r}"})
            continue
        try:
            reply = handler(cmd)
        except BaseException as e:  # noqa: BLE001 - never die silently on a bad command
            reply = {"ok": False, "status": "runtime_error", "reason": one_line(e)}
        if cmd.get("trim"):
            worker.trim()
        _reply(reply)
    # stdin closed: the judge is done with us, or died. Our private directory goes with us.
    import shutil
    shutil.rmtree(os.getcwd(), ignore_errors=True)
    os._exit(0)


if __name__ == "__main__":
    main()
