"""ForkServer: start sandbox workers by forking a process that has already imported torch.

A fresh `python -I` worker spends most of its start-up importing torch (seconds of CPU each);
the evaluator needs one fresh process per candidate and per task, so on a busy machine start-up,
not judging, limits throughput. The fork server pays the import once: a "zygote" process (itself
a `python -I` process with the workers' scrubbed environment) imports torch, triton and the
worker code, touches no device, runs no untrusted code, and forks one child per worker. Each
child then becomes exactly what `SandboxWorker` would have started: its own session, its own
network namespace (as root), its private directory as cwd and HOME, its own environment, rlimits
set before any untrusted code loads, stdin/stdout pipes to the judge, stderr to its boot log.

CUDA is never initialised in the zygote (a CUDA context does not survive fork): every child
creates its own. The zygote is single-threaded when it forks (no torch op ever ran in it).

The judge talks to the zygote over a UNIX socket: one spawn request at a time, with the child's
three file descriptors passed as SCM_RIGHTS; the zygote answers with the child's pid and later
reports each child's exit status (it is the children's parent, so it reaps them). `ForkedProcess`
gives the judge the part of `subprocess.Popen` that `SandboxWorker` uses.

In a jail (jail.py), the zygote runs inside one bubblewrap jail whose only writable folder is the
judge's folder of worker directories, keeping the capabilities to change uid and make network
namespaces; each child gets its own network namespace, then becomes the uid the judge reserved for
it (worker_uids.py) and loses every capability before it loads anything untrusted. Children of one
zygote thus share its view of the filesystem (a private /tmp too) but not each other's directories
(mode 0700, other uids), processes or memory. Without uids of their own (an ordinary user), jailed
workers are spawned instead (sandbox.SandboxWorker).

If the zygote dies (unjailed, a candidate can signal it: same user), the next spawn starts a new
one.
"""
from __future__ import annotations

import array
import json
import os
import socket
import subprocess
import sys
import threading
import time

ZYGOTE_BOOT = ("import sys; sys.path.insert(0, sys.argv[1]); "
               "from kernelzero.eval.sandbox.forkserver import zygote_main; "
               "zygote_main(int(sys.argv[2]))")


class ForkServerError(OSError):
    """The zygote could not be started or did not answer a spawn request."""


class ForkedProcess:
    """The `subprocess.Popen` surface SandboxWorker needs, for a child of the zygote."""

    def __init__(self, server: "ForkServer", pid: int, stdin, stdout):
        self._server, self.pid, self.stdin, self.stdout = server, pid, stdin, stdout
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._server.exit_code(self.pid)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        code = self._server.wait_exit(self.pid, deadline)
        if code is None:
            raise subprocess.TimeoutExpired(f"forked worker {self.pid}", timeout)
        self.returncode = code
        return code


