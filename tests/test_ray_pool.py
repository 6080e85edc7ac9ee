"""RayPool on a real local Ray cluster (CPU only; GPUs declared as Ray resources).

- the real Evaluator inside Ray actors judges the built-in examples through the Triton interpreter;
- GPU placement: with declared "GPU"s (Ray assigns ids and CUDA_VISIBLE_DEVICES) there is one
  judge per GPU and at most `runs_per_gpu` candidates on a GPU at once (and that many really run
  together); the same with a custom "kz_gpu" resource; a cluster without the resource is refused;
- task affinity: with two judges, all candidates of a task go to one judge (one reference each);
- a judging actor SIGKILLed mid-batch: the candidate is re-judged, delivered and stored once;
- a candidate that kills its worker every time ends as `runtime_error` / `worker_lost`;
- an evaluator bug raises RayPoolError after the rest of the batch is delivered;
- the batch hint: each actor's spare pool expects its share of the batch's takes while it is
  judged (batches from two threads: a larger share), then None once the last batch ends; a hint
  that raises, or kills its actor, does not break the batch;
- closing the pool ends a batch still being judged in another thread (RayPoolError, no hang);
- (slow) a whole node removed mid-batch from a two-node cluster: its work finishes on the other.
"""
from __future__ import annotations

import functools
import os
import signal
import sys
import threading
import time
from pathlib import Path

import pytest
import ray
from ray import cloudpickle  # Ray's own copy: the one that pickles task arguments

from kernelzero.eval import EvalConfig, Verdict
from kernelzero.eval.pools.ray_config import RayPoolConfig
from kernelzero.eval.pools.ray_pool import RayPool, RayPoolError
from kernelzero.store import Store, verdict_key
from kernelzero.tasks import Candidate, Task, find_samples, load_tasks

# The helpers below run inside Ray workers, which cannot import this test module by name.
cloudpickle.register_pickle_by_value(sys.modules[__name__])

EXAMPLES = Path(__file__).resolve().parents[1] / "kernelzero" / "examples"
CPU = EvalConfig(device="cpu", max_workers=1, correctness_trials=2, hardening_trials=False)


def example_pairs() -> list[tuple[Task, Candidate]]:
    tasks = {(t.level, t.problem_id): t for t in load_tasks(EXAMPLES / "tasks")}
    return [(tasks[(lv, pid)], Candidate.from_file(path))
            for lv, pid, _, path in find_samples(EXAMPLES / "candidates")]


def pick(pairs, *names):
    by_name = {c.name: (t, c) for t, c in pairs}
    return [by_name[n] for n in names]


RELU_OK, RELU_WRONG, RELU_SYNTAX, RELU_CUDA = (f"level_1_problem_1_sample_{s}_kernel"
                                               for s in range(4))


@pytest.fixture(scope="module")
def local_ray():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=4, num_gpus=2, resources={"kz_gpu": 2}, include_dashboard=False,
             log_to_driver=False)
    yield
    ray.shutdown()


# ---- judges used inside Ray workers (picklable by value) ----------------------------------------
class SleepyJudge:
    """'ok' -> correct after `delay_s`; 'die' -> the actor process exits; 'bug' -> raises."""

    def __init__(self, cfg, delay_s: float = 0.0):
        self.delay_s = delay_s

    def judge(self, task, cand):
        if "die" in cand.source:
            os._exit(1)
        if "bug" in cand.source:
            raise ValueError("evaluator bug")
        time.sleep(self.delay_s)
        return Verdict(status="correct" if "ok" in cand.source else "incorrect",
                       reason=f"gpus={os.environ.get('CUDA_VISIBLE_DEVICES')}",
                       task_hash=task.hash, candidate_hash=cand.hash)


def sleepy(delay_s: float, cfg):
    return SleepyJudge(cfg, delay_s)


