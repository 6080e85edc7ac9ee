"""RewardClient: the reward service with the evaluator's API (`judge`, `judge_many`).

Covers: splitting a batch into requests the server accepts, sending up to `concurrency` of them
at once, retrying with exponential backoff (and the server's Retry-After) on 429, 5xx and
connection errors (kernelzero.retry, the one retry loop), and turning the JSON back into
`Verdict` objects in input order. The training loop uses it in place of a local pool when
`reward.url` is set.

Does not cover: judging (the server does), storing verdicts (the caller's `on_verdict` does).
Another 4xx is the caller's mistake and raises `RewardServiceError` at once.
"""
from __future__ import annotations

import os
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Callable

from kernelzero.eval.verdict import Verdict
from kernelzero.retry import RETRY_STATUSES, RetriesExhausted, Retryable, call_with_retries, parse_retry_after

TOKEN_ENV = "KERNELZERO_REWARD_TOKEN"
class RewardServiceError(RuntimeError):
    """The service refused the request (4xx), or kept failing after every retry."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


class RewardClient:
    """Judge (task, candidate) pairs through a KernelZero reward service.

    url: the service's base URL, e.g. http://127.0.0.1:8000.
    token: bearer token; None reads KERNELZERO_REWARD_TOKEN (unset: no auth header).
    timeout: seconds for one request (judging a whole chunk included).
    batch_size: pairs per request; keep it at or below the server's `max_batch`.
    concurrency: requests in flight at once.
    max_retries: retries of one request on 429/5xx/connection errors before giving up.
    backoff_s / max_backoff_s: first wait and cap of the exponential backoff (with jitter).
    """

    kind = "service"

    def __init__(self, url: str, token: str | None = None, timeout: float = 600.0,
                 batch_size: int = 32, concurrency: int = 4, max_retries: int = 8,
                 backoff_s: float = 0.5, max_backoff_s: float = 30.0):
        try:
            import httpx
        except ImportError as e:
            raise ImportError("the reward client needs httpx: "
                              "pip install 'kernelzero[serve]'") from e
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"reward service URL must start with http:// or https://, got {url!r}")
        if batch_size < 1 or concurrency < 1 or max_retries < 0 or timeout <= 0:
            raise ValueError("RewardClient needs batch_size, concurrency >= 1, max_retries >= 0, "
                             "timeout > 0")
        self.url = url.rstrip("/")
        token = token if token is not None else os.environ.get(TOKEN_ENV) or None
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, timeout=timeout,
                                  limits=httpx.Limits(max_connections=concurrency * 2))
        self._httpx = httpx
        self.batch_size = batch_size
        self.concurrency = concurrency
        self.max_retries = max_retries
        self.backoff_s = backoff_s
        self.max_backoff_s = max_backoff_s
        self.retries = 0  # retried requests so far (for tests and benchmarks)
        self._lock = threading.Lock()

    def __repr__(self) -> str:  # never show the token
        return f"RewardClient({self.url!r})"

    # -- the evaluator API -------------------------------------------------------------------
    def judge(self, task, cand) -> Verdict:
        return self.judge_many([(task, cand)])[0]

    def judge_many(self, pairs, on_verdict: Callable[[int, Verdict], None] | None = None
                   ) -> list[Verdict]:
        """Verdicts in input order; `on_verdict(i, v)` once per index as each chunk returns."""
        pairs = list(pairs)
        chunks = [list(range(s, min(s + self.batch_size, len(pairs))))
                  for s in range(0, len(pairs), self.batch_size)]
        results: list[Verdict | None] = [None] * len(pairs)
        deliver_lock = threading.Lock()

        def run(idx: list[int]) -> None:
            body = [self._item(*pairs[i]) for i in idx]
            verdicts = self._post_judge(body)
            with deliver_lock:
                for i, v in zip(idx, verdicts):
                    results[i] = v
                    if on_verdict is not None:
                        on_verdict(i, v)

        if len(chunks) <= 1 or self.concurrency == 1:
            for idx in chunks:
                run(idx)
        else:
            with ThreadPoolExecutor(min(self.concurrency, len(chunks))) as ex:
                for fut in [ex.submit(run, idx) for idx in chunks]:
                    fut.result()
        return results  # type: ignore[return-value]

    def health(self) -> dict:
        r = self._request("GET", "/health")
        return r.json()

    def check(self, attempts: int = 2, timeout: float = 10.0) -> dict:
        """Fail fast when the service cannot be used: GET /health, then an empty batch (which the
        server answers only with the right token). Each is tried `attempts` times with `timeout`
        seconds each, not `max_retries` times: a wrong URL at start-up should fail in seconds.
        Returns the health document; raises RewardServiceError."""
        h = self._request("GET", "/health", retries=attempts - 1, timeout=timeout).json()
        self._request("POST", "/v1/judge", json=[], retries=attempts - 1, timeout=timeout)
        return h

    # -- HTTP --------------------------------------------------------------------------------
    @staticmethod
    def _item(task, cand) -> dict:
        return {"reference": task.source, "candidate": cand.source,
                "backend": cand.backend, "name": (cand.name or "candidate")[:200]}

    def _post_judge(self, body: list[dict]) -> list[Verdict]:
        r = self._request("POST", "/v1/judge", json=body)
        data = r.json()
        if not isinstance(data, list) or len(data) != len(body):
            raise RewardServiceError(f"the service answered {type(data).__name__} of "
                                     f"{len(data) if isinstance(data, list) else '?'} items for "
                                     f"{len(body)} pairs")
        return [Verdict.from_dict(d) for d in data]

    def _request(self, method: str, path: str, retries: int | None = None, **kw):
        httpx = self._httpx
        retries = self.max_retries if retries is None else retries

        def attempt():
            try:
                r = self._http.request(method, path, **kw)
            except httpx.TransportError as e:
                raise Retryable(f"{type(e).__name__}: {e}") from None
            if r.status_code < 400:
                return r
            problem = f"HTTP {r.status_code}: {_detail(r)}"
            if r.status_code not in RETRY_STATUSES:
                raise RewardServiceError(f"{method} {path}: {problem}", status=r.status_code)
            raise Retryable(problem, parse_retry_after(r.headers), r.status_code)

        def count(_):
            with self._lock:
                self.retries += 1

        try:
            return call_with_retries(attempt, retries, self.backoff_s, self.max_backoff_s, count)
        except RetriesExhausted as e:
            raise RewardServiceError(f"{method} {self.url}{path} failed after {e.attempts} "
                                     f"attempts; last: {e.last.problem}", status=e.last.status) from None

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> "RewardClient":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _detail(r) -> str:
    try:
        d = r.json()
        return str(d.get("detail", d)) if isinstance(d, dict) else str(d)[:300]
    except ValueError:
        return r.text[:300]