class ForkServer:
    """One zygote per (device, visible GPUs) environment; `spawn` is thread-safe."""

    def __init__(self, env: dict[str, str], package_root: str, start_timeout_s: float = 120.0,
                 jail: list[str] | None = None):
        """jail: the bwrap command (up to its `--`) the zygote runs in; empty or None: none."""
        self.env, self.package_root, self.start_timeout_s = dict(env), package_root, start_timeout_s
        self.jail = list(jail or [])
        self._lock = threading.Lock()        # one spawn request at a time
        self._cond = threading.Condition()   # exit statuses and spawn answers
        self._exits: dict[int, int] = {}
        self._answers: list[dict] = []
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen | None = None
        self._reader: threading.Thread | None = None

    # ---------------------------------------------------------------- zygote life cycle
    def _start(self) -> None:
        import tempfile
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        env = {**self.env, "HOME": tempfile.gettempdir(), "TMPDIR": tempfile.gettempdir()}
        self._proc = subprocess.Popen(
            [*self.jail, sys.executable, "-I", "-c", ZYGOTE_BOOT, self.package_root,
             str(theirs.fileno())],
            pass_fds=(theirs.fileno(),), env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            cwd="/")
        theirs.close()
        self._sock = ours
        self._answers = []  # a fresh list: a dead zygote's reader may still report into the old
        self._reader = threading.Thread(target=self._read_loop, args=(ours, self._answers),
                                        daemon=True)
        self._reader.start()
        if self._next_answer(time.monotonic() + self.start_timeout_s).get("ready") is not True:
            self.close()
            raise ForkServerError("the fork server did not start")

    def _alive(self) -> bool:
        return self._proc is not None and self._proc.poll() is None and self._sock is not None

    def _read_loop(self, sock: socket.socket, answers: list) -> None:
        buf = b""
        while True:
            try:
                chunk = sock.recv(1 << 16)
            except OSError:
                chunk = b""
            if not chunk:
                break
            buf += chunk
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                msg = json.loads(line)
                with self._cond:
                    if "exit" in msg:
                        self._exits[int(msg["exit"])] = int(msg["code"])
                    else:
                        answers.append(msg)
                    self._cond.notify_all()
        with self._cond:  # the zygote is gone: no answer will come
            answers.append({"dead": True})
            self._cond.notify_all()

    def _next_answer(self, deadline: float) -> dict:
        with self._cond:
            while not self._answers:
                left = deadline - time.monotonic()
                if left <= 0:
                    return {}
                self._cond.wait(min(left, 1.0))
            return self._answers.pop(0)

    # ---------------------------------------------------------------- judge side API
    def spawn(self, cwd: str, env: dict[str, str], stderr_path: str, no_network: bool,
              threads: int, uid: int | None = None, groups: list[int] = ()) -> ForkedProcess:
        """A new worker process (see the module docstring), running as `uid` (in `groups`) when
        given; raises ForkServerError."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err = os.open(stderr_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            with self._lock:
                if not self._alive():
                    self.close()
                    self._start()
                req = json.dumps({"cwd": cwd, "env": env, "no_network": no_network,
                                  "threads": threads, "uid": uid,
                                  "groups": list(groups)}).encode() + b"\n"
                fds = array.array("i", [in_r, out_w, err])
                try:
                    self._sock.sendmsg([req], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, fds)])
                except OSError as e:
                    raise ForkServerError(f"the fork server is gone: {e}") from None
                answer = self._next_answer(time.monotonic() + 30.0)
            if "pid" not in answer:
                raise ForkServerError(answer.get("error") or "the fork server did not answer")
        finally:
            for fd in (in_r, out_w, err):  # the child holds its own copies now
                os.close(fd)
        return ForkedProcess(self, int(answer["pid"]), os.fdopen(in_w, "wb"),
                             os.fdopen(out_r, "rb"))

    def exit_code(self, pid: int) -> int | None:
        with self._cond:
            return self._exits.get(pid)

    def wait_exit(self, pid: int, deadline: float | None) -> int | None:
        with self._cond:
            while pid not in self._exits:
                if not self._alive():  # orphaned children are reaped by init; report a kill
                    return self._exits.setdefault(pid, -9)
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    return None
                self._cond.wait(0.2 if left is None else min(left, 0.2))
            return self._exits.pop(pid)

    def close(self) -> None:
        if self._sock is not None:
            try:
                self._sock.close()
            except OSError:
                pass
            self._sock = None
        if self._proc is not None:
            if self._proc.poll() is None:
                self._proc.kill()
            try:
                self._proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
            self._proc = None


_SERVERS: dict[str, ForkServer] = {}
_SERVERS_LOCK = threading.Lock()


def fork_server(env: dict[str, str], package_root: str, jail: list[str] | None = None) -> ForkServer:
    """The process-wide fork server for this worker environment and jail (started on first
    spawn)."""
    key = json.dumps([env, jail or []], sort_keys=True)
    with _SERVERS_LOCK:
        if key not in _SERVERS:
            _SERVERS[key] = ForkServer(env, package_root, jail=jail)
        return _SERVERS[key]


def close_all() -> None:
    with _SERVERS_LOCK:
        for server in _SERVERS.values():
            server.close()
        _SERVERS.clear()


# ------------------------------------------------------------------------------ zygote side
def zygote_main(sock_fd: int) -> None:
    """Import what workers need, then fork one child per request until the judge hangs up."""
    import select
    import signal

    import torch  # noqa: F401 - the point of the zygote
    import torch._inductor.config  # noqa: F401 - seconds, needed by every candidate (worker.py)
    try:
        import triton  # noqa: F401
    except ImportError:
        pass
    from kernelzero.eval.transport import tensorio  # noqa: F401
    from kernelzero.eval.worker import process  # noqa: F401 - and worker.py with it

    sock = socket.socket(fileno=sock_fd)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)

    def send(obj: dict) -> None:
        sock.sendall(json.dumps(obj).encode() + b"\n")

    send({"ready": True, "pid": os.getpid()})
    buf = b""
    while True:
        ready, _, _ = select.select([sock], [], [], 0.1)
        _reap(send)
        if not ready:
            continue
        msg, anc, _, _ = sock.recvmsg(1 << 16, socket.CMSG_SPACE(3 * array.array("i").itemsize))
        if not msg:
            break  # the judge is gone; children live on until their own pipes close
        fds = array.array("i")
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[: len(data) - len(data) % fds.itemsize])
        buf += msg
        line, buf = buf.split(b"\n", 1)
        req = json.loads(line)
        pid = os.fork()
        if pid == 0:
            sock.close()
            _become_worker(req, list(fds))  # never returns
        for fd in fds:
            os.close(fd)
        send({"pid": pid})
    _reap(send)


def _reap(send) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        try:
            send({"exit": pid, "code": os.waitstatus_to_exitcode(status)})
        except OSError:
            pass


def _become_worker(req: dict, fds: list[int]) -> None:
    """In the forked child: the same process SandboxWorker.start would have made, then the worker."""
    code = 1
    try:
        os.setsid()
        os.dup2(fds[0], 0)
        os.dup2(fds[1], 1)
        os.dup2(fds[2], 2)
        os.closerange(3, 65536)  # the judge's socket and every other inherited descriptor
        if req.get("no_network"):
            from kernelzero.eval.worker.network import isolate_network
            isolate_network()
        if req.get("uid") is not None:  # its own uid: every capability goes with root
            uid = int(req["uid"])
            os.setgroups([int(g) for g in req.get("groups") or []])
            os.setresgid(uid, uid, uid)
            os.setresuid(uid, uid, uid)
        os.chdir(req["cwd"])
        os.environ.clear()
        os.environ.update(req["env"])
        import tempfile
        tempfile.tempdir = None  # cached in the zygote: the worker's TMPDIR is its own directory
        import torch
        torch.set_num_threads(max(1, int(req.get("threads", 1))))
        sys.stdin = open(0, "r", buffering=1, closefd=False)
        sys.stdout = open(1, "w", buffering=1, closefd=False)
        sys.stderr = open(2, "w", buffering=1, closefd=False)
        from kernelzero.eval.worker.process import main
        main()
        code = 0
    except BaseException:  # noqa: BLE001 - report to the boot log, then die
        try:
            import traceback
            traceback.print_exc()
        except BaseException:  # noqa: BLE001
            pass
    finally:
        os._exit(code)