class MarkingEvaluator:
    """The real Evaluator, announcing `<pid>` in `mark_dir/<candidate name>.<n>` before judging."""

    def __init__(self, cfg, mark_dir: str):
        from kernelzero.eval import Evaluator
        self.ev, self.mark_dir = Evaluator(cfg), Path(mark_dir)

    def judge(self, task, cand):
        n = len(list(self.mark_dir.glob(f"{cand.name}.*")))
        (self.mark_dir / f"{cand.name}.{n}").write_text(str(os.getpid()))
        return self.ev.judge(task, cand)


def marking(mark_dir: str, cfg):
    return MarkingEvaluator(cfg, mark_dir)


def max_overlap(intervals) -> int:
    events = sorted([(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals])
    best = cur = 0
    for _, d in events:
        cur += d
        best = max(best, cur)
    return best


# ---- tests ---------------------------------------------------------------------------------------
def test_real_evaluator_in_ray_actors(local_ray):
    pairs = pick(example_pairs(), RELU_OK, RELU_WRONG, RELU_SYNTAX, RELU_CUDA)
    seen = []
    with RayPool(CPU) as pool:
        verdicts = pool.judge_many(pairs, on_verdict=lambda i, v: seen.append(i))
        health = pool.health()
    assert [v.status for v in verdicts] == ["correct", "incorrect", "compile_error", "rejected"
                                            ], [v.reason for v in verdicts]
    assert sorted(seen) == list(range(4))
    assert [v.candidate_hash for v in verdicts] == [c.hash for _, c in pairs]
    assert health["judged"] == 4 and health["in_flight"] == 0 and health["nodes_alive"] == 1
    assert health["claims_gpus"] is False  # CPU judging claims no GPU
    assert len(health["actors"]) == 1  # one per node on CPU
    assert ray.is_initialized()  # the pool joined the test's cluster and leaves it running


def test_declared_gpus_one_judge_per_gpu_one_candidate_at_a_time(local_ray):
    pairs = [(Task.from_source("ref"), Candidate(f"ok {i}")) for i in range(6)]
    cfg = RayPoolConfig(use_gpus=True, runs_per_gpu=1, cpus_per_actor=0)
    with RayPool(CPU, cfg, evaluator_factory=functools.partial(sleepy, 0.6)) as pool:
        verdicts = pool.judge_many(pairs)
        placed = list(pool.placements)
    assert all(v.correct for v in verdicts)
    assert all(p["resources"].get("GPU") == 1.0 and len(p["gpu_ids"]) == 1 for p in placed)
    # Ray set CUDA_VISIBLE_DEVICES to the GPU it assigned; the judge saw exactly that one
    by_hash = {p["candidate_hash"]: p for p in placed}
    assert all(v.reason == f"gpus={by_hash[c.hash]['gpu_ids'][0]}"
               for v, (_, c) in zip(verdicts, pairs))
    assert {p["gpu_ids"][0] for p in placed} == {"0", "1"}  # one judge per declared GPU
    assert max_overlap([(p["started"], p["ended"]) for p in placed]) <= 2
    for gpu in ("0", "1"):  # a GPU never held two run tasks at once
        assert max_overlap([(p["started"], p["ended"]) for p in placed
                            if p["gpu_ids"] == [gpu]]) <= 1


class RendezvousJudge:
    """Announces itself in `room`, then waits (up to 30 s) until `quorum` judges are inside at
    once: proof that Ray let that many run together, however slowly workers start."""

    def __init__(self, cfg, room: str, quorum: int):
        self.room, self.quorum = Path(room), quorum

    def judge(self, task, cand):
        import uuid

        (self.room / uuid.uuid4().hex).touch()
        deadline = time.time() + 30
        while len(list(self.room.iterdir())) < self.quorum and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.3)
        return Verdict(status="correct", reason="met", task_hash=task.hash,
                       candidate_hash=cand.hash)


def rendezvous(room: str, quorum: int, cfg):
    return RendezvousJudge(cfg, room, quorum)


