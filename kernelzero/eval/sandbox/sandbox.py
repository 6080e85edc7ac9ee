"""SandboxWorker: a fresh, isolated Python process that runs untrusted module code.

What it gives: a new `python -I` process (no user site, no PYTHON* variables, no cwd on sys.path)
in its own session (process group), a private temp directory as working directory and HOME, a
scrubbed environment with per-worker `TORCH_EXTENSIONS_DIR` / `TRITON_CACHE_DIR`, rlimits set in
the child before any untrusted code loads, and a wall-clock deadline on every request after which
the whole process group is killed. Replies come on the child's stdout, which the child keeps for
itself; everything the module prints goes to `worker.log`.

The jail (jail.py, bubblewrap): the worker sees the system and its Python read-only, its own
directory read-write, nothing of the store, the working tree, the home or other workers; no
network. As root it also runs as a uid of its own (worker_uids.py), so that every process it
starts, however detached, is killed when it is closed; elsewhere a PID namespace does that.
Where no jail can be made, `isolation: none` is reported and warned about (jail.py).

Here: starting the process (spawned, or forked from the fork server) and ending it with every
process it started. The request/reply channel to it: channel.py; its limits: limits.py.
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict
from pathlib import Path

from kernelzero.eval.sandbox.channel import WorkerChannel, WorkerDied
from kernelzero.eval.sandbox.jail import (WORKER_CAPS, Isolation, JailError, bwrap_command,
                                          device_groups, isolation_for, warn_if_unisolated,
                                          workers_parent)
# SandboxLimits lives in limits.py; its many importers (the evaluator, spares, the CLI, tests and
# benchmarks) take it from here, with the worker it configures.
from kernelzero.eval.sandbox.limits import SandboxLimits
from kernelzero.eval.sandbox.process_tree import process_tree, wait_gone
from kernelzero.eval.sandbox.worker_uids import NoWorkerUid, WorkerUid, drop_to_uid

PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
        "from kernelzero.eval.worker.process import main; main()")
PASS_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
            "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
            "TORCH_CUDA_ARCH_LIST", "CC", "CXX", "MAX_JOBS", "NCCL_NVLS_ENABLE",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "TRITON_PTXAS_PATH")
ALLOC_CONF = "max_split_size_mb:512"  # the workers' CUDA caching allocator (see _base_env)
REAP_TIMEOUT_S = 10.0  # the longest a closed worker's processes are waited for
_REAPING: set = set()  # reaper threads of workers closed with wait=False
_REAPING_LOCK = threading.Lock()


def reap_pending(timeout_s: float = 30.0) -> None:
    """Wait for the workers closed with `close(wait=False)` to be gone (exited, dir removed)."""
    deadline = time.monotonic() + timeout_s
    while True:
        with _REAPING_LOCK:
            pending = list(_REAPING)
        if not pending or time.monotonic() > deadline:
            return
        for t in pending:
            t.join(max(0.0, deadline - time.monotonic()))


atexit.register(reap_pending, 10.0)  # a judge that exits leaves no worker dirs behind


def _shm_root() -> str | None:
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


class SandboxWorker(WorkerChannel):
    """One untrusted process. Use as a context manager; `request()` sends one command."""

    def __init__(self, device: str, limits: SandboxLimits, work_root: str | None = None,
                 build_dir: str | None = None, name: str = "worker", start_method: str = "spawn"):
        """start_method: `spawn` starts `python -I` afresh; `fork` forks it from a process that
        has imported torch already (kernelzero.eval.sandbox.forkserver; falls back to spawn). Raises
        WorkerDied when `limits.isolation` is `bwrap` and no jail can be made here."""
        self.device, self.limits, self.name = device, limits, name
        self.start_method = start_method
        try:
            self.isolation: Isolation = isolation_for(limits.isolation, device,
                                                      limits.pid_namespace, limits.own_uid)
        except (JailError, ValueError) as e:  # every verdict then says why no worker started
            raise WorkerDied(str(e)) from None
        if not self.isolation.jailed:
            warn_if_unisolated(limits.isolation, device)
        root = work_root or _shm_root() or tempfile.gettempdir()
        parent = workers_parent(root) if self.isolation.jailed else root
        self.dir = tempfile.mkdtemp(prefix=f"kz-{name}-", dir=parent)
        self.build_dir = build_dir or os.path.join(self.dir, "build")
        self.proc: subprocess.Popen | None = None
        self.uid: WorkerUid | None = None  # its own uid, while it lives (jailed, as root)
        self._buf = b""

    # ------------------------------------------------------------------ lifecycle
    def _base_env(self) -> dict:
        """The scrubbed environment every worker of this device shares."""
        env = {k: os.environ[k] for k in PASS_ENV if k in os.environ}
        env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
        env.update(PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS=str(self.limits.threads),
                   MKL_NUM_THREADS=str(self.limits.threads))
        if self.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
            env["CUDA_VISIBLE_DEVICES"] = ""
        else:
            # Blocks over 512 MiB are never split for small tensors, so a trial's freed 60 GiB
            # of inputs goes back to the driver when the next trial's draw needs it; split, it
            # stayed reserved beside a few MiB in use and the draw ran out of memory.
            env["PYTORCH_CUDA_ALLOC_CONF"] = ALLOC_CONF
        if self.isolation.own_uid:  # a uid with no account: getpass.getuser() asks these first
            env.update(USER="kz-worker", LOGNAME="kz-worker")
        return env

    def _env(self) -> dict:
        env = self._base_env()
        rlimits = self.limits.rlimits()
        if self.uid is not None:  # binds a uid no other process has (root ignores it)
            rlimits["RLIMIT_NPROC"] = self.limits.max_processes
        env.update(HOME=self.dir, TMPDIR=self.dir,
                   TORCH_EXTENSIONS_DIR=os.path.join(self.build_dir, "torch_extensions"),
                   TRITON_CACHE_DIR=os.path.join(self.build_dir, "triton"),
                   KZ_RLIMITS=json.dumps(rlimits))
        return env

    def start(self, timeout_s: float = 120.0) -> None:
        if self.isolation.own_uid:
            try:
                self.uid = WorkerUid.reserve()
            except NoWorkerUid as e:
                raise WorkerDied(f"could not give the worker a uid of its own: {e}") from None
            os.chown(self.dir, self.uid.uid, self.uid.uid)
            os.chmod(self.dir, 0o700)
        if self.start_method == "fork" and self._can_fork() and self._start_forked(timeout_s):
            return
        log = open(os.path.join(self.dir, "boot.log"), "wb")
        env = self._env()
        cmd = [sys.executable, "-I", "-c", BOOT, PACKAGE_ROOT]
        if self.isolation.jailed:
            try:
                jail = bwrap_command(self.isolation, self.dir, PACKAGE_ROOT, self.device,
                                     hide=os.path.dirname(self.dir),
                                     keep_caps=WORKER_CAPS if self.uid else ())
            except JailError as e:
                log.close()
                raise WorkerDied(f"could not jail the worker: {e}") from None
            groups = device_groups(self.device)
            cmd = jail + (drop_to_uid(self.uid.uid, groups) if self.uid else []) + cmd
        elif self.limits.no_network:
            env["KZ_NO_NETWORK"] = "1"
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, cwd=self.dir, env=env,
            start_new_session=True, close_fds=True)
        log.close()
        self._await_ready(timeout_s)

    def _can_fork(self) -> bool:
        """Workers forked from one fork server share its jail: only uids of their own keep them
        apart (forkserver.py), so a jailed worker without one is spawned."""
        return not self.isolation.jailed or self.uid is not None

    def _await_ready(self, timeout_s: float) -> None:
        if not self._read(time.monotonic() + timeout_s).get("ready"):
            raise WorkerDied("worker did not start")

    def _start_forked(self, timeout_s: float) -> bool:
        """Fork the worker from the fork server; False (nothing started) when that fails."""
        from kernelzero.eval.sandbox.forkserver import ForkServerError
        try:
            self.proc = self.fork_server().spawn(
                self.dir, self._env(), os.path.join(self.dir, "boot.log"), self.limits.no_network,
                self.limits.threads, uid=self.uid.uid if self.uid else None,
                groups=device_groups(self.device))
        except (ForkServerError, JailError, OSError):
            self.proc = None
            return False
        self._await_ready(timeout_s)
        return True

    def fork_server(self):
        """The fork server for workers like this one (its environment and jail)."""
        from kernelzero.eval.sandbox.forkserver import fork_server
        return fork_server(self._base_env(), PACKAGE_ROOT, self._fork_server_jail())

    def _fork_server_jail(self) -> list[str]:
        """The jail of the fork server that forks this worker: the folder of this judge's worker
        directories writable (each child reaches only its own: uids of their own), and the
        capabilities to give each child its own network namespace and uid. No PID namespace:
        the judge signals children by the pids the zygote reports (their uids, not a namespace,
        keep them from each other's processes)."""
        if not self.isolation.jailed:
            return []
        return bwrap_command(dataclasses.replace(self.isolation, pid_namespace=False),
                             os.path.dirname(self.dir), PACKAGE_ROOT, self.device,
                             keep_caps=("CAP_SETUID", "CAP_SETGID", "CAP_SYS_ADMIN"))

    def close(self, wait: bool = True) -> None:
        """Kill the worker now, every process it started with it. With wait=False the rest
        (waiting for the exit, which for a CUDA process means its context's teardown, often a
        few hundred ms, and removing the temp dir) happens on a reaper thread (`reap_pending`
        waits for them all). Either way the reaping ends once every process of the worker's
        tree has exited, not only the top one (process_tree.py: a CUDA process below bwrap
        holds its device memory until then)."""
        tree = process_tree(self.proc.pid) if self.proc is not None else []
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        elif self.uid is not None:  # the worker is gone; what it left running is not
            self.uid.kill_all()
        if wait:
            self._reap(tree)
            return
        t = threading.Thread(target=self._reap, args=(tree,), name="kz-reaper", daemon=True)
        with _REAPING_LOCK:
            _REAPING.add(t)
        t.start()

    def _reap(self, tree: list[tuple[int, str]]) -> None:
        try:
            if self.proc is not None:
                t0 = time.monotonic()
                try:
                    self.proc.wait(timeout=REAP_TIMEOUT_S)
                except subprocess.TimeoutExpired:
                    pass
                wait_gone(tree, max(0.0, REAP_TIMEOUT_S - (time.monotonic() - t0)))
                for f in (self.proc.stdin, self.proc.stdout):
                    try:
                        f.close()
                    except OSError:
                        pass
            shutil.rmtree(self.dir, ignore_errors=True)
            if self.uid is not None:
                if self.isolation.shared_shm:
                    self.uid.remove_files("/dev/shm")
                self.uid.release()
        finally:
            with _REAPING_LOCK:
                _REAPING.discard(threading.current_thread())

    @contextlib.contextmanager
    def released(self):
        """`with worker.released():` one judgement's use; at the end the worker is killed and
        reaped in the background, so the verdict does not wait for its CUDA teardown."""
        try:
            yield self
        finally:
            self.close(wait=False)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def limits_report(self) -> dict:
        return asdict(self.limits)
