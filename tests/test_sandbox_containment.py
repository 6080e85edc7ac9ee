"""Containment (issue 27): code under judgement cannot reach the store, the user's files or the
future.

The threat-11 fixtures of tests/adversarial/exploits/ are judged the way a user judges a run:
`kernelzero eval --tasks --samples --db` in a subprocess, with a home folder holding a secret and
a verdict key, a working tree holding the store and a training verdict cache (both folders marked
KZ_ADVERSARIAL_TARGET, the only places the fixtures touch). Then:

- jailed (the default isolation), every property holds: each verdict is honest and verified,
  `kernelzero report` reports it, the cache is untouched, nothing was written outside the
  workers' own directories, the secret is in no verdict, and no fixture process is alive a
  second after the command returned;
- unjailed (`KZ_SANDBOX=none`, marked slow), each fixture really does what it says: a live
  exploit, not a strawman. The store is forged, and `report` refuses it: the tag catches an
  edit made without the key.

On the GPU machine, `KZ_ADV_DEVICE=cuda` judges them on cuda. Where this machine cannot make a
jail the jailed test is skipped, unless KZ_REQUIRE_SANDBOX=1 (CI) makes that a failure.
"""
from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.adversarial.fixtures import EXPLOITS, TASKS_DIR

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = [f for f in EXPLOITS if f.threat == 11]
MARK = "KZ_ADVERSARIAL_TARGET"
PROCESS_NAMES = ("kz-forger-11", "kz-detached-11")
DEVICE = "cuda" if os.environ.get("KZ_ADV_DEVICE") == "cuda" else "cpu"
STORE_FILES = {"kernelzero.db", "kernelzero.db-wal", "kernelzero.db-shm"}


def _jail_available() -> bool:
    from kernelzero.eval.sandbox.jail import isolation_for
    return isolation_for("auto", DEVICE).jailed


def _snapshot(*folders: Path) -> dict[str, bytes]:
    out = {}
    for folder in folders:
        for p in folder.rglob("*"):
            if p.is_file() and p.name not in STORE_FILES:
                out[str(p)] = p.read_bytes()
    return out


def _alive(names=PROCESS_NAMES) -> list[int]:
    """Pids of live processes (zombies are dead) whose name is one of `names`."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        name, state = stat[stat.index("(") + 1:stat.rindex(")")], stat.rsplit(")", 1)[1].split()[0]
        if name in names and state != "Z":
            pids.append(int(entry))
    return pids


def _kill_leftovers() -> None:
    """The unjailed run's detached processes, and what they wrote in shared folders."""
    for pid in _alive():
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    for p in [*Path("/tmp").glob("KZ_ESCAPED_11*"), *Path("/dev/shm").glob("KZ_HEARTBEAT_11*")]:
        p.unlink(missing_ok=True)


class Scene:
    """A home and a working tree as a user has them, and one `kernelzero eval` run over them."""

    def __init__(self, base: Path, mode: str):
        self.home, self.tree = base / "home", base / "tree"
        self.secret = "kz-secret-" + secrets.token_hex(8)
        for folder in (self.home, self.tree):
            folder.mkdir(parents=True)
            (folder / MARK).write_text("the threat-11 fixtures may attack this folder\n")
        (self.home / "kz_home_secret.txt").write_text(self.secret)
        tasks, samples = self.tree / "tasks" / "level1", self.tree / "samples"
        tasks.mkdir(parents=True)
        samples.mkdir()
        shutil.copy(TASKS_DIR / "relu.py", tasks / "1_ReLU.py")
        for i, f in enumerate(FIXTURES):
            shutil.copy(f.path, samples / f"level_1_problem_1_sample_{i}_kernel.py")
        self.db = self.tree / "kernelzero.db"
        self.env = {k: v for k, v in os.environ.items()
                    if k not in ("KZ_VERDICT_KEY_FILE", "XDG_CONFIG_HOME")}
        self.env.update(HOME=str(self.home), KZ_SANDBOX=mode, PYTHONPATH=str(ROOT),
                        TRITON_INTERPRET="1" if DEVICE == "cpu" else "0")
        self.cache = self.tree / "verdicts.jsonl"
        self._write_cache()
        _kill_leftovers()
        self.before = _snapshot(self.home, self.tree)

    def _write_cache(self) -> None:
        """A training verdict cache with one honest failing verdict, tagged with the home's key."""
        code = ("from kernelzero.train.judging import VerdictCache\n"
                "from kernelzero.eval.verdict import Verdict\n"
                f"VerdictCache({str(self.cache)!r}).put_many([('t:c', {{'round': 0}}, "
                "Verdict(status='incorrect', reason='honest'))])\n")
        subprocess.run([sys.executable, "-c", code], env=self.env, check=True, cwd=self.tree)

    def judge(self) -> subprocess.CompletedProcess:
        cmd = [sys.executable, "-m", "kernelzero", "eval", "--tasks", "tasks", "--samples",
               "samples", "--db", "kernelzero.db", "--device", DEVICE, "--workers", "2", "--json"]
        r = subprocess.run(cmd, env=self.env, cwd=self.tree, capture_output=True, text=True,
                           timeout=900)
        self.done_at = time.monotonic()
        assert r.returncode == 0, r.stderr[-3000:]
        return r

    def report(self) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "kernelzero", "report", "--db",
                               "kernelzero.db", "--json", "--boot", "0", "--out", "report"],
                              env=self.env, cwd=self.tree, capture_output=True, text=True,
                              timeout=300)

    def verdicts(self) -> dict[str, dict]:
        """Each fixture's stored verdict, read with the home's key (kernelzero.store)."""
        code = ("import json\nfrom kernelzero.store import Store\n"
                f"s = Store({str(self.db)!r})\n"
                "out = {r['sample_id']: {**r, 'verdict': s.get(r['key']) and "
                "s.get(r['key']).to_dict()} for r in s.records()}\n"
                "print(json.dumps(out))\n")
        r = subprocess.run([sys.executable, "-c", code], env=self.env, cwd=self.tree,
                           capture_output=True, text=True, check=True)
        by_sample = {int(k): v for k, v in json.loads(r.stdout).items()}
        return {f.name: by_sample.get(i) for i, f in enumerate(FIXTURES)}