def test_declared_gpus_packed_runs_per_gpu(local_ray, tmp_path):
    pairs = [(Task.from_source("ref"), Candidate(f"ok {i}")) for i in range(8)]
    cfg = RayPoolConfig(use_gpus=True, runs_per_gpu=2, cpus_per_actor=0)
    factory = functools.partial(rendezvous, str(tmp_path), 4)
    with RayPool(CPU, cfg, evaluator_factory=factory) as pool:
        assert all(v.correct for v in pool.judge_many(pairs))
        placed = list(pool.placements)
    assert all(p["resources"].get("GPU") == 1.0 for p in placed)
    first_wave = sorted(placed, key=lambda p: p["started"])[:4]
    assert max(p["started"] for p in first_wave) < min(p["ended"] for p in first_wave)
    assert max_overlap([(p["started"], p["ended"]) for p in placed]) <= 4  # never more
    for gpu in ("0", "1"):
        assert max_overlap([(p["started"], p["ended"]) for p in placed
                            if p["gpu_ids"] == [gpu]]) <= 2


def test_candidates_of_a_task_stay_on_one_judge(local_ray):
    """Task affinity: each judge computes a task's reference once, so with two judges and
    candidates of two tasks (interleaved), each task's candidates all go to one judge."""
    tasks = [Task.from_source(f"ref {k}") for k in range(2)]
    pairs = [(tasks[i % 2], Candidate(f"ok {i}")) for i in range(8)]
    cfg = RayPoolConfig(use_gpus=True, runs_per_gpu=2, cpus_per_actor=0)
    with RayPool(CPU, cfg, evaluator_factory=functools.partial(sleepy, 0.2)) as pool:
        pool.warm_up(60)  # both judges ready, so the first candidates see both
        assert all(v.correct for v in pool.judge_many(pairs))
        placed = list(pool.placements)
        health = pool.health()
    pids = {t.hash: {p["pid"] for p in placed if p["task_hash"] == t.hash} for t in tasks}
    assert all(len(p) == 1 for p in pids.values()), pids
    assert pids[tasks[0].hash] != pids[tasks[1].hash]  # spread, not both on the first judge
    assert sorted(a["tasks"] for a in health["actors"]) == [1, 1]


def test_custom_gpu_resource_and_missing_resource(local_ray):
    pairs = [(Task.from_source("ref"), Candidate(f"ok {i}")) for i in range(4)]
    cfg = RayPoolConfig(use_gpus=True, runs_per_gpu=1, gpu_resource="kz_gpu", cpus_per_actor=0)
    with RayPool(CPU, cfg, evaluator_factory=functools.partial(sleepy, 0.5)) as pool:
        assert all(v.correct for v in pool.judge_many(pairs))
        placed = list(pool.placements)
    assert all(p["resources"].get("kz_gpu") == 1.0 and "GPU" not in p["resources"]
               for p in placed)
    assert max_overlap([(p["started"], p["ended"]) for p in placed]) <= 2
    with pytest.raises(RuntimeError, match="offers 0 of resource 'h100'"):
        RayPool(CPU, RayPoolConfig(use_gpus=True, gpu_resource="h100"))
    with pytest.raises(ValueError, match="runs_per_gpu"):
        RayPoolConfig(runs_per_gpu=0)


