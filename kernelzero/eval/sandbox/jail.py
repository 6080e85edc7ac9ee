"""The jail around a sandbox worker: what it can see of the filesystem and of other processes.

Built by bubblewrap (`bwrap`, from the distribution's packages), never by hand. A jailed worker
sees, read-only: the system (/usr, /etc, /bin, /sbin, /lib*, /sys), the Python it runs (its
prefixes and site-packages) and the `kernelzero` package; read-write: its own private directory,
at the same path as outside (the judge writes its files there and reads its outputs there), and a
/tmp of its own; a fresh /dev (with the GPU's device nodes on cuda) and a /proc. It does not see
the results store, the working tree, the user's home or other workers' directories.

Processes: a new network and UTS namespace; no capabilities; and, where the judge runs as root on
the CPU, a uid of its own (worker_uids.py): then no process of the judge's or of another worker's
can be signalled, traced or read through /proc, every process the worker starts (whatever
sessions it makes) is killed at once, and RLIMIT_NPROC binds. Where workers have no uid of their
own (on cuda, or as an ordinary user), a PID namespace keeps /proc to the worker's own processes
and ends them all with the worker. On the CPU both are used. On cuda the judge maps workers'
outputs through CUDA IPC, which failed from a worker of another uid at KernelBench's sizes and
works from another PID namespace (measured on an H200, tests/test_sandbox_gpu.py); /dev/shm is
then the host's (PyTorch's IPC reference counters live there), with the folder of the judge's
worker directories hidden under an empty tmpfs and the worker's own directory put back.

Where bwrap is missing or cannot make namespaces (no user namespaces for an ordinary user), or
`KZ_SANDBOX=none` asks for it, workers run unjailed: every verdict says `isolation: none` in its
environment and the command line warns once (`warn_if_unisolated`).
"""
from __future__ import annotations

import atexit
import functools
import glob
import os
import shutil
import site
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from kernelzero.eval.sandbox.worker_uids import UID_BASE, UID_SLOTS, setpriv_path

MODES = ("auto", "bwrap", "none")
SYSTEM_DIRS = ("/usr", "/etc", "/sys")
TOP_LEVEL_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
# Left to a jail's first process until setpriv drops them: changing uid, and entering the
# worker's directory (mode 0700, already its uid's).
WORKER_CAPS = ("CAP_SETUID", "CAP_SETGID", "CAP_SETPCAP", "CAP_DAC_READ_SEARCH")


@dataclass(frozen=True)
class Isolation:
    """How a worker is isolated (reported in every verdict's `env.sandbox`).

    kind: `bwrap` (jailed) or `none`. reason: why not jailed (empty when jailed).
    own_uid: each worker runs as a uid of its own (root only). pid_namespace: it gets its own.
    shared_shm: /dev/shm is the host's (CUDA IPC) with other workers' directories hidden.
    """

    kind: str
    reason: str = ""
    own_uid: bool = False
    pid_namespace: bool = False
    shared_shm: bool = False

    @property
    def jailed(self) -> bool:
        return self.kind == "bwrap"

    def report(self) -> dict:
        """The verdict environment's view: `isolation` is what workers got (bwrap or none)."""
        d = asdict(self)
        return {"isolation": d.pop("kind"), **d}


class JailError(RuntimeError):
    """`KZ_SANDBOX=bwrap` (or SandboxLimits.isolation) asked for a jail this machine cannot make."""


