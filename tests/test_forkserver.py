"""Workers forked from the fork server are the same sandbox as spawned ones: own session, cwd,
HOME/TMPDIR, build dirs, exit codes seen by the judge, and a dead zygote is replaced."""
from __future__ import annotations

import json
import os
import signal
import time

import pytest

from kernelzero.eval.forkserver import fork_server
from kernelzero.eval.sandbox import PACKAGE_ROOT, SandboxLimits, SandboxWorker, WorkerDied

FACTS = '''
import json, os, tempfile
facts = {"pid": os.getpid(), "sid": os.getsid(0), "cwd": os.getcwd(), "home": os.environ.get("HOME"),
         "tmp": tempfile.gettempdir(), "triton_cache": os.environ.get("TRITON_CACHE_DIR"),
         "interpret": os.environ.get("TRITON_INTERPRET"), "fds": sorted(int(f) for f in os.listdir("/proc/self/fd"))}
open("facts.json", "w").write(json.dumps(facts))
'''


def _worker(tmp_path) -> SandboxWorker:
    return SandboxWorker("cpu", SandboxLimits(), work_root=str(tmp_path), name="t", start_method="fork")


def test_forked_worker_is_its_own_sandbox(tmp_path):
    with _worker(tmp_path) as w:
        w.start()
        assert type(w.proc).__name__ == "ForkedProcess", "fell back to spawn"
        task = os.path.join(w.dir, "facts_task.py")
        open(task, "w").write(FACTS)
        reply = w.request({"op": "load", "role": "reference", "task_path": task, "device": "cpu"}, 60)
        assert reply["ok"], reply
        facts = json.loads(open(os.path.join(w.dir, "facts.json")).read())
        assert facts["pid"] == w.proc.pid and facts["sid"] == w.proc.pid  # session leader
        assert facts["cwd"] == w.dir and facts["home"] == w.dir and facts["tmp"] == w.dir
        assert facts["triton_cache"].startswith(w.dir) and facts["interpret"] == "1"
        assert max(facts["fds"]) < 8, f"inherited descriptors leaked: {facts['fds']}"


def test_exit_code_reaches_the_judge(tmp_path):
    with _worker(tmp_path) as w:
        w.start()
        task = os.path.join(w.dir, "exit_task.py")
        open(task, "w").write("import os\nos._exit(0)\n")
        with pytest.raises(WorkerDied) as e:
            w.request({"op": "load", "role": "reference", "task_path": task, "device": "cpu"}, 60)
        assert e.value.exit_code == 0


def test_a_killed_fork_server_is_replaced(tmp_path):
    with _worker(tmp_path) as w:
        w.start()
    server = fork_server(w._base_env(), PACKAGE_ROOT)
    os.kill(server._proc.pid, signal.SIGKILL)
    server._proc.wait(timeout=10)
    t0 = time.monotonic()
    with _worker(tmp_path) as w2:
        w2.start()
        assert type(w2.proc).__name__ == "ForkedProcess"
        assert w2.request({"op": "warm", "device": "cpu"}, 60)["ok"]
    assert time.monotonic() - t0 < 120