def test_killed_worker_mid_batch_is_rejudged_and_stored_once(local_ray, tmp_path):
    pairs = pick(example_pairs(), RELU_OK, RELU_WRONG)
    marks = tmp_path / "marks"
    marks.mkdir()
    store = Store(tmp_path / "kz.db")
    delivered = []

    def on_verdict(i, v):
        delivered.append(i)
        task, cand = pairs[i]
        store.put(verdict_key(task.hash, cand.hash, v.device, "test"), v, run="ray",
                  task_key=task.key, sample_id=cand.sample_id)

    killed = {}

    def kill_first_attempt():  # SIGKILL the actor judging the correct ReLU, once
        deadline = time.time() + 60
        first = marks / f"{RELU_OK}.0"
        while not first.exists() and time.time() < deadline:
            time.sleep(0.05)
        time.sleep(0.5)  # mid-judgement: the sandboxed worker is up by now
        killed["pid"] = int(first.read_text())
        os.kill(killed["pid"], signal.SIGKILL)

    killer = threading.Thread(target=kill_first_attempt)
    killer.start()
    with RayPool(CPU, RayPoolConfig(max_retries=2),
                 evaluator_factory=functools.partial(marking, str(marks))) as pool:
        verdicts = pool.judge_many(pairs, on_verdict=on_verdict)
        placed = {p["candidate_hash"]: p for p in pool.placements}
    killer.join()
    assert [v.status for v in verdicts] == ["correct", "incorrect"]
    assert sorted(delivered) == [0, 1]  # each index delivered exactly once
    assert (marks / f"{RELU_OK}.1").exists()  # ... and index 0 really was judged twice
    assert placed[pairs[0][1].hash]["pid"] != killed["pid"]
    assert store.count(run="ray") == 2
    # a second delivery of the same verdict (what a re-run after node loss could produce) is
    # absorbed by the store's idempotent key
    task, cand = pairs[0]
    store.put(verdict_key(task.hash, cand.hash, verdicts[0].device, "test"), verdicts[0], run="ray",
              task_key=task.key)
    assert store.count(run="ray") == 2
    store.close()


def test_candidate_that_kills_every_worker_gets_worker_lost(local_ray):
    pairs = [(Task.from_source("ref"), Candidate(s)) for s in ("ok", "die", "ok too")]
    with RayPool(CPU, RayPoolConfig(max_retries=1),
                 evaluator_factory=functools.partial(sleepy, 0.0)) as pool:
        verdicts = pool.judge_many(pairs)
        assert pool.health()["worker_lost"] == 1
    assert [v.status for v in verdicts] == ["correct", "runtime_error", "correct"]
    assert verdicts[1].flags == ["worker_lost"] and "2 attempts" in verdicts[1].reason
    assert verdicts[1].candidate_hash == pairs[1][1].hash


def broken_factory(cfg):
    raise ImportError("No module named 'kernelzero_missing' (actor environment is broken)")


def test_actors_that_cannot_start_fail_the_batch_with_their_error(local_ray):
    """Every actor start raising (an import error on the nodes) must not retry forever."""
    pairs = [(Task.from_source("ref"), Candidate("ok"))]
    t0 = time.monotonic()
    with RayPool(CPU, RayPoolConfig(max_start_failures=2, rescan_s=0.2, start_timeout_s=600),
                 evaluator_factory=broken_factory) as pool:
        with pytest.raises(RayPoolError, match="no judging actor could start.*kernelzero_missing"):
            pool.judge_many(pairs)
    assert time.monotonic() - t0 < 120


def test_evaluator_bug_raises_after_delivering_the_rest(local_ray):
    pairs = [(Task.from_source("ref"), Candidate(s)) for s in ("ok", "bug", "nope")]
    seen = {}
    with RayPool(CPU, evaluator_factory=functools.partial(sleepy, 0.0)) as pool:
        with pytest.raises(RayPoolError, match="#1: ValueError: evaluator bug") as e:
            pool.judge_many(pairs, on_verdict=lambda i, v: seen.update({i: v.status}))
    assert seen == {0: "correct", 2: "incorrect"} and list(e.value.failures) == [1]


def test_closing_the_pool_ends_a_batch_still_being_judged(local_ray):
    """A judge_many in another thread gets RayPoolError for the candidates still on the actors
    when the pool is closed, instead of waiting forever."""
    pairs = [(Task.from_source("ref"), Candidate(f"ok {i}")) for i in range(2)]
    pool = RayPool(CPU, evaluator_factory=functools.partial(sleepy, 30.0))
    pool.warm_up(60)
    outcome = {}

    def batch():
        try:
            pool.judge_many(pairs)
        except RayPoolError as e:
            outcome["failures"] = e.failures

    t = threading.Thread(target=batch)
    t.start()
    time.sleep(2.0)  # both candidates are on the actor now
    pool.close()
    t.join(20)
    assert not t.is_alive()
    assert sorted(outcome["failures"]) == [0, 1]
    assert all("closed" in why for why in outcome["failures"].values())


