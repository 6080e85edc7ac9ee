"""The jail around sandbox workers (kernelzero/eval/sandbox/jail.py, worker_uids.py), one
property a test: what a jailed worker can see and touch, that nothing it starts outlives it, how
it degrades.

Each test runs code inside a real worker by having it import a module (the `load` command), for
both ways of starting one (spawn: a bwrap jail each; fork: children of a jailed fork server).
Tests that need a jail skip where this machine cannot make one (KZ_REQUIRE_SANDBOX=1: fail)."""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from kernelzero.eval.sandbox import jail
from kernelzero.eval.sandbox.sandbox import PACKAGE_ROOT, SandboxLimits, SandboxWorker, WorkerDied
from kernelzero.eval.sandbox.worker_uids import UID_BASE, UID_SLOTS, WorkerUid

METHODS = ["spawn", "fork"]


@pytest.fixture
def jailed():
    if not jail.isolation_for("auto", "cpu").jailed:
        if os.environ.get("KZ_REQUIRE_SANDBOX") == "1":
            pytest.fail("KZ_REQUIRE_SANDBOX=1 but this machine cannot make a jail (bubblewrap)")
        pytest.skip("this machine cannot make a jail (install bubblewrap)")


def _worker(tmp_path, method, name="j") -> SandboxWorker:
    return SandboxWorker("cpu", SandboxLimits(isolation="auto"), work_root=str(tmp_path),
                         name=name, start_method=method)


def _run_in(w: SandboxWorker, code: str) -> dict:
    """Run `code` inside the worker (imported as a module); it leaves its findings in `facts`."""
    path = os.path.join(w.dir, "probe_task.py")
    Path(path).write_text("import json, os\nfacts = {}\n" + code +
                          "\nopen('facts.json', 'w').write(json.dumps(facts))\n")
    reply = w.request({"op": "load", "role": "reference", "task_path": path, "device": "cpu"}, 120)
    assert reply["ok"], reply
    return json.loads(Path(w.dir, "facts.json").read_text())


PROBE = '''
def attempt(what, fn):
    try:
        fn()
        facts[what] = "allowed"
    except OSError as e:
        facts[what] = type(e).__name__
attempt("read_outside", lambda: open({outside!r}).read())
attempt("list_outside_folder", lambda: os.listdir({outside_dir!r}))
attempt("write_package", lambda: open({package!r} + "/kz_probe.txt", "w").write("x"))
attempt("write_usr", lambda: open("/usr/kz_probe.txt", "w").write("x"))
attempt("write_own_dir", lambda: open("mine.txt", "w").write("x"))
attempt("read_sibling", lambda: open({sibling!r} + "/boot.log").read())
attempt("list_sibling", lambda: os.listdir({sibling!r}))
attempt("signal_judge", lambda: os.kill({judge}, 0))
attempt("judge_environ", lambda: open("/proc/{judge}/environ").read())
attempt("judge_root", lambda: os.listdir("/proc/{judge}/root"))
facts["uid"] = os.getuid()
facts["cwd"] = os.getcwd()
facts["home"] = os.environ["HOME"]
'''


@pytest.mark.parametrize("method", METHODS)
def test_a_jailed_worker_sees_only_its_own_folder(tmp_path, method, jailed):
    outside = tmp_path / "home" / "secret.txt"
    outside.parent.mkdir()
    outside.write_text("the user's")
    with _worker(tmp_path, method, "a") as a, _worker(tmp_path, method, "b") as b:
        a.start()
        b.start()
        facts = _run_in(a, PROBE.format(outside=str(outside), outside_dir=str(outside.parent),
                                        package=os.path.join(PACKAGE_ROOT, "kernelzero"),
                                        sibling=b.dir, judge=os.getpid()))
        assert facts["write_own_dir"] == "allowed" and facts["cwd"] == facts["home"] == a.dir
        denied = {k: v for k, v in facts.items() if v == "allowed" and k != "write_own_dir"}
        assert denied == {}, f"the jail let these through: {denied}"
        if a.uid is not None:  # root: uids of their own
            assert facts["uid"] == a.uid.uid != b.uid.uid and facts["uid"] != 0
    assert not (Path(PACKAGE_ROOT) / "kernelzero" / "kz_probe.txt").exists()


ORPHAN = '''
import ctypes, time
pid = os.fork()
if pid:
    os.waitpid(pid, 0)
else:
    os.setsid()
    if os.fork():
        os._exit(0)
    ctypes.CDLL(None).prctl(15, b"kz-jail-orphan", 0, 0, 0)
    time.sleep(60)
    os._exit(0)
'''


