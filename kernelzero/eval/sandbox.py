"""SandboxWorker: a fresh, isolated Python process that runs untrusted module code.

What it gives: a new `python -I` process (no user site, no PYTHON* variables, no cwd on sys.path)
in its own session (process group), a private temp directory as working directory and HOME, a
scrubbed environment with per-worker `TORCH_EXTENSIONS_DIR` / `TRITON_CACHE_DIR`, rlimits set in
the child before any untrusted code loads, and a wall-clock deadline on every request after which
the whole process group is killed. Replies come on the child's stdout, which the child keeps for
itself; everything the module prints goes to `worker.log`.

What it does not give: a kernel-level jail. A candidate can read files the user can read. Network
isolation is added where the OS allows it (see `SandboxLimits.no_network`).
"""
from __future__ import annotations

import atexit
import contextlib
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
from dataclasses import asdict, dataclass
from pathlib import Path

PACKAGE_ROOT = str(Path(__file__).resolve().parents[2])
BOOT = "import sys; sys.path.insert(0, sys.argv[1]); from kernelzero.eval.worker import main; main()"
PASS_ENV = ("PATH", "LANG", "LC_ALL", "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH",
            "LD_LIBRARY_PATH", "NVIDIA_VISIBLE_DEVICES", "NVIDIA_DRIVER_CAPABILITIES",
            "TORCH_CUDA_ARCH_LIST", "CC", "CXX", "MAX_JOBS", "NCCL_NVLS_ENABLE",
            "TORCH_SYMM_MEM_DISABLE_MULTICAST", "NVSHMEM_DISABLE_NVLS", "TRITON_PTXAS_PATH")
MAX_REPLY_BYTES = 16 * 2**20
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


@dataclass
class SandboxLimits:
    """Per-worker resource limits (reported in every verdict's `env.sandbox`).

    cpu_s: CPU seconds for the worker process (RLIMIT_CPU).
    file_bytes: largest file the worker may write (RLIMIT_FSIZE); outputs are written as files.
    address_space_bytes: RLIMIT_AS; None on CUDA, whose driver reserves huge virtual ranges.
    nofile: open file descriptors.
    threads: torch intra-op threads in the worker (OMP_NUM_THREADS).
    The judge also polices the worker's whole session while it waits for a reply: more than
    `max_processes` processes or `max_rss_bytes` of resident memory kills the process group
    (RLIMIT_NPROC does not bind root, RLIMIT_AS breaks CUDA).
    """

    cpu_s: int = 1800
    file_bytes: int = 16 * 2**30
    address_space_bytes: int | None = None
    nofile: int = 4096
    threads: int = 1
    max_processes: int = 128          # processes in the worker's session (watchdog; fork bombs)
    max_rss_bytes: int = 64 * 2**30   # resident memory of the whole session (watchdog)
    no_network: bool = True           # new network namespace when the OS allows it (root)

    def rlimits(self) -> dict:
        return {"RLIMIT_CORE": 0, "RLIMIT_CPU": self.cpu_s, "RLIMIT_FSIZE": self.file_bytes,
                "RLIMIT_AS": self.address_space_bytes, "RLIMIT_NOFILE": self.nofile}


def _load_unshare():
    """libc's unshare(2), loaded once in the judge so the forked child only calls it."""
    try:
        import ctypes
        fn = ctypes.CDLL(None, use_errno=True).unshare
        fn.argtypes = [ctypes.c_int]
        return fn
    except (OSError, AttributeError):
        return None


_UNSHARE = _load_unshare()
CLONE_NEWNET = 0x40000000


def isolate_network() -> None:
    """A new, empty network namespace for this process (root only; failure, EPERM in some
    containers, leaves the network as is). Called by a worker first thing, before it imports
    anything else (worker.main, KZ_NO_NETWORK), and by the fork server's children. Not as a
    `preexec_fn`: with one, Popen forks the whole judge, page tables of its CUDA mappings
    included, holding the GIL (tens of ms per worker, 0.5 s when a batch's end refills 30)."""
    if _UNSHARE is not None and os.geteuid() == 0:
        _UNSHARE(CLONE_NEWNET)