class HintLog:
    """A spare pool's `expect` for HintedJudge: logs each hint to `log_dir/<pid>`, or with
    `mode` "raise" raises, or with "die" exits its actor (the first actor hinted only)."""

    def __init__(self, log_dir: str, mode: str):
        self.log_dir, self.mode, self.takes = Path(log_dir), mode, "unset"

    def write(self, line: str) -> None:
        with open(self.log_dir / str(os.getpid()), "a") as f:
            f.write(line + "\n")

    def expect(self, takes):
        if self.mode == "raise":
            raise OSError("the hint failed")
        if self.mode == "die":
            try:
                os.close(os.open(self.log_dir / "died", os.O_CREAT | os.O_EXCL))
                os._exit(1)
            except FileExistsError:
                pass
        self.takes = takes
        self.write(f"expect {takes}")


class HintedJudge(SleepyJudge):
    """A SleepyJudge ('slow' in the source: 1.5 s) with a HintLog as its spare pool; each
    judging logs `judged <the hint in force when it ended>`."""

    def __init__(self, cfg, log_dir: str, mode: str):
        super().__init__(cfg)
        self.spares = HintLog(log_dir, mode)

    def judge(self, task, cand):
        time.sleep(1.5 if "slow" in cand.source else 0.2)
        verdict = super().judge(task, cand)
        self.spares.write(f"judged {self.spares.takes}")
        return verdict


def hinted(log_dir: str, mode: str, cfg):
    return HintedJudge(cfg, log_dir, mode)


def hint_logs(log_dir: Path, settled=lambda logs: True) -> dict[str, list[str]]:
    """Each actor's log lines, once `settled(logs)` (hints are fire-and-forget; 10 s at most)."""
    deadline = time.monotonic() + 10
    while True:
        logs = {f.name: f.read_text().splitlines() for f in log_dir.iterdir() if f.name.isdigit()}
        if settled(logs) or time.monotonic() > deadline:
            return logs
        time.sleep(0.05)


def ended(logs) -> bool:
    return bool(logs) and all(lines[-1] == "expect None" for lines in logs.values())


TWO_GPUS = RayPoolConfig(use_gpus=True, runs_per_gpu=2, cpus_per_actor=0)


def test_actors_expect_their_share_of_the_batch_then_none(local_ray, tmp_path):
    tasks = [Task.from_source(f"ref {k}") for k in range(2)]
    pairs = [(tasks[i % 2], Candidate(f"ok {i}")) for i in range(8)]
    factory = functools.partial(hinted, str(tmp_path), "")
    with RayPool(CPU, TWO_GPUS, evaluator_factory=factory) as pool:
        pool.warm_up(60)
        assert all(v.correct for v in pool.judge_many(pairs))
        logs = hint_logs(tmp_path, ended)
    assert len(logs) == 2
    for lines in logs.values():  # (8 candidates + 2 tasks) / 2 actors, in force while judging
        assert lines[0] == "expect 5" and lines[-1] == "expect None", lines
        assert set(lines[1:-1]) == {"judged 5"}
    assert sum(len(lines) - 2 for lines in logs.values()) == 8


