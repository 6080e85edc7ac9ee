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
"""
from __future__ import annotations

import atexit
import contextlib
import dataclasses
import json
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kernelzero.eval.sandbox.jail import (WORKER_CAPS, Isolation, JailError, bwrap_command,
                                          device_groups, isolation_for, warn_if_unisolated,
                                          workers_parent)
from kernelzero.eval.sandbox.process_tree import process_tree, session_usage, uid_usage, wait_gone
from kernelzero.eval.sandbox.worker_uids import NoWorkerUid, WorkerUid, drop_to_uid

PACKAGE_ROOT = str(Path(__file__).resolve().parents[3])
BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
        "from kernelzero.eval.worker.process import main; main()")
PASS_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
            "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
            "TORCH_CUDA_ARCH_LIST", "CC", "CXX", "MAX_JOBS", "NCCL_NVLS_ENABLE",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "TRITON_PTXAS_PATH")
MAX_REPLY_BYTES = 16 * 2**20
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


def _env_flag(name: str) -> bool | None:
    value = os.environ.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"${name}={value!r}: use 1, 0 or leave it unset")
    return None if value == "" else value == "1"


@dataclass
class SandboxLimits:
    """Per-worker resource limits (reported in every verdict's `env.sandbox`).

    cpu_s: CPU seconds for the worker process (RLIMIT_CPU).
    file_bytes: largest file the worker may write (RLIMIT_FSIZE); outputs are written as files.
    address_space_bytes: RLIMIT_AS; None on CUDA, whose driver reserves huge virtual ranges.
    nofile: open file descriptors.
    threads: torch intra-op threads in the worker (OMP_NUM_THREADS).
    The judge also polices the worker's processes while it waits for a reply (its session, or
    every process of its own uid): more than `max_processes` processes or `max_rss_bytes` of
    resident memory kills them (RLIMIT_NPROC does not bind root, RLIMIT_AS breaks CUDA; with a
    uid of its own, RLIMIT_NPROC is set to `max_processes` too).
    isolation: `auto` (a bubblewrap jail where this machine can make one, else none, warned
        about), `bwrap` (a jail or no worker at all), `none` (no jail). Default: $KZ_SANDBOX or
        auto.
    own_uid: run each worker as a uid of its own; None: wherever it can (root), on the CPU (on
        cuda the judge could not map CUDA IPC outputs of another uid: see jail.isolation_for).
        Default: $KZ_SANDBOX_OWN_UID (`1` or `0`) or None.
    pid_namespace: give each worker a PID namespace of its own; None: on the CPU, and wherever
        workers have no uid of their own (on cuda, and for an ordinary user).
    """

    cpu_s: int = 1800
    file_bytes: int = 16 * 2**30
    address_space_bytes: int | None = None
    nofile: int = 4096
    threads: int = 1
    max_processes: int = 128          # processes in the worker's session (watchdog; fork bombs)
    max_rss_bytes: int = 64 * 2**30   # resident memory of the whole session (watchdog)
    no_network: bool = True           # new network namespace when the OS allows it (root)
    isolation: str = field(default_factory=lambda: os.environ.get("KZ_SANDBOX") or "auto")
    own_uid: bool | None = field(default_factory=lambda: _env_flag("KZ_SANDBOX_OWN_UID"))
    pid_namespace: bool | None = None

    def rlimits(self) -> dict:
        return {"RLIMIT_CORE": 0, "RLIMIT_CPU": self.cpu_s, "RLIMIT_FSIZE": self.file_bytes,
                "RLIMIT_AS": self.address_space_bytes, "RLIMIT_NOFILE": self.nofile}


class WorkerTimeout(Exception):
    pass


class WorkerDied(Exception):
    def __init__(self, reason: str, exit_code: int | None = None):
        super().__init__(reason)
        self.exit_code = exit_code  # 0: the process ended itself "successfully" mid-judgement


def _shm_root() -> str | None:
    d = "/dev/shm"
    return d if os.path.isdir(d) and os.access(d, os.W_OK) else None


class SandboxWorker:
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

    # ------------------------------------------------------------------ protocol
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

    def limits_report(self) -> dict:
        return asdict(self.limits)


def sandbox_report(limits: SandboxLimits, device: str) -> dict:
    """A verdict environment's `sandbox` block: the limits, the isolation asked for
    (`requested`) and the isolation workers get (`isolation`: bwrap or none, with why)."""
    try:
        iso = isolation_for(limits.isolation, device, limits.pid_namespace,
                            limits.own_uid).report()
    except JailError as e:
        iso = {"isolation": "unavailable", "reason": str(e)}
    return {**asdict(limits), "requested": limits.isolation, **iso}


def _inside(path: str, folder: str) -> bool:
    real, top = os.path.realpath(path), os.path.realpath(folder)
    return real == top or real.startswith(top + os.sep)
