"""`openai:` against a real OpenAI-style HTTP server on 127.0.0.1 (stdlib http.server in a thread).

The server's behaviour is picked by the last user message: normal, slow once (timeout then retry),
500 once (retry), always 500, malformed, 401."""
from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kernelzero.models import BackendError, SamplingConfig, load_backend

SECRET = "sk-test-secret-key-123"


class _State:
    def __init__(self):
        self.lock = threading.Lock()
        self.calls: dict[str, int] = {}
        self.bodies: list[dict] = []
        self.auth: list[str | None] = []
        self.in_flight = 0
        self.max_in_flight = 0


def _make_handler(state: _State):
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *a):  # keep pytest output clean
            pass

        def _send(self, code: int, payload: bytes):
            # No longer in flight once the reply goes out: the client may send its next request
            # before this handler's `finally` runs (a count of 4 with 3 allowed, seen in CI).
            with state.lock:
                state.in_flight -= 1
                self._counted = False
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            mode = body["messages"][-1]["content"]
            with state.lock:
                state.bodies.append(body)
                state.auth.append(self.headers.get("Authorization"))
                count = state.calls[mode] = state.calls.get(mode, 0) + 1
                state.in_flight += 1
                state.max_in_flight = max(state.max_in_flight, state.in_flight)
            self._counted = True
            try:
                if self.path != "/v1/chat/completions":
                    return self._send(404, b'{"error": "not found"}')
                if mode == "slow-once" and count == 1:
                    time.sleep(1.5)
                if mode == "concurrent":
                    time.sleep(0.2)
                if mode == "500-once" and count == 1:
                    return self._send(500, b'{"error": "internal"}')
                if mode == "always-500":
                    return self._send(503, b'{"error": "overloaded"}')
                if mode == "malformed":
                    return self._send(200, b'{"id": "x", "object": "chat.completion"}')
                if mode == "not-json":
                    return self._send(200, b"<html>proxy error</html>")
                if mode == "unauthorized":
                    return self._send(401, json.dumps(
                        {"error": f"bad key {SECRET}"}).encode())
                text = f"echo {mode} seed={body.get('seed')} n={body['n']}"
                return self._send(200, json.dumps({
                    "id": "c1", "object": "chat.completion", "model": body["model"],
                    "choices": [{"index": 0, "finish_reason": "stop",
                                 "message": {"role": "assistant", "content": text}}]}).encode())
            finally:
                if self._counted:  # (left without a reply)
                    with state.lock:
                        state.in_flight -= 1

    return Handler


@pytest.fixture
def server():
    state = _State()
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(state))
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{httpd.server_address[1]}/v1", state
    httpd.shutdown()
    httpd.server_close()


@pytest.fixture(autouse=True)
def _env(monkeypatch):
    for var in ("http_proxy", "HTTP_PROXY", "https_proxy", "HTTPS_PROXY", "all_proxy",
                "ALL_PROXY", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("KERNELZERO_API_KEY", SECRET)


def _prompt(text):
    return [{"role": "system", "content": "sys"},
            {"role": "user", "content": text, "meta": {"task": "L1/1_ReLU"}}]


FAST = dict(timeout_s=0.5, backoff_s=0.05, backoff_max_s=0.1)


def test_completions_in_order_with_per_sample_seeds_and_key(server):
    url, state = server
    backend = load_backend(f"openai:{url}#tiny-model", **FAST)
    out = backend.generate([_prompt("a"), _prompt("b")], 3, SamplingConfig(seed=10))
    assert out == [[f"echo a seed={10 + j} n=1" for j in range(3)],
                   [f"echo b seed={10 + j} n=1" for j in range(3)]]
    assert all(a == f"Bearer {SECRET}" for a in state.auth)
    body = state.bodies[0]
    assert body["model"] == "tiny-model" and body["max_tokens"] == SamplingConfig().max_new_tokens
    # metadata stays on our side: the server sees role and content only
    assert all(set(m) == {"role", "content"} for b in state.bodies for m in b["messages"])
    assert SECRET not in repr(backend)


def test_slow_response_times_out_then_retry_succeeds(server):
    url, state = server
    backend = load_backend(f"openai:{url}#m", **FAST)
    t0 = time.monotonic()
    out = backend.generate([_prompt("slow-once")], 1, SamplingConfig(seed=0))
    assert out == [["echo slow-once seed=0 n=1"]]
    assert state.calls["slow-once"] == 2
    assert time.monotonic() - t0 < 1.5  # did not wait for the slow answer


def test_500_is_retried(server):
    url, state = server
    out = load_backend(f"openai:{url}#m", **FAST).generate([_prompt("500-once")], 1,
                                                          SamplingConfig(seed=None))
    assert out == [["echo 500-once seed=None n=1"]]
    assert state.calls["500-once"] == 2


def test_persistent_5xx_gives_up_after_max_retries(server):
    url, state = server
    backend = load_backend(f"openai:{url}#m", max_retries=2, **FAST)
    with pytest.raises(BackendError, match=r"failed after 3 attempts.*HTTP 503"):
        backend.generate([_prompt("always-500")], 1, SamplingConfig())
    assert state.calls["always-500"] == 3


@pytest.mark.parametrize("mode,message", [
    ("malformed", r"without choices\[0\]\.message\.content"),
    ("not-json", r"not JSON"),
])
def test_malformed_answer_is_a_clear_error_without_retry(server, mode, message):
    url, state = server
    with pytest.raises(BackendError, match=message):
        load_backend(f"openai:{url}#m", **FAST).generate([_prompt(mode)], 1, SamplingConfig())
    assert state.calls[mode] == 1


def test_client_error_fails_at_once_and_never_shows_the_key(server):
    url, state = server
    with pytest.raises(BackendError, match="HTTP 401") as info:
        load_backend(f"openai:{url}#m", **FAST).generate([_prompt("unauthorized")], 1,
                                                        SamplingConfig())
    assert SECRET not in str(info.value) and "***" in str(info.value)
    assert state.calls["unauthorized"] == 1


def test_concurrency_is_bounded(server):
    url, state = server
    backend = load_backend(f"openai:{url}#m", concurrency=3, timeout_s=5)
    out = backend.generate([_prompt("concurrent")] * 4, 2, SamplingConfig())
    assert len(out) == 4 and all(len(o) == 2 for o in out)
    assert 2 <= state.max_in_flight <= 3


def test_unreachable_server_is_retried_then_reported(monkeypatch):
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    backend = load_backend(f"openai:http://127.0.0.1:{port}/v1#m", max_retries=1, **FAST)
    with pytest.raises(BackendError, match="connection failed"):
        backend.generate([_prompt("a")], 1, SamplingConfig())


def test_bad_specs():
    from kernelzero.models import BackendSpecError
    for spec in ("openai:http://127.0.0.1:1/v1", "openai:127.0.0.1#m", "openai:#m"):
        with pytest.raises(BackendSpecError, match="openai:URL#MODEL"):
            load_backend(spec)
