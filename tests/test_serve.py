"""The reward service on a real uvicorn server on 127.0.0.1 (random free port, in a thread).

Part one serves a small in-test pool (`GatedPool`: same `judge_many` as the Evaluator, verdicts
from the candidate text, optionally held at a gate) to pin down the HTTP rules: order of results,
concurrent clients, back-pressure (429), malformed bodies (400/422), size limits (413), auth
(401/403), a failing pool (503), the client's retries. Part two serves the real Evaluator on CPU
(Triton interpreter): correct and wrong kernels, and a candidate that hangs.
"""
from __future__ import annotations

import contextlib
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn

from kernelzero.eval.verdict import Verdict
from kernelzero.serve.app import ServeConfig, create_app
from kernelzero.serve.client import RewardClient, RewardServiceError
from kernelzero.tasks import Candidate, Task

EXAMPLES = Path(__file__).resolve().parents[1] / "kernelzero" / "examples"


class GatedPool:
    """A judge with the Evaluator's batch API: 'ok' in the candidate -> correct, else incorrect.

    `gate` (an Event) holds every batch until set; 'boom' in a candidate makes the pool raise.
    """

    kind = "test"

    def __init__(self, delay_s: float = 0.0):
        self.gate = threading.Event()
        self.gate.set()
        self.delay_s = delay_s
        self.batches: list[int] = []
        self.lock = threading.Lock()

    def judge_many(self, pairs, on_verdict=None):
        with self.lock:
            self.batches.append(len(pairs))
        self.gate.wait(30)
        out = []
        for i, (task, cand) in enumerate(pairs):
            if "boom" in cand.source:
                raise RuntimeError("pool exploded")
            time.sleep(self.delay_s)
            v = Verdict(status="correct" if "ok" in cand.source else "incorrect",
                        reason=f"judged {cand.name}", task_hash=task.hash,
                        candidate_hash=cand.hash, backend=cand.backend,
                        max_abs_err=float("inf") if "overflow" in cand.source else 0.5)
            out.append(v)
            if on_verdict:
                on_verdict(i, v)
        return out


