"""Retrying a request with exponential backoff: one loop for every HTTP client in KernelZero
(the OpenAI-compatible model backend and the reward service's client).

An attempt either returns, raises `Retryable` (a timeout, a dropped connection, HTTP 429 or a
5xx: worth another try), or raises anything else (a 4xx, a malformed answer: final). Waits
double from `backoff_s` up to `max_backoff_s`, each drawn between half and all of that (jitter
spreads clients that failed together), and never shorter than the server's Retry-After.
"""
from __future__ import annotations

import random
import time
from typing import Callable, TypeVar

T = TypeVar("T")

# HTTP statuses worth retrying: request timeout, conflict/too early (some gateways), rate limit,
# and the server-side failures that a later attempt can outlive.
RETRY_STATUSES = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


def parse_retry_after(headers) -> float | None:
    """The server's Retry-After header in seconds (the delta form; a date, or none, is None)."""
    try:
        return float((headers or {}).get("Retry-After", ""))
    except (TypeError, ValueError):
        return None


class Retryable(Exception):
    """A failed attempt worth another: `problem` in words, the server's Retry-After (s) and
    the HTTP status when there was one."""

    def __init__(self, problem: str, retry_after: float | None = None, status: int | None = None):
        super().__init__(problem)
        self.problem, self.retry_after, self.status = problem, retry_after, status


class RetriesExhausted(Exception):
    """Every attempt failed: `attempts` made, `last` the last one's Retryable."""

    def __init__(self, attempts: int, last: Retryable):
        super().__init__(f"failed after {attempts} attempts; last: {last.problem}")
        self.attempts, self.last = attempts, last


def backoff_wait(attempt: int, backoff_s: float, max_backoff_s: float,
                 retry_after: float | None = None) -> float:
    """Seconds to wait before retry number `attempt` (0 = the first retry)."""
    wait = min(max_backoff_s, backoff_s * 2 ** attempt) * random.uniform(0.5, 1.0)
    return min(max(wait, retry_after or 0.0), max_backoff_s)


def call_with_retries(attempt: Callable[[], T], retries: int, backoff_s: float,
                      max_backoff_s: float, on_retry: Callable[[Retryable], None] | None = None,
                      sleep: Callable[[float], None] = time.sleep) -> T:
    """`attempt()`, made up to `retries` more times while it raises Retryable."""
    for n in range(retries + 1):
        try:
            return attempt()
        except Retryable as e:
            if n == retries:
                raise RetriesExhausted(n + 1, e) from None
            if on_retry is not None:
                on_retry(e)
            sleep(backoff_wait(n, backoff_s, max_backoff_s, e.retry_after))
    raise AssertionError("unreachable")
