"""A uid of its own for each jailed worker, where the judge runs as root.

Why: processes of one uid can read each other through /proc (open files, memory, root folder),
signal each other and count against one RLIMIT_NPROC. A worker whose uid no other process has can
do none of that to the judge or to another worker, and all of its processes, however detached
(double fork, `setsid`), die at once with `kill(-1, SIGKILL)` sent as that uid: the kernel signals
every process of the uid under one lock, and a process being forked by a dying parent is never
created.

Uids come from [UID_BASE, UID_BASE + UID_SLOTS), numbers no account uses; a uid is held by an
flock on a file in a root-only folder for as long as its worker lives, so that judges running
side by side on one machine never hand out the same one (a judge that dies lets go of its locks
with its file descriptors). A worker becomes its uid through setpriv (`drop_to_uid`), with no
capabilities left.
"""
from __future__ import annotations

import fcntl
import os
import secrets
import shutil
import subprocess
import tempfile

UID_BASE = 1_600_000_000
UID_SLOTS = 1 << 16
LOCK_DIRS = ("/run/lock", "/dev/shm", tempfile.gettempdir())


def setpriv_path() -> str | None:
    return shutil.which("setpriv") or ("/usr/bin/setpriv" if os.access("/usr/bin/setpriv",
                                                                       os.X_OK) else None)


def drop_to_uid(uid: int, groups: list[int] = ()) -> list[str]:
    """The setpriv command (up to its `--`) that becomes `uid` (in `groups` only) with no
    capabilities left."""
    grouping = f"--groups={','.join(map(str, groups))}" if groups else "--clear-groups"
    return [setpriv_path(), f"--reuid={uid}", f"--regid={uid}", grouping,
            "--inh-caps=-all", "--bounding-set=-all", "--"]


class NoWorkerUid(OSError):
    """No uid could be reserved (no writable lock folder, or every slot in use)."""


def _lock_dir() -> str:
    for base in LOCK_DIRS:
        path = os.path.join(base, "kernelzero-worker-uids")
        try:
            os.makedirs(path, mode=0o700, exist_ok=True)
            st = os.lstat(path)
            if st.st_uid == 0 and (st.st_mode & 0o077) == 0 and os.access(path, os.W_OK):
                return path
        except OSError:
            continue
    raise NoWorkerUid("no root-only folder for the worker uid locks")


class WorkerUid:
    """One reserved uid. `kill_all` ends every process running as it; `release` lets it go."""

    def __init__(self, uid: int, lock_fd: int):
        self.uid, self._fd = uid, lock_fd

    @classmethod
    def reserve(cls) -> "WorkerUid":
        folder = _lock_dir()
        start = secrets.randbelow(UID_SLOTS)
        for i in range(UID_SLOTS):
            uid = UID_BASE + (start + i) % UID_SLOTS
            fd = os.open(os.path.join(folder, str(uid)), os.O_RDWR | os.O_CREAT | os.O_CLOEXEC,
                         0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            return cls(uid, fd)
        raise NoWorkerUid("every worker uid is in use")

    def kill_all(self) -> None:
        """SIGKILL every process of this uid, as this uid (`kill -9 -- -1`: util-linux or procps,
        a program the uid can run, unlike an interpreter under root's home), and wait for it."""
        try:
            subprocess.run([*drop_to_uid(self.uid), shutil.which("kill") or "/bin/kill", "-9", "--",
                            "-1"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30, cwd="/")
        except (OSError, subprocess.TimeoutExpired):
            pass

    def remove_files(self, folder: str = "/dev/shm") -> None:
        """Delete what this uid left at the top of `folder` (a shared /dev/shm: PyTorch's IPC
        reference counters, and whatever else the worker wrote there)."""
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        for e in entries:
            try:
                if e.stat(follow_symlinks=False).st_uid != self.uid:
                    continue
                if e.is_dir(follow_symlinks=False):
                    shutil.rmtree(e.path, ignore_errors=True)
                else:
                    os.unlink(e.path)
            except OSError:
                continue

    def release(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
