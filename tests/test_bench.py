"""`kernelzero bench`: replay through the CPU evaluator, an interrupted run resumed, stored
verdicts reused, and the report's pass@k / fast_p / geomean checked against hand-computed values;
then the tiny `hf:` model end to end."""
from __future__ import annotations

import json

import pytest

from _coder_solutions import (EXAMPLES, PROSE, RELU_OK, RELU_WRONG, SOFTMAX_OK, SUM_OK, answer,
                              one_torch_thread, write_jsonl)
from kernelzero.cli import main
from kernelzero.coder.benchmark_run import FORMAT_ERROR_MARKER, sample_file_text
from kernelzero.eval import EvalConfig, Evaluator, Verdict
from kernelzero.store import Store, verdict_key
from kernelzero.tasks import load_tasks, source_hash

COMPLETIONS = {  # task key -> [sample 0, sample 1]
    "L1/1_ReLU": [answer(RELU_OK, 0), answer(RELU_WRONG, 1)],
    "L1/2_Softmax": [answer(SOFTMAX_OK, 2), PROSE],
    "L1/4_Sum_reduction": [answer(SUM_OK, 1), answer(SUM_OK, 0)],
}  # L1/3_Matmul: no completions in the record
# Verdicts judged elsewhere (on a GPU, say), already in the store: (eager, compile) speedups.
PRESTORED = {("L1/1_ReLU", 0): (2.0, 1.2), ("L1/2_Softmax", 0): (0.9, 0.5),
             ("L1/4_Sum_reduction", 0): (1.6, 0.8)}


class Recording:
    def __init__(self, inner, fail_on_call=None):
        self.inner, self.spec, self.calls, self.fail_on_call = inner, inner.spec, [], fail_on_call

    def generate(self, prompts, n, sampling):
        self.calls.append([(p[-1]["meta"]["task"], p[-1]["meta"]["sample"], n) for p in prompts])
        if self.fail_on_call == len(self.calls):
            raise KeyboardInterrupt
        return self.inner.generate(prompts, n, sampling)


@pytest.fixture
def backends(monkeypatch):
    import kernelzero.models
    made, fail = [], {"on": None}
    real = kernelzero.models.load_backend

    def load(spec, **kw):
        made.append(Recording(real(spec, **kw), fail["on"]))
        return made[-1]

    monkeypatch.setattr(kernelzero.models, "load_backend", load)
    return made, fail


@pytest.fixture
def judged(monkeypatch):
    """Counts candidates handed to the evaluator; `judged["forbid"] = True` makes it fail."""
    from kernelzero.eval.evaluator import Evaluator as Ev
    state = {"n": 0, "forbid": False}
    real = Ev.judge_many

    def judge_many(self, pairs, on_verdict=None):
        pairs = list(pairs)
        assert not state["forbid"], f"re-judged {len(pairs)} candidates"
        state["n"] += len(pairs)
        return real(self, pairs, on_verdict)

    monkeypatch.setattr(Ev, "judge_many", judge_many)
    return state


def _reasons() -> str:
    """Every stored verdict's status and reason (to explain a failed assertion)."""
    with Store("results.db") as store:
        return "\n".join(f"{r['task']} s{r['sample_id']}: {r['status']}: "
                         f"{store.get(r['key']).reason}" for r in store.records("replay-test"))


def _bench(record, *extra):
    return ["bench", "--tasks", str(EXAMPLES), "--levels", "1", "--model", f"replay:{record}",
            "-k", "2", "--device", "cpu", "--run", "replay-test", "--db", "results.db",
            "--batch-size", "1", "--boot", "200", *extra]