@contextlib.contextmanager
def running(app):
    """Serve `app` on 127.0.0.1 at a free port in a thread; yields the base URL."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.time() + 20
    while not server.started:
        assert time.time() < deadline, "uvicorn did not start"
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def item(candidate: str = "ok", **kw) -> dict:
    return {"reference": "class Model: pass", "candidate": candidate, **kw}


@pytest.fixture
def pool():
    return GatedPool()


@pytest.fixture
def url(pool):
    with running(create_app(pool, ServeConfig(max_queue=8, max_batch=6, max_body_bytes=4096,
                                              dispatchers=2))) as u:
        yield u


def test_batch_verdicts_come_back_in_order(url):
    body = [item("ok", name="a"), item("bad", name="b"), item("ok", backend="triton", name="c")]
    r = httpx.post(f"{url}/v1/judge", json=body, timeout=10)
    assert r.status_code == 200, r.text
    got = r.json()
    assert [v["status"] for v in got] == ["correct", "incorrect", "correct"]
    assert [v["correct"] for v in got] == [True, False, True]
    assert [v["reason"] for v in got] == ["judged a", "judged b", "judged c"]
    assert got[2]["backend"] == "triton"
    assert httpx.post(f"{url}/v1/judge", json=[], timeout=10).json() == []


def test_non_finite_numbers_become_null_in_strict_json(url):
    r = httpx.post(f"{url}/v1/judge", json=[item("overflow"), item("ok")], timeout=10)
    assert r.status_code == 200
    assert "Infinity" not in r.text and "NaN" not in r.text
    assert [v["max_abs_err"] for v in r.json()] == [None, 0.5]


def test_health_and_openapi(url):
    h = httpx.get(f"{url}/health", timeout=5).json()
    assert h["status"] == "ok" and h["pool"] == "test"
    assert h["queue_depth"] == 0 and h["in_flight"] == 0 and h["max_queue"] == 8
    assert len(h["dispatchers"]) == 2 and h["auth"] is False
    schema = httpx.get(f"{url}/openapi.json", timeout=5).json()
    assert "/v1/judge" in schema["paths"] and "/health" in schema["paths"]
    assert set(schema["components"]["schemas"]["JudgeItem"]["required"]) == {"reference",
                                                                           "candidate"}


def test_concurrent_clients_each_get_their_own_verdicts():
    pool = GatedPool(delay_s=0.01)
    results: dict[int, httpx.Response] = {}

    def client(u: str, k: int):
        body = [item("ok" if (k + j) % 2 else "bad", name=f"c{k}-{j}") for j in range(3)]
        results[k] = httpx.post(f"{u}/v1/judge", json=body, timeout=20)

    with running(create_app(pool, ServeConfig(max_queue=64, dispatchers=2, max_dispatch=8))) as u:
        threads = [threading.Thread(target=client, args=(u, k)) for k in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert sorted(results) == list(range(8))
    for k, r in results.items():
        assert r.status_code == 200, r.text
        verdicts = r.json()
        assert [v["reason"] for v in verdicts] == [f"judged c{k}-{j}" for j in range(3)]
        assert [v["correct"] for v in verdicts] == [bool((k + j) % 2) for j in range(3)]
    # requests that arrived together were merged into bigger pool batches
    assert sum(pool.batches) == 24 and len(pool.batches) < 8


def test_full_queue_gets_429_and_health_stays_responsive(url, pool):
    pool.gate.clear()  # hold the pool: what is accepted stays in the building
    first = {}
    t = threading.Thread(target=lambda: first.update(
        r=httpx.post(f"{url}/v1/judge", json=[item()] * 6, timeout=30)))
    t.start()
    deadline = time.time() + 10
    while httpx.get(f"{url}/health", timeout=2).json()["in_flight"] + \
            httpx.get(f"{url}/health", timeout=2).json()["queue_depth"] < 6:
        assert time.time() < deadline
        time.sleep(0.05)
    r = httpx.post(f"{url}/v1/judge", json=[item()] * 3, timeout=5)  # 6 + 3 > 8
    assert r.status_code == 429 and "full" in r.json()["detail"]
    assert int(r.headers["Retry-After"]) >= 1
    t0 = time.time()
    h = httpx.get(f"{url}/health", timeout=2).json()
    assert time.time() - t0 < 1.0 and h["queue_depth"] + h["in_flight"] == 6
    assert any(d["busy"] for d in h["dispatchers"])
    pool.gate.set()
    t.join(20)
    assert first["r"].status_code == 200 and len(first["r"].json()) == 6


@pytest.mark.parametrize("body,status,words", [
    (b"{not json", 400, "not valid JSON"),
    (b'{"reference": "x", "candidate": "y"}', 422, "JSON array"),
    (b'[{"reference": "x"}]', 422, "candidate"),
    (b'[{"reference": "x", "candidate": 3}]', 422, "candidate"),
    (b'[{"reference": "x", "candidate": "y", "backend": "cobol"}]', 422, "backend"),
    (b'[{"reference": "x", "candidate": "y", "surprise": 1}]', 422, "surprise"),
    (b"", 422, ""),
])
def test_malformed_bodies_get_4xx_with_a_message(url, body, status, words):
    r = httpx.post(f"{url}/v1/judge", content=body, timeout=5,
                   headers={"Content-Type": "application/json"})
    assert r.status_code == status, r.text
    assert words in r.json()["detail"]


def test_size_limits_get_413(url):
    r = httpx.post(f"{url}/v1/judge", json=[item("ok" * 3000)], timeout=5)  # > 4096 bytes
    assert r.status_code == 413 and "4096" in r.json()["detail"]

    def chunks():  # no Content-Length: the limit holds while streaming too
        for _ in range(10):
            yield b" " * 1000

    r = httpx.post(f"{url}/v1/judge", content=chunks(), timeout=5)
    assert r.status_code == 413
    r = httpx.post(f"{url}/v1/judge", json=[item()] * 7, timeout=5)  # max_batch is 6
    assert r.status_code == 413 and "at most 6" in r.json()["detail"]


def test_bearer_token(pool):
    secret = "s3cret-token-value"
    with running(create_app(pool, ServeConfig(token=secret))) as u:
        r = httpx.post(f"{u}/v1/judge", json=[item()], timeout=5)
        assert r.status_code == 401 and r.headers["WWW-Authenticate"] == "Bearer"
        r = httpx.post(f"{u}/v1/judge", json=[item()], timeout=5,
                       headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 403 and secret not in r.text
        # auth is checked before the body is even read: garbage with a bad token is still 403
        r = httpx.post(f"{u}/v1/judge", content=b"{", timeout=5,
                       headers={"Authorization": "Bearer wrong"})
        assert r.status_code == 403
        r = httpx.post(f"{u}/v1/judge", json=[item()], timeout=5,
                       headers={"Authorization": f"Bearer {secret}"})
        assert r.status_code == 200 and r.json()[0]["correct"] is True
        assert httpx.get(f"{u}/health", timeout=5).json()["auth"] is True
        with RewardClient(u, token=secret) as c:
            assert c.judge(Task.from_source("x"), Candidate("ok")).correct
        with RewardClient(u, token="wrong", max_retries=3) as c:
            with pytest.raises(RewardServiceError) as e:
                c.judge(Task.from_source("x"), Candidate("ok"))
            assert e.value.status == 403 and c.retries == 0  # a 403 is not retried
        assert secret not in repr(ServeConfig(token=secret))


def test_pool_failure_is_503_and_the_server_keeps_serving(url):
    r = httpx.post(f"{url}/v1/judge", json=[item("boom")], timeout=10)
    assert r.status_code == 503 and "pool exploded" in r.json()["detail"]
    r = httpx.post(f"{url}/v1/judge", json=[item("ok")], timeout=10)
    assert r.status_code == 200
    assert httpx.get(f"{url}/health", timeout=5).json()["pool_failures"] == 1


def test_client_splits_batches_and_retries_through_429(url, pool):
    pairs = [(Task.from_source("ref"), Candidate("ok" if i % 3 else "bad", name=f"n{i}"))
             for i in range(20)]
    seen = []
    # 20 candidates in chunks of 4, 4 at a time, against a queue bound of 8: some chunks must
    # be refused with 429 and retried; every verdict still arrives once, in order.
    pool.delay_s = 0.02
    with RewardClient(url, batch_size=4, concurrency=4, backoff_s=0.05, max_backoff_s=0.3,
                      max_retries=50) as c:
        vs = c.judge_many(pairs, on_verdict=lambda i, v: seen.append(i))
        assert c.retries > 0
    assert [v.reason for v in vs] == [f"judged n{i}" for i in range(20)]
    assert [v.correct for v in vs] == [bool(i % 3) for i in range(20)]
    assert sorted(seen) == list(range(20))


def test_client_gives_up_on_a_dead_server_with_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, never listening: connection refused
        with RewardClient(f"http://127.0.0.1:{port}", max_retries=2, backoff_s=0.01) as c:
            with pytest.raises(RewardServiceError, match="3 attempts"):
                c.judge(Task.from_source("x"), Candidate("ok"))
            assert c.retries == 2


def test_verl_compute_score_calls_the_service(url, monkeypatch):
    from kernelzero.train import verl

    monkeypatch.setenv(verl.URL_ENV, url)
    monkeypatch.setattr(verl, "_client", None)
    good = "Here it is:\n```python\nclass ModelNew:\n    ok = 1\n```"
    bad = "```python\nclass ModelNew:\n    pass\n```"
    out = verl.compute_score("kernelbench", good, "class Model: pass")
    assert out["score"] == 1.0 and out["correct"] == 1.0
    outs = verl.compute_score_batch(data_sources=["a"] * 3, solution_strs=[good, bad, "no code"],
                                    ground_truths=["class Model: pass"] * 3,
                                    extra_infos=[None, {"backend": "triton"}, None])
    assert [o["score"] for o in outs] == [1.0, 0.0, 0.0]
    assert [o["format_ok"] for o in outs] == [1.0, 1.0, 0.0]


# ---- the real evaluator behind the service ------------------------------------------------------
HANG = '''
import time
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
        while True:  # never returns
            time.sleep(0.05)
'''


def test_real_evaluator_hanging_candidate_times_out_and_server_stays_healthy():
    from kernelzero.eval import EvalConfig, Evaluator

    relu = (EXAMPLES / "tasks" / "level1" / "1_ReLU.py").read_text()
    ok = (EXAMPLES / "candidates" / "level_1_problem_1_sample_0_kernel.py").read_text()
    wrong = (EXAMPLES / "candidates" / "level_1_problem_1_sample_1_kernel.py").read_text()
    cfg = EvalConfig(device="cpu", run_timeout_s=8, max_workers=2, correctness_trials=2,
                     hardening_trials=False)
    with Evaluator(cfg) as ev, running(create_app(ev, ServeConfig(), pool_kind="local")) as u:
        answer = {}
        t = threading.Thread(target=lambda: answer.update(r=httpx.post(
            f"{u}/v1/judge", timeout=120, json=[{"reference": relu, "candidate": ok},
                                                {"reference": relu, "candidate": HANG}])))
        t.start()
        slowest_health, busy_seen = 0.0, False
        while t.is_alive():
            t0 = time.time()
            h = httpx.get(f"{u}/health", timeout=5).json()
            slowest_health = max(slowest_health, time.time() - t0)
            # the hanging candidate is judged for 8 s; the good one may be done before the
            # first poll on a loaded machine (one candidate per dispatch)
            busy_seen |= h["in_flight"] >= 1
            time.sleep(0.2)
        t.join()
        assert answer["r"].status_code == 200, answer["r"].text
        got = answer["r"].json()
        assert [v["status"] for v in got] == ["correct", "timeout"], [v["reason"] for v in got]
        assert "8 s" in got[1]["reason"]
        # judging never blocked the event loop: a blocked loop answers after the 8 s hang; a
        # loaded 2-core machine has been seen to take over 1 s for an unblocked one
        assert slowest_health < 4.0, f"health took {slowest_health:.1f} s while judging"
        assert busy_seen, "health never saw the batch in flight"
        h = httpx.get(f"{u}/health", timeout=5).json()
        assert h["status"] == "ok" and h["pool"] == "local" and h["in_flight"] == 0
        assert h["workers"] == {"aborted": False, "device": "cpu", "max_workers": 2}
        r = httpx.post(f"{u}/v1/judge", json=[{"reference": relu, "candidate": wrong}], timeout=60)
        assert r.json()[0]["status"] == "incorrect"


# ---- the command ---------------------------------------------------------------------------
def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_serve_command_runs_the_service_with_a_token_from_the_environment(tmp_path):
    import os
    import signal
    import subprocess
    import sys

    port = free_port()
    env = {**os.environ, "KZ_TEST_TOKEN": "tok-123"}
    proc = subprocess.Popen([sys.executable, "-m", "kernelzero", "serve", "--port", str(port),
                             "--token-env", "KZ_TEST_TOKEN", "--workers", "1", "--max-batch", "2",
                             "--log-level", "warning"], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.time() + 60
        while True:
            try:
                h = httpx.get(f"{url}/health", timeout=2).json()
                break
            except httpx.TransportError:
                assert proc.poll() is None and time.time() < deadline, proc.stdout.read()
                time.sleep(0.2)
        assert h["pool"] == "local" and h["auth"] is True and h["limits"]["max_batch"] == 2
        assert httpx.post(f"{url}/v1/judge", json=[item()], timeout=5).status_code == 401
        r = httpx.post(f"{url}/v1/judge", json=[item("bad")] * 3, timeout=5,
                       headers={"Authorization": "Bearer tok-123"})
        assert r.status_code == 413
        r = httpx.post(f"{url}/v1/judge", timeout=60, headers={"Authorization": "Bearer tok-123"},
                       json=[{"reference": "class Model: pass", "candidate": ""}])
        assert r.status_code == 200 and r.json()[0]["status"] == "format_error"
    finally:
        proc.send_signal(signal.SIGINT)
        out, _ = proc.communicate(timeout=30)
    assert proc.returncode == 0
    assert "tok-123" not in out and "bearer token from $KZ_TEST_TOKEN" in out
    assert "Traceback" not in out, out


def test_serve_command_refuses_a_public_address_without_a_token(monkeypatch, capsys):
    from kernelzero.cli import main

    monkeypatch.delenv("KERNELZERO_SERVE_TOKEN", raising=False)
    assert main(["serve", "--host", "0.0.0.0", "--port", str(free_port())]) == 2
    assert "KERNELZERO_SERVE_TOKEN" in capsys.readouterr().err