def test_batches_from_two_threads_share_the_hint_and_end_it_once(local_ray, tmp_path):
    """B runs while A's slow candidates are judged: each actor then expects A's and B's takes
    together, and gets None only when A, the last batch, ends."""
    tasks = [Task.from_source(f"ref {k}") for k in range(2)]
    slow = [(tasks[0], Candidate(f"ok slow {i}")) for i in range(2)]
    quick = [(tasks[1], Candidate(f"ok {i}")) for i in range(2)]
    factory = functools.partial(hinted, str(tmp_path), "")
    with RayPool(CPU, TWO_GPUS, evaluator_factory=factory) as pool:
        pool.warm_up(60)
        a = threading.Thread(target=lambda: pool.judge_many(slow))
        a.start()
        time.sleep(0.3)
        assert all(v.correct for v in pool.judge_many(quick))
        assert a.is_alive()  # A's candidates take 1.5 s
        during = hint_logs(tmp_path)
        a.join()
        logs = hint_logs(tmp_path, ended)
    assert not any("expect None" in lines for lines in during.values()), during
    for lines in logs.values():  # A: (2 + 1) / 2; then A's and B's: (3 + 3) / 2; None once
        assert [x for x in lines if x.startswith("expect")] == [
            "expect 2", "expect 3", "expect None"], lines


@pytest.mark.parametrize("mode", ["raise", "die"])
def test_a_hint_that_fails_or_kills_its_actor_does_not_break_the_batch(local_ray, tmp_path,
                                                                       mode):
    pairs = [(Task.from_source("ref"), Candidate(f"ok {i}")) for i in range(4)]
    factory = functools.partial(hinted, str(tmp_path), mode)
    with RayPool(CPU, TWO_GPUS, evaluator_factory=factory) as pool:
        pool.warm_up(60)
        verdicts = pool.judge_many(pairs)
        assert all(v.correct for v in pool.judge_many(pairs[:1]))  # the pool still judges
        health = pool.health()
    assert all(v.correct for v in verdicts)
    assert health["actors_lost"] == (mode == "die")
    assert pool._hints.unread == 0  # every failed hint was read: Ray logs the errors that nobody read


@pytest.mark.slow  # starts a two-node cluster (~15 s) on top of the judging
def test_node_removed_mid_batch_work_finishes_on_the_other_node(tmp_path):
    from ray.cluster_utils import Cluster

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "resources": {"kz_gpu": 1}, "include_dashboard": False})
    doomed = cluster.add_node(num_cpus=1, resources={"kz_gpu": 1})
    cluster.wait_for_nodes()
    marks = tmp_path / "marks"
    marks.mkdir()
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        pairs = [(Task.from_source("ref"), Candidate(f"ok {i}", name=f"c{i}")) for i in range(4)]
        cfg = RayPoolConfig(use_gpus=True, runs_per_gpu=1, gpu_resource="kz_gpu", max_retries=3)
        removed = {}

        def remove_doomed_node_while_it_judges():
            deadline = time.time() + 60
            while time.time() < deadline and not removed:
                for m in marks.glob("*"):
                    node, pid = m.read_text().split()
                    if node == doomed.node_id:
                        removed["pid"] = pid
                        cluster.remove_node(doomed, allow_graceful=False)
                        return
                time.sleep(0.05)

        remover = threading.Thread(target=remove_doomed_node_while_it_judges)
        remover.start()
        factory = functools.partial(node_marking, str(marks))
        with RayPool(CPU, cfg, evaluator_factory=factory) as pool:
            delivered = []
            verdicts = pool.judge_many(pairs, on_verdict=lambda i, v: delivered.append(i))
            placed = list(pool.placements)
        remover.join()
        assert removed, "no task ever ran on the second node"
        assert all(v.correct for v in verdicts) and sorted(delivered) == [0, 1, 2, 3]
        assert {p["node_id"] for p in placed} == {cluster.head_node.node_id}
    finally:
        ray.shutdown()
        cluster.shutdown()


class NodeMarkingJudge(SleepyJudge):
    def __init__(self, cfg, mark_dir: str):
        super().__init__(cfg, delay_s=2.0)
        self.mark_dir = Path(mark_dir)

    def judge(self, task, cand):
        node = ray.get_runtime_context().get_node_id()
        (self.mark_dir / f"{cand.name}.{os.getpid()}").write_text(f"{node} {os.getpid()}")
        return super().judge(task, cand)


def node_marking(mark_dir: str, cfg):
    return NodeMarkingJudge(cfg, mark_dir)