@functools.lru_cache(maxsize=1)
def probe() -> tuple[str | None, str]:
    """(path of a working bwrap, '') or (None, why not): bwrap found and able to make the
    namespaces a jail uses, tried once per process."""
    exe = shutil.which("bwrap") or next((p for p in ("/usr/bin/bwrap", "/usr/local/bin/bwrap")
                                         if os.access(p, os.X_OK)), None)
    if exe is None:
        return None, "bubblewrap (bwrap) is not installed"
    try:
        r = subprocess.run([exe, "--ro-bind", "/", "/", "--proc", "/proc", "--dev", "/dev",
                            "--unshare-net", "--unshare-pid", "--die-with-parent", "--cap-drop",
                            "ALL", "--", "true"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        return None, f"bwrap could not run: {e}"
    if r.returncode != 0:
        why = (r.stderr.strip().splitlines() or [f"exit code {r.returncode}"])[-1]
        return None, f"bwrap cannot create namespaces here ({why})"
    return exe, ""


def isolation_for(mode: str, device: str, pid_namespace: bool | None = None,
                  own_uid: bool | None = None) -> Isolation:
    """The isolation a worker gets under `mode` (auto|bwrap|none) on `device`; raises JailError
    when `bwrap` is asked for and cannot be had. `own_uid` None: wherever it can be had (root,
    setpriv, the uids mapped). `pid_namespace` None picks: on the CPU, or where workers have no
    uid of their own."""
    if mode not in MODES:
        raise ValueError(f"sandbox isolation {mode!r}: choose one of {MODES}")
    if mode == "none":
        return Isolation("none", "jailing is switched off (KZ_SANDBOX or SandboxLimits.isolation "
                                 "is none)")
    exe, why = probe()
    if exe is None:
        if mode == "bwrap":
            raise JailError(f"a jail was asked for, but {why}")
        return Isolation("none", why)
    can = os.geteuid() == 0 and setpriv_path() is not None and _worker_uids_mapped() \
        and _others_can_run_python()
    # On cuda the judge maps workers' outputs through CUDA IPC, and on an H200 (driver 580) it
    # could not map those of a worker with another uid at KernelBench's sizes
    # (cudaErrorMapBufferObjectFailed), while a PID namespace under the judge's uid maps them
    # (tests/test_sandbox_gpu.py): so on cuda a worker keeps the judge's uid unless asked.
    own_uid = (can and device != "cuda") if own_uid is None else own_uid and can
    if pid_namespace is None:
        pid_namespace = device != "cuda" or not own_uid
    return Isolation("bwrap", own_uid=own_uid, pid_namespace=pid_namespace,
                     shared_shm=device == "cuda")


def _worker_uids_mapped() -> bool:
    """Whether this user namespace has the worker uids (a container's root may map only a few
    thousand uids: its workers then get a PID namespace instead)."""
    try:
        with open("/proc/self/uid_map") as f:
            ranges = [tuple(map(int, line.split())) for line in f if line.strip()]
    except (OSError, ValueError):
        return False
    return any(inside <= UID_BASE and UID_BASE + UID_SLOTS <= inside + count
               for inside, _, count in ranges)


def _others_can_run_python() -> bool:
    """Whether a uid with no rights of its own can run the workers' Python: the interpreter,
    the standard library, torch and the kernelzero package readable (and their folders
    searchable) by others, as installs usually are (a tree copied with mode 0600 is not)."""
    import importlib.util
    files = [os.path.realpath(sys.executable), os.__file__, __file__]
    spec = importlib.util.find_spec("torch")
    if spec is not None and spec.origin:
        files.append(spec.origin)
    for path in files:
        try:
            if os.stat(path).st_mode & 0o004 == 0 or \
                    os.stat(os.path.dirname(path)).st_mode & 0o005 != 0o005:
                return False
        except OSError:
            return False
    return True


_WARNED = False


def warn_if_unisolated(mode: str, device: str = "cpu", stream=None) -> bool:
    """Print the loud, once-per-process warning when workers would run unjailed; True if it did."""
    global _WARNED
    try:
        iso = isolation_for(mode, device)
    except JailError:
        return False  # the judge will refuse to start workers, with this reason
    if iso.jailed or _WARNED:
        return False
    _WARNED = True
    bar = "!" * 78
    remedy = ("!! Unset KZ_SANDBOX (or set it to auto) to jail them.\n" if mode == "none" else
              "!! Install bubblewrap (Debian/Ubuntu: apt-get install bubblewrap) and allow user\n"
              "!! namespaces, or run as root.\n")
    print(f"{bar}\n!! WARNING: kernelzero does not jail the code it judges: {iso.reason}.\n"
          "!! Candidates and reference modules run as you, with your files: they can read your\n"
          "!! home, write wherever you can, rewrite the results store and outlive the verdict.\n"
          f"!! Every verdict records `isolation: none`.\n{remedy}{bar}",
          file=stream or sys.stderr, flush=True)
    return True


# ------------------------------------------------------------------------------- the worker folders
_PARENTS: dict[str, str] = {}


def workers_parent(root: str) -> str:
    """This process's folder for jailed workers' directories under `root` (made once, mode
    0711: a worker reaches its own directory by path, lists nothing). A jail hides its siblings."""
    if root not in _PARENTS or not os.path.isdir(_PARENTS[root]):
        path = tempfile.mkdtemp(prefix=f"kz-workers-{os.getpid()}-", dir=root)
        os.chmod(path, 0o711)
        _PARENTS[root] = path
        atexit.register(shutil.rmtree, path, True)
    return _PARENTS[root]


# ------------------------------------------------------------------------------- the bwrap command
class _Mounts:
    """bwrap mount arguments in order, with the folders above each mount point made 0755 (bwrap
    makes missing ones 0700, which a worker with its own uid could not cross)."""

    def __init__(self):
        self.args: list[str] = []
        self.mounts: list[tuple[str, bool]] = []  # (mount point, shows the host's folder), in order
        self.made: set[str] = {"/"}

    def covered(self, path: str) -> bool:
        """Whether `path` shows the host's folder: the last mount above it is a bind."""
        return next((host for dest, host in reversed(self.mounts) if _under(path, dest)), False)

    def _parents(self, path: str) -> None:
        missing = []
        for parent in Path(path).parents:
            p = str(parent)
            if p in self.made or self.covered(p):
                break
            missing.append(p)
        for p in reversed(missing):
            self.args += ["--perms", "0755", "--dir", p]
            self.made.add(p)

    def bind(self, kind: str, src: str, dest: str | None = None) -> None:
        dest = dest or src
        if self.covered(dest) and kind == "--ro-bind":
            return  # already shown, read-only or not
        self._parents(dest)
        self.args += [kind, src, dest]
        self.mounts.append((dest, True))
        self.made.add(dest)

    def new(self, kind: str, dest: str, perms: str) -> None:
        """A fresh mount (tmpfs, proc, dev) or folder at `dest`."""
        self._parents(dest)
        self.args += (["--perms", perms] if perms else []) + [kind, dest]
        self.made.add(dest)
        if kind != "--dir":
            self.mounts.append((dest, False))


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def python_dirs(package_root: str) -> list[str]:
    """What a worker's `python -I` needs to read: its prefixes, site-packages, the interpreter's
    own folder, and the kernelzero package (not the working tree around it)."""
    dirs = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix,
            os.path.dirname(os.path.realpath(sys.executable)), *site.getsitepackages(),
            os.path.join(package_root, "kernelzero")]
    out = []
    for d in dirs:
        d = os.path.realpath(d)
        if os.path.isdir(d) and d not in out and d != "/":
            out.append(d)
    return sorted(out, key=len)


# Compilers Triton (its launcher stub) and load_inline call, by variable and by name.
COMPILER_VARS = ("CC", "CXX")
COMPILERS = ("cc", "c++", "gcc", "g++", "clang", "nvcc", "ninja")


def toolchain_dirs() -> list[str]:
    """Install prefixes of the compilers outside the system folders (e.g. /opt/gcc for
    /opt/gcc/bin/gcc: its bin, lib and libexec together), found through CC, CXX and PATH, so
    that a jailed worker can build what it could build unjailed."""
    found = [os.environ.get(v, "").split(" ")[0] for v in COMPILER_VARS]
    found += [shutil.which(c) or "" for c in COMPILERS]
    out = []
    for exe in found:
        if not exe or not os.path.exists(exe):
            continue
        for path in {exe, os.path.realpath(exe)}:
            folder = os.path.dirname(path)
            prefix = os.path.dirname(folder) if os.path.basename(folder) == "bin" else folder
            if prefix and prefix != "/" and not any(_under(prefix, d) for d in SYSTEM_DIRS):
                out.append(prefix)
    return out


def gpu_dirs() -> list[str]:
    """Folders the CUDA toolchain may live in outside /usr: CUDA_HOME, CUDA_PATH, the dynamic
    loader's extra paths, Triton's ptxas, the compilers' prefixes (toolchain_dirs)."""
    out = [os.environ.get("CUDA_HOME", ""), os.environ.get("CUDA_PATH", ""),
           os.path.dirname(os.environ.get("TRITON_PTXAS_PATH", ""))]
    out += os.environ.get("LD_LIBRARY_PATH", "").split(":")
    out += toolchain_dirs()
    return sorted({os.path.realpath(d) for d in out if d and os.path.isdir(d)}, key=len)


def bwrap_command(iso: Isolation, writable: str, package_root: str, device: str,
                  hide: str | None = None, keep_caps: tuple[str, ...] = ()) -> list[str]:
    """The bwrap command line (up to its `--`) for a jail whose one writable host folder is
    `writable`, mounted at the same path. `hide`: a folder above it whose other contents (other
    workers' directories) must not show. `keep_caps`: capabilities left to the jail's first
    process, which must drop them before any untrusted code runs."""
    exe, why = probe()
    if exe is None:
        raise JailError(why)
    m = _Mounts()
    for d in SYSTEM_DIRS:
        if os.path.isdir(d):
            m.bind("--ro-bind", d)
    for link in TOP_LEVEL_LINKS:  # merged-/usr systems link these; others have real folders
        if os.path.islink(link):
            m.args += ["--symlink", os.readlink(link), link]
            m.made.add(link)
        elif os.path.isdir(link):
            m.bind("--ro-bind", link)
    m.new("--proc", "/proc", "")
    m.new("--dev", "/dev", "")
    if device == "cuda":
        for node in sorted(glob.glob("/dev/nvidia*")):
            m.args += ["--dev-bind", node, node]
    m.new("--tmpfs", "/tmp", "1777")
    if iso.shared_shm and os.path.isdir("/dev/shm"):
        m.bind("--dev-bind", "/dev/shm")
    else:
        m.new("--tmpfs", "/dev/shm", "1777")
    for d in python_dirs(package_root) + (gpu_dirs() if device == "cuda" else []):
        m.bind("--ro-bind", d)  # after /tmp and /dev/shm: a virtualenv may live there
    if hide:
        m.new("--tmpfs" if m.covered(hide) else "--dir", hide, "0711")
    m.bind("--bind", writable)
    # No --die-with-parent: its parent-death signal follows the judge *thread* that started
    # bwrap (spares start from short-lived threads). A judge that dies closes the worker's pipes,
    # which ends it; killing the process group ends bwrap with it.
    args = [exe, "--unshare-net", "--unshare-uts", "--cap-drop", "ALL"]
    for cap in keep_caps:
        args += ["--cap-add", cap]
    if iso.pid_namespace:
        args += ["--unshare-pid", "--unshare-ipc"]
    return args + m.args + ["--chdir", writable, "--"]


def device_groups(device: str) -> list[int]:
    """The groups a worker with its own uid needs for the GPU: those of the NVIDIA device nodes
    that their group may use but others may not (usually none: the nodes are mode 0666)."""
    if device != "cuda":
        return []
    gids = set()
    for node in glob.glob("/dev/nvidia*"):
        try:
            st = os.stat(node)
        except OSError:
            continue
        if st.st_mode & 0o006 != 0o006 and st.st_mode & 0o060 == 0o060:
            gids.add(st.st_gid)
    return sorted(gids)