@pytest.mark.parametrize("method", METHODS)
def test_nothing_a_worker_starts_outlives_it(tmp_path, method, jailed):
    """A double-forked process in a session of its own leaves the worker's process group; it
    must still die when the worker is closed (kill -1 as its uid, or its PID namespace)."""
    w = _worker(tmp_path, method)
    w.start()
    _run_in(w, ORPHAN)
    assert _alive("kz-jail-orphan"), "the orphan did not start"
    with w.released():
        pass
    deadline = time.monotonic() + 1.0
    while _alive("kz-jail-orphan") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive("kz-jail-orphan"), "the orphan outlived its worker by a second"


def _alive(name: str) -> list[int]:
    out = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            stat = open(f"/proc/{entry}/stat").read()
        except OSError:
            continue
        if stat[stat.index("(") + 1:stat.rindex(")")] == name and \
                stat.rsplit(")", 1)[1].split()[0] != "Z":
            out.append(int(entry))
    return out


@pytest.mark.parametrize("method", METHODS)
def test_a_worker_started_by_a_thread_that_ended_keeps_running(tmp_path, method, jailed):
    """Spares are started by short-lived threads: a jail must not die with the thread that
    started it (bwrap's --die-with-parent would: its signal follows the parent thread)."""
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("w", _worker(tmp_path, method)).start())
    t.start()
    t.join()
    time.sleep(0.5)
    with box["w"] as w:
        assert w.request({"op": "warm", "device": "cpu", "stages": ["imports"]}, 120)["ok"]