def test_bench_resumes_reuses_verdicts_and_reports_hand_computed_metrics(
        tmp_path, monkeypatch, capsys, backends, judged):
    from kernelzero.commands.bench_cmd import judging_env_key
    monkeypatch.chdir(tmp_path)
    record = write_jsonl(tmp_path / "record.jsonl", [
        {"task": key, "sample": s, "completion": text}
        for key, texts in COMPLETIONS.items() for s, text in enumerate(texts)])
    made, fail = backends
    tasks = {t.key: t for t in load_tasks(EXAMPLES, [1])}

    # verdicts judged elsewhere, under the keys bench computes for this environment
    with Evaluator(EvalConfig(device="cpu")) as ev:
        env = judging_env_key(ev)
    with Store("results.db") as store:
        for (key, s), (eager, comp) in PRESTORED.items():
            cand = source_hash(sample_file_text(COMPLETIONS[key][s]))
            store.put(verdict_key(tasks[key].hash, f"{cand}/sample{s}", "cpu", env),
                      Verdict("correct", "judged on a GPU", speedup=eager, speedup_compile=comp),
                      run="imported", task_key=key, sample_id=s)

    # 1. interrupted during sampling, after the first task's completions were written
    fail["on"] = 2
    assert main(_bench(record)) == 130
    samples = tmp_path / "runs" / "replay-test" / "samples"
    assert sorted(p.name for p in samples.iterdir()) == [
        "level_1_problem_1_sample_0_kernel.py", "level_1_problem_1_sample_1_kernel.py"]
    assert judged["n"] == 0

    # 2. resumed: ReLU is not sampled again; only the two samples not in the store are judged
    fail["on"] = None
    capsys.readouterr()
    assert main(_bench(record, "--json")) == 0
    doc = json.loads(capsys.readouterr().out)
    assert made[-1].calls == [[("L1/2_Softmax", 0, 2)], [("L1/3_Matmul", 0, 2)],
                              [("L1/4_Sum_reduction", 0, 2)]]
    assert judged["n"] == 2  # ReLU sample 1 (wrong) and Sum sample 1; the format error is not run
    assert doc["statuses"] == {"correct": 4, "format_error": 1, "incorrect": 1}, _reasons()
    assert doc["tasks_without_samples"] == ["L1/3_Matmul"] and doc["n_tasks"] == 3
    # hand-computed: c = (1, 1, 2) correct of n = 2 per task
    assert doc["pass_at_k"]["1"]["value"] == pytest.approx((0.5 + 0.5 + 1.0) / 3)
    assert doc["pass_at_k"]["2"]["value"] == pytest.approx(1.0)
    # eager speedups of correct samples: ReLU 2.0, Softmax 0.9, Sum 1.6 and one untimed Sum
    expect_eager = {"0": 0.5, "0.5": 0.5, "0.8": 0.5, "1": 1 / 3, "1.5": 1 / 3, "2": 0.0}
    expect_compile = {"0": 0.5, "0.5": 1 / 3, "0.8": 1 / 6, "1": 1 / 6, "1.5": 0.0, "2": 0.0}
    for p, value in expect_eager.items():
        assert doc["fast_p"]["eager"][p]["value"] == pytest.approx(value), p
    for p, value in expect_compile.items():
        assert doc["fast_p"]["compile"][p]["value"] == pytest.approx(value), p
    assert doc["geomean_speedup"]["eager"]["value"] == pytest.approx((2.0 * 0.9 * 1.6) ** (1 / 3))
    assert doc["geomean_speedup"]["compile"]["value"] == pytest.approx((1.2 * 0.5 * 0.8) ** (1 / 3))
    m = doc["pass_at_k"]["1"]
    assert m["lo"] <= m["value"] <= m["hi"]
    run_dir = tmp_path / "runs" / "replay-test"
    for name in ("report.md", "summary.json", "speedup_hist.png", "pass_at_k.png"):
        assert (run_dir / name).is_file(), name
    assert json.loads((run_dir / "summary.json").read_text())["pass_at_k"] == doc["pass_at_k"]
    softmax_1 = (samples / "level_1_problem_2_sample_1_kernel.py").read_text()
    assert softmax_1.startswith(FORMAT_ERROR_MARKER) and "# I am not sure" in softmax_1
    assert (samples / "level_1_problem_1_sample_0_kernel.py").read_text() == RELU_OK
    lines = [json.loads(x) for x in (run_dir / "completions.jsonl").read_text().splitlines()]
    assert len(lines) == 6 and {x["task"] for x in lines} == set(COMPLETIONS)
    with Store("results.db") as store:
        assert len(store.records("replay-test")) == 6

    # 3. run again: nothing is judged twice, the numbers are the same
    judged["forbid"] = True
    assert main(_bench(record, "--json")) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["pass_at_k"] == doc["pass_at_k"] and again["fast_p"] == doc["fast_p"]

    # the text table names the run; the run folder refuses another model
    assert main(_bench(record)) == 0
    assert "pass@k" in capsys.readouterr().out
    other = write_jsonl(tmp_path / "other.jsonl", [{"task": "L1/1_ReLU", "completion": "x"}])
    assert main(_bench(other)) == 2
    assert "started with other settings" in capsys.readouterr().err


one_thread = pytest.fixture(one_torch_thread)


def test_bench_with_the_tiny_hf_model(one_thread, tmp_path, monkeypatch, capsys, judged):
    from kernelzero.models.tiny import build_tiny_model
    monkeypatch.chdir(tmp_path)
    tiny = build_tiny_model(tmp_path / "tiny")
    rc = main(["bench", "--tasks", str(EXAMPLES), "--levels", "2", "--model", f"hf:{tiny}",
               "-k", "2", "--max-new-tokens", "16", "--no-example", "--device", "cpu",
               "--db", "r.db", "--boot", "0", "--json"])
    assert rc == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["run"] == "tiny_triton" and doc["model"] == f"hf:{tiny}"
    assert doc["n_tasks"] == 1 and doc["n_records"] == 2
    assert doc["statuses"] == {"format_error": 2}  # random weights write noise
    assert doc["pass_at_k"]["2"]["value"] == 0.0 and judged["n"] == 0
    files = sorted(p.name for p in (tmp_path / "runs" / "tiny_triton" / "samples").iterdir())
    assert files == ["level_2_problem_1_sample_0_kernel.py", "level_2_problem_1_sample_1_kernel.py"]


