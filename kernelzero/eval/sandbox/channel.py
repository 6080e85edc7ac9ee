"""The judge's channel to a started sandbox worker: one JSON command a line on the worker's
stdin, one JSON reply a line on its stdout (which the worker keeps for itself), each awaited
until a deadline, while the worker's processes are policed against its limits; what a worker
that ends without answering died of; the files it names in a reply, and the tail of its logs.

`WorkerChannel` is SandboxWorker's base class: its methods work on the worker's `proc`, `dir`,
`uid`, `isolation`, `limits` and reply buffer `_buf`, set up and started by `SandboxWorker`
(sandbox.py), which also ends the process. A failed exchange raises `WorkerTimeout` (no reply before the deadline: the
worker is killed) or `WorkerDied`.
"""
from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import time

from kernelzero.eval.sandbox.process_tree import session_usage, uid_usage

MAX_REPLY_BYTES = 16 * 2**20


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    def __init__(self, reason: str, exit_code: int | None = None):
        super().__init__(reason)
        self.exit_code = exit_code  # 0: the process ended itself "successfully" mid-judgement


class WorkerChannel:
    """Requests to one worker process and its replies (the module docstring)."""

    def request(self, msg: dict, timeout_s: float) -> dict:
        """Send one command; return the reply or raise WorkerTimeout / WorkerDied."""
        if msg.get("op") == "load" and self.isolation.jailed:
            msg = self._hand_over(msg)
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._death_reason(), self.proc.poll()) from None
        return self._read(time.monotonic() + timeout_s)

    def _hand_over(self, msg: dict) -> dict:
        """A jailed worker sees only its own directory: the module files the judge wrote there
        become its own (readable whatever the judge's umask), and a build directory elsewhere
        (a cache shared between workers, which one candidate could poison for another) is
        replaced by one inside it."""
        for key in ("task_path", "candidate_path"):
            path = msg.get(key)
            if self.uid is not None and isinstance(path, str) and _inside(path, self.dir):
                os.chown(path, self.uid.uid, self.uid.uid)
        if isinstance(msg.get("build_dir"), str) and not _inside(msg["build_dir"], self.dir):
            msg = {**msg, "build_dir": os.path.join(self.dir, "build")}
        return msg

    def _read(self, deadline: float) -> dict:
        fd = self.proc.stdout.fileno()
        while b"\n" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0:
                self.kill()
                raise WorkerTimeout("no answer before the deadline")
            ready, _, _ = select.select([fd], [], [], min(left, 0.25))
            if not ready:
                self._police()
                continue
            chunk = os.read(fd, 1 << 20)
            if not chunk:
                raise WorkerDied(self._death_reason(), self.proc.poll())
            self._buf += chunk
            if len(self._buf) > MAX_REPLY_BYTES:
                self.kill()
                raise WorkerDied("the worker sent an oversized reply")
        line, self._buf = self._buf.split(b"\n", 1)
        try:
            reply = json.loads(line)
        except ValueError:
            raise WorkerDied("the worker sent a malformed reply") from None
        if not isinstance(reply, dict):
            raise WorkerDied("the worker sent a malformed reply")
        return reply

    def _police(self) -> None:
        """Kill the worker when its processes exceed the process or memory limits."""
        if not os.path.isdir("/proc"):
            return
        n, rss = uid_usage(self.uid.uid) if self.uid else session_usage(self.proc.pid)
        if n > self.limits.max_processes:
            self.kill()
            raise WorkerDied(f"it started more than {self.limits.max_processes} processes "
                             "(fork bomb?); they were all killed")
        if rss > self.limits.max_rss_bytes:
            self.kill()
            raise WorkerDied(f"it used more than {self.limits.max_rss_bytes / 2**30:.0f} GiB of "
                             "host memory; its processes were all killed")

    def kill(self) -> None:
        """SIGKILL the worker's process group and, with a uid of its own, every process of that
        uid (whatever sessions they made); in a PID namespace, the namespace dies with bwrap."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        if self.uid is not None:
            self.uid.kill_all()

    def _death_reason(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the worker stopped answering"
        if self.isolation.jailed and code > 128 and type(self.proc) is subprocess.Popen:
            code = 128 - code  # bwrap exits with 128 + the signal that ended the worker
        if code < 0:
            try:
                sig = signal.Signals(-code).name
            except ValueError:
                sig = f"signal {-code}"
            hint = {"SIGSEGV": " (segmentation fault)", "SIGKILL": " (killed; out of memory?)",
                    "SIGXCPU": " (CPU time limit)", "SIGXFSZ": " (file size limit)",
                    "SIGABRT": " (aborted)", "SIGBUS": " (bus error)"}.get(sig, "")
            return f"the process crashed with {sig}{hint}"
        return f"the process exited with code {code} before answering"

    def path_of(self, name) -> str:
        """The path of a file the worker names in a reply: a plain name in its own directory
        (no folder, no `..`), opened by the judge with tensorio.open_regular. Raises ValueError."""
        if not isinstance(name, str) or not name or name.startswith(".") or "/" in name \
                or "\0" in name:
            raise ValueError(f"the worker named an output file outside its directory: {name!r}")
        return os.path.join(self.dir, name)

    def log_tail(self, n_chars: int = 2000) -> str:
        from kernelzero.eval.transport.tensorio import DecodeError, open_regular
        out = []
        for name in ("boot.log", "worker.log"):  # never through a link the worker put there
            try:
                with open_regular(os.path.join(self.dir, name)) as f:
                    f.seek(max(0, os.fstat(f.fileno()).st_size - n_chars))
                    out.append(f.read(n_chars).decode("utf-8", "replace"))
            except (OSError, DecodeError):
                pass
        return "".join(out)[-n_chars:]


def _inside(path: str, folder: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top + os.sep)