def test_no_isolation_is_reported_and_warned_about_once(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(jail, "_WARNED", False)
    limits = SandboxLimits(isolation="none")
    with SandboxWorker("cpu", limits, work_root=str(tmp_path), name="n") as w:
        assert not w.isolation.jailed and w.uid is None
        w.start()
        assert w.request({"op": "warm", "device": "cpu", "stages": ["imports"]}, 120)["ok"]
    err = capsys.readouterr().err
    assert err.count("WARNING: kernelzero does not jail") == 1 and "switched off" in err
    assert not jail.warn_if_unisolated("none")  # once per process
    from kernelzero.eval.sandbox.limits import sandbox_report
    assert sandbox_report(limits, "cpu")["isolation"] == "none"


def test_a_required_jail_that_cannot_be_made_fails_every_worker(tmp_path, monkeypatch):
    monkeypatch.setattr(jail, "probe", lambda: (None, "bubblewrap (bwrap) is not installed"))
    with pytest.raises(WorkerDied, match="a jail was asked for, but bubblewrap"):
        SandboxWorker("cpu", SandboxLimits(isolation="bwrap"), work_root=str(tmp_path))
    auto = jail.isolation_for("auto", "cpu")
    assert auto.kind == "none" and "not installed" in auto.reason
    from kernelzero.eval.sandbox.limits import sandbox_report
    assert sandbox_report(SandboxLimits(isolation="bwrap"), "cpu")["isolation"] == "unavailable"


def test_the_bwrap_command_mounts_in_order(monkeypatch, tmp_path):
    """Folders above a mount are made 0755; on cuda /dev/shm is the host's with the workers'
    folder hidden under a tmpfs and the worker's own directory bound back, last."""
    monkeypatch.setattr(jail, "probe", lambda: ("/usr/bin/bwrap", ""))
    tree = tmp_path / "deep" / "tree"
    (tree / "kernelzero").mkdir(parents=True)
    parent = "/dev/shm/kz-workers-1-x"
    own = parent + "/kz-w-1"
    iso = jail.Isolation("bwrap", own_uid=True, pid_namespace=False, shared_shm=True)
    args = jail.bwrap_command(iso, own, str(tree), "cuda", hide=parent, keep_caps=("CAP_SETUID",))
    line = " ".join(args)
    assert args[-3:] == ["--chdir", own, "--"] and f"--bind {own} {own} --chdir" in line
    assert line.index("--dev-bind /dev/shm /dev/shm") < line.index(f"--perms 0711 --tmpfs {parent}")
    assert line.index(f"--tmpfs {parent}") < line.index(f"--bind {own} {own}")
    made = " ".join(f"--perms 0755 --dir {p}" for p in reversed(tree.parents) if str(p) > "/tmp")
    assert f"{made} --perms 0755 --dir {tree} --ro-bind {tree}/kernelzero {tree}/kernelzero" in line
    assert line.index("--tmpfs /tmp") < line.index(f"--ro-bind {tree}/kernelzero")
    assert "--unshare-pid" not in args and "--cap-drop ALL --cap-add CAP_SETUID" in line
    cpu = jail.Isolation("bwrap", own_uid=False, pid_namespace=True)
    line = " ".join(jail.bwrap_command(cpu, own, str(tree), "cpu", hide=parent))
    assert "--unshare-pid" in line and "--perms 1777 --tmpfs /dev/shm" in line
    assert f"--perms 0711 --dir {parent}" in line and "/dev/nvidia" not in line


def test_a_compiler_outside_the_system_folders_is_shown_to_cuda_workers(monkeypatch, tmp_path):
    """Triton builds its launcher with $CC (the H200 image's is /opt/gcc/bin/gcc): a jail without
    the compiler's prefix fails every Triton candidate on cuda with FileNotFoundError."""
    monkeypatch.setattr(jail, "probe", lambda: ("/usr/bin/bwrap", ""))
    prefix = tmp_path / "opt" / "gcc"
    (prefix / "bin").mkdir(parents=True)
    (prefix / "libexec").mkdir()
    cc = prefix / "bin" / "gcc"
    cc.write_text("#!/bin/sh\n")
    cc.chmod(0o755)
    monkeypatch.setenv("CC", str(cc))
    assert str(prefix) in jail.toolchain_dirs()
    (tmp_path / "tree" / "kernelzero").mkdir(parents=True)
    iso = jail.Isolation("bwrap", own_uid=True, pid_namespace=False, shared_shm=True)
    line = " ".join(jail.bwrap_command(iso, str(tmp_path / "w"), str(tmp_path / "tree"), "cuda"))
    assert f"--ro-bind {prefix} {prefix}" in line


def test_worker_uids_are_held_until_released():
    a, b = WorkerUid.reserve(), WorkerUid.reserve()
    try:
        assert UID_BASE <= a.uid < UID_BASE + UID_SLOTS and a.uid != b.uid
        import fcntl
        lock = os.path.join(jail_lock_dir(), str(a.uid))
        fd = os.open(lock, os.O_RDWR)
        with pytest.raises(BlockingIOError):
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        a.release()
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free once released
        os.close(fd)
    finally:
        a.release()
        b.release()


def jail_lock_dir() -> str:
    from kernelzero.eval.sandbox.worker_uids import _lock_dir
    return _lock_dir()


@pytest.fixture(autouse=True)
def _root_for_uids(request):
    if request.node.name.startswith("test_worker_uids") and os.geteuid() != 0:
        pytest.skip("worker uids are for a judge running as root")


def test_the_judge_reads_no_file_through_a_link_or_fifo_the_worker_made(tmp_path):
    """A worker that replaces its log or an output file with a link to a file of the judge's
    (a verdict key, a password file) or with a FIFO gets nothing back and blocks nothing."""
    from kernelzero.eval.transport.tensorio import DecodeError, decode
    secret = tmp_path / "judge_secret.txt"
    secret.write_text("judge-only secret")
    w = SandboxWorker("cpu", SandboxLimits(isolation="none"), work_root=str(tmp_path), name="l")
    try:
        os.symlink(secret, os.path.join(w.dir, "worker.log"))
        os.mkfifo(os.path.join(w.dir, "boot.log"))
        assert "secret" not in w.log_tail()
        os.symlink(secret, os.path.join(w.dir, "out_0.bin"))
        desc = {"kind": "tensor", "dtype": "uint8", "shape": [17], "device": "cpu",
                "exact_type": True, "instance_attrs": [], "offset": 0, "nbytes": 17}
        with pytest.raises(DecodeError, match="unreadable"):
            decode(desc, w.path_of("out_0.bin"))
        os.mkfifo(os.path.join(w.dir, "out_1.bin"))
        with pytest.raises(DecodeError, match="not a regular file"):
            decode(desc, w.path_of("out_1.bin"))
        for name in ("../judge_secret.txt", "sub/out", ".hidden", "", None, 3):
            with pytest.raises(ValueError):
                w.path_of(name)
    finally:
        w.close()


def test_uid_usage_counts_a_uids_live_processes():
    from kernelzero.eval.sandbox.process_tree import uid_usage
    n, rss = uid_usage(os.getuid())
    assert n >= 1 and rss > 0  # this process at least
    assert uid_usage(UID_BASE + UID_SLOTS + 12345) == (0, 0)


def test_on_cuda_workers_keep_the_judges_uid_inside_a_pid_namespace(monkeypatch):
    """As root, a CPU worker gets a uid of its own; a cuda worker does not (the judge could not
    map CUDA IPC outputs of another uid on an H200) and gets a PID namespace instead, unless a
    uid of its own is asked for."""
    monkeypatch.setattr(jail, "probe", lambda: ("/usr/bin/bwrap", ""))
    monkeypatch.setattr(jail.os, "geteuid", lambda: 0)
    monkeypatch.setattr(jail, "setpriv_path", lambda: "/usr/bin/setpriv")
    monkeypatch.setattr(jail, "_worker_uids_mapped", lambda: True)
    monkeypatch.setattr(jail, "_others_can_run_python", lambda: True)
    cpu, cuda = jail.isolation_for("auto", "cpu"), jail.isolation_for("auto", "cuda")
    assert cpu.own_uid and cpu.pid_namespace and not cpu.shared_shm
    assert not cuda.own_uid and cuda.pid_namespace and cuda.shared_shm
    asked = jail.isolation_for("bwrap", "cuda", own_uid=True)
    assert asked.own_uid and not asked.pid_namespace