@pytest.fixture
def leftovers(tmp_path):
    yield
    _kill_leftovers()
    for mark in tmp_path.rglob(MARK):  # an old scene is no target for a later one's fixtures
        mark.unlink(missing_ok=True)


@pytest.mark.parametrize("own_uid", ["", "0"], ids=["default", "judges_uid"])
def test_threat_11_is_contained(tmp_path, leftovers, own_uid):
    """`judges_uid`: workers keep the judge's uid inside PID namespaces of their own, as on cuda
    (where the judge could not map another uid's CUDA IPC outputs) and for an ordinary user."""
    if not _jail_available():
        if os.environ.get("KZ_REQUIRE_SANDBOX") == "1":
            pytest.fail("KZ_REQUIRE_SANDBOX=1 but this machine cannot make a jail (bubblewrap)")
        pytest.skip("this machine cannot make a jail (install bubblewrap)")
    scene = Scene(tmp_path, "auto")
    scene.env["KZ_SANDBOX_OWN_UID"] = own_uid
    out = scene.judge()
    time.sleep(max(0.0, scene.done_at + 1.0 - time.monotonic()))
    alive = _alive()  # one second after the verdicts, nothing the candidates started lives on
    assert not alive, f"fixture processes outlived their verdicts: {alive}"
    verdicts = scene.verdicts()
    for f in FIXTURES:
        v = verdicts[f.name]
        assert v is not None and v["integrity"] == "ok", f"{f.name}: {v}"
        assert v["status"] in f.expect, f"{f.name}: {v['status']}: {v['verdict']['reason']}"
        box = v["verdict"]["env"]["sandbox"]
        assert box["isolation"] == "bwrap"
        if own_uid == "0":
            assert box["pid_namespace"] and not box.get("own_uid"), box
        assert scene.secret not in json.dumps(v["verdict"]), f"{f.name} read the home's secret"
    assert scene.secret not in out.stdout + out.stderr
    time.sleep(1.0)  # a forger would have rewritten the store by now
    before, after = scene.before, _snapshot(scene.home, scene.tree)
    changed = sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))
    assert changed == [], f"files outside the workers' directories changed: {changed}"
    assert not list(Path("/tmp").glob("KZ_ESCAPED_11*"))
    assert not list(Path("/dev/shm").glob("KZ_HEARTBEAT_11*"))
    rep = scene.report()
    assert rep.returncode == 0, rep.stderr
    doc = json.loads(rep.stdout)
    assert doc["integrity"]["verified"] == len(FIXTURES) and doc["n_correct"] == 0


@pytest.mark.slow
def test_threat_11_fixtures_are_live_exploits_without_a_jail(tmp_path, leftovers):
    """The same run unjailed: each fixture does what its header says. The store is forged after
    the judge wrote it, and `report` refuses it (the forger did not have the key's tag)."""
    scene = Scene(tmp_path, "none")
    scene.judge()
    time.sleep(max(0.0, scene.done_at + 1.0 - time.monotonic()))
    assert set(PROCESS_NAMES) <= {_name(p) for p in _alive()}, "no detached process outlived it"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        statuses = [v and v["status"] for v in scene.verdicts().values()]
        if all(s == "correct" for s in statuses):
            break
        time.sleep(0.2)
    verdicts = scene.verdicts()
    assert all(v["status"] == "correct" and v["integrity"] == "tampered"
               for v in verdicts.values()), verdicts
    rep = scene.report()
    # --json: the usage error is one JSON object on stdout (kernelzero.cli)
    err = json.loads(rep.stdout)
    assert rep.returncode == 2 and err["kind"] == "usage", rep.stdout + rep.stderr
    assert "edited after the judge wrote them" in err["error"], err
    assert '"status": "correct"' in scene.cache.read_text()
    assert scene.secret in _log_tails(scene), "the home's secret never reached a verdict"
    assert (scene.home / "KZ_ESCAPED_11.txt").exists() and (scene.tree / "KZ_ESCAPED_11.txt").exists()
    from kernelzero.integrity import VerdictKey
    from kernelzero.train.judging import VerdictCache
    key_file = scene.home / ".config" / "kernelzero" / "verdict.key"
    forged = VerdictCache(scene.cache, key=VerdictKey(key_file.read_bytes()))
    assert forged.refused == {"tampered": 1} and len(forged) == 0


def _name(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/comm").read().strip()
    except OSError:
        return ""


def _log_tails(scene: Scene) -> str:
    """Every stored verdict's log tail, read without checking tags (the forger rewrote them)."""
    import sqlite3
    con = sqlite3.connect(scene.db)
    try:
        return "\n".join(json.loads(v).get("log_tail") or "" for (v,) in
                         con.execute("SELECT verdict_json FROM verdicts"))
    finally:
        con.close()