def test_bench_judges_through_the_ray_pool_and_verdicts_carry_over(tmp_path, monkeypatch, capsys,
                                                                    judged):
    """`--pool ray`: a private local Ray cluster judges; a local-pool run afterwards finds every
    verdict in the store (the same environment key whichever pool judged)."""
    pytest.importorskip("ray")
    from kernelzero.eval.pools.ray_pool import RayPool

    # No chdir here: Ray's workers import kernelzero from the driver's working directory when it
    # is not installed (a checkout), so the test runs from the repository root.
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    record = write_jsonl(tmp_path / "record.jsonl", [
        {"task": "L1/1_ReLU", "sample": 0, "completion": answer(RELU_OK, 0)},
        {"task": "L1/1_ReLU", "sample": 1, "completion": answer(RELU_WRONG, 1)}])
    batches = []
    real = RayPool.judge_many
    monkeypatch.setattr(RayPool, "judge_many",
                        lambda self, pairs, on_verdict=None: batches.append(len(pairs)) or
                        real(self, pairs, on_verdict))
    argv = ["bench", "--tasks", str(EXAMPLES), "--levels", "1", "--model", f"replay:{record}",
            "-k", "2", "--device", "cpu", "--run", "ray-test", "--runs-dir", str(tmp_path / "runs"),
            "--db", str(tmp_path / "results.db"), "--boot", "0", "--workers", "1", "--json"]
    assert main([*argv, "--pool", "ray"]) == 0, capsys.readouterr().err
    doc = json.loads(capsys.readouterr().out)
    assert batches == [2] and judged["n"] == 0  # the Ray actors judged, not this process
    assert doc["statuses"] == {"correct": 1, "incorrect": 1}
    judged["forbid"] = True
    assert main([*argv, "--pool", "local"]) == 0
    assert json.loads(capsys.readouterr().out)["statuses"] == doc["statuses"]


def test_bench_pool_foo_is_refused_by_the_parser(capsys):
    code = main(["bench", "--tasks", str(EXAMPLES), "--model", "replay:x", "--pool", "foo"])
    err = capsys.readouterr().err
    assert code == 2 and "invalid choice: 'foo'" in err and "Traceback" not in err


@pytest.mark.parametrize("argv,message", [
    (["bench", "--tasks", str(EXAMPLES), "--model", "replay:x", "--ray-address", "auto"],
     "--ray-address needs --pool ray"),
    (["bench", "--tasks", "nowhere", "--model", "replay:x"], "no task file or directory"),
    (["bench", "--tasks", str(EXAMPLES), "--levels", "one", "--model", "replay:x"], "--levels"),
    (["bench", "--tasks", str(EXAMPLES), "--levels", "7", "--model", "replay:x"], "no tasks"),
    (["bench", "--tasks", str(EXAMPLES), "--model", "what:ever", "--device", "cpu"],
     "unknown model backend"),
])
def test_bench_usage_errors(argv, message, capsys, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert main(argv) == 2
    assert message in capsys.readouterr().err


def test_sampling_fills_holes_with_contiguous_requests(tmp_path):
    from kernelzero.coder.benchmark_run import BenchRun
    from kernelzero.models import SamplingConfig

    class Numbered:
        spec = "numbered"

        def __init__(self):
            self.calls = []

        def generate(self, prompts, n, sampling):
            metas = [p[-1]["meta"] for p in prompts]
            self.calls.append([(m["task"], m["sample"], n) for m in metas])
            return [[f"{m['task']}#{m['sample'] + i}" for i in range(n)] for m in metas]

    tasks = load_tasks(EXAMPLES, [1])[:2]
    bench = BenchRun(tmp_path / "run", "r", tasks, k=5)
    for s in (0, 2, 3):
        bench.path(tasks[0], s).parent.mkdir(parents=True, exist_ok=True)
        bench.path(tasks[0], s).write_text("old")
    backend = Numbered()
    assert bench.sample(backend, None, SamplingConfig(), batch_size=8) == 2 + 5
    assert sorted(backend.calls) == sorted([[(tasks[0].key, 1, 1), (tasks[0].key, 4, 1)],
                                            [(tasks[1].key, 0, 5)]])
    for s in range(5):  # every file holds the completion asked for its own index
        text = bench.path(tasks[1], s).read_text()
        assert text.startswith(FORMAT_ERROR_MARKER) and f"{tasks[1].key}#{s}" in text
    assert "#4" in bench.path(tasks[0], 4).read_text()
    assert bench.path(tasks[0], 2).read_text() == "old" and bench.requests() == []