def session_usage(sid: int) -> tuple[int, int]:
    """(process count, resident bytes) of every process in session `sid`, from /proc."""
    n, rss = 0, 0
    page = os.sysconf("SC_PAGE_SIZE")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
            if int(fields[3]) != sid:  # field 6 of stat, the session id
                continue
            n += 1
            rss += int(fields[21]) * page  # field 24, resident pages
        except (OSError, IndexError, ValueError):
            continue
    return n, rss


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
        has imported torch already (kernelzero.eval.forkserver; falls back to spawn)."""
        self.device, self.limits, self.name = device, limits, name
        self.start_method = start_method
        self.dir = tempfile.mkdtemp(prefix=f"kz-{name}-", dir=work_root or _shm_root())
        self.build_dir = build_dir or os.path.join(self.dir, "build")
        self.proc: subprocess.Popen | None = None
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
        return env

    def _env(self) -> dict:
        env = self._base_env()
        env.update(HOME=self.dir, TMPDIR=self.dir,
                   TORCH_EXTENSIONS_DIR=os.path.join(self.build_dir, "torch_extensions"),
                   TRITON_CACHE_DIR=os.path.join(self.build_dir, "triton"),
                   KZ_RLIMITS=json.dumps(self.limits.rlimits()))
        return env

    def start(self, timeout_s: float = 120.0) -> None:
        if self.start_method == "fork" and self._start_forked(timeout_s):
            return
        log = open(os.path.join(self.dir, "boot.log"), "wb")
        env = self._env()
        if self.limits.no_network:
            env["KZ_NO_NETWORK"] = "1"
        self.proc = subprocess.Popen(
            [sys.executable, "-I", "-c", BOOT, PACKAGE_ROOT], stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=log, cwd=self.dir, env=env,
            start_new_session=True, close_fds=True)
        log.close()
        self._await_ready(timeout_s)

    def _await_ready(self, timeout_s: float) -> None:
        if not self._read(time.monotonic() + timeout_s).get("ready"):
            raise WorkerDied("worker did not start")

    def _start_forked(self, timeout_s: float) -> bool:
        """Fork the worker from the fork server; False (nothing started) when that fails."""
        from kernelzero.eval.forkserver import ForkServerError, fork_server
        try:
            server = fork_server(self._base_env(), PACKAGE_ROOT)
            self.proc = server.spawn(self.dir, self._env(), os.path.join(self.dir, "boot.log"),
                                     self.limits.no_network, self.limits.threads)
        except (ForkServerError, OSError):
            self.proc = None
            return False
        self._await_ready(timeout_s)
        return True

    def close(self, wait: bool = True) -> None:
        """Kill the process group now. With wait=False the rest (waiting for the exit, which for
        a CUDA process means its context's teardown, often a few hundred ms, and removing the
        temp dir) happens on a reaper thread (`reap_pending` waits for them all)."""
        if self.proc is not None and self.proc.poll() is None:
            self.kill()
        if wait:
            self._reap()
            return
        t = threading.Thread(target=self._reap, name="kz-reaper", daemon=True)
        with _REAPING_LOCK:
            _REAPING.add(t)
        t.start()

    def _reap(self) -> None:
        try:
            if self.proc is not None:
                try:
                    self.proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    pass
                for f in (self.proc.stdin, self.proc.stdout):
                    try:
                        f.close()
                    except OSError:
                        pass
            shutil.rmtree(self.dir, ignore_errors=True)
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
        try:
            self.proc.stdin.write((json.dumps(msg) + "\n").encode())
            self.proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise WorkerDied(self._death_reason(), self.proc.poll()) from None
        return self._read(time.monotonic() + timeout_s)

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
        """Kill the worker when its session exceeds the process or memory limits."""
        if not os.path.isdir("/proc"):
            return
        n, rss = session_usage(self.proc.pid)
        if n > self.limits.max_processes:
            self.kill()
            raise WorkerDied(f"it started more than {self.limits.max_processes} processes "
                             "(fork bomb?); its process group was killed")
        if rss > self.limits.max_rss_bytes:
            self.kill()
            raise WorkerDied(f"it used more than {self.limits.max_rss_bytes / 2**30:.0f} GiB of "
                             "host memory; its process group was killed")

    def kill(self) -> None:
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def _death_reason(self) -> str:
        try:
            code = self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            self.kill()
            return "the worker stopped answering"
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

    def log_tail(self, n_chars: int = 2000) -> str:
        out = []
        for name in ("boot.log", "worker.log"):
            p = os.path.join(self.dir, name)
            try:
                with open(p, "rb") as f:
                    f.seek(max(0, os.path.getsize(p) - n_chars))
                    out.append(f.read().decode("utf-8", "replace"))
            except OSError:
                pass
        return "".join(out)[-n_chars:]

    def limits_report(self) -> dict:
        return asdict(self.limits)
