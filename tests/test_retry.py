"""The one retry loop (kernelzero.retry) both HTTP clients use."""
import pytest

from kernelzero.retry import Retryable, RetriesExhausted, backoff_wait, call_with_retries


def test_retries_until_an_attempt_returns_and_waits_grow():
    waits, seen = [], []
    answers = iter([Retryable("503"), Retryable("timeout"), "ok"])

    def attempt():
        a = next(answers)
        if isinstance(a, Exception):
            raise a
        return a
    out = call_with_retries(attempt, 3, 1.0, 30.0, on_retry=seen.append, sleep=waits.append)
    assert out == "ok" and [e.problem for e in seen] == ["503", "timeout"]
    assert 0.5 <= waits[0] <= 1.0 and 1.0 <= waits[1] <= 2.0


def test_gives_up_after_the_last_retry_with_its_problem():
    calls = []

    def attempt():
        calls.append(1)
        raise Retryable("HTTP 429: slow down", retry_after=2.0, status=429)
    with pytest.raises(RetriesExhausted, match="3 attempts; last: HTTP 429") as e:
        call_with_retries(attempt, 2, 0.01, 5.0, sleep=lambda s: None)
    assert len(calls) == 3 and e.value.last.status == 429


def test_a_final_error_is_not_retried():
    def attempt():
        raise ValueError("HTTP 400")
    with pytest.raises(ValueError):
        call_with_retries(attempt, 5, 0.01, 1.0, sleep=pytest.fail)


def test_retry_after_is_honoured_and_everything_is_capped():
    assert backoff_wait(0, 0.1, 30.0, retry_after=4.0) == 4.0
    assert backoff_wait(10, 1.0, 8.0) <= 8.0 and backoff_wait(0, 1.0, 8.0, retry_after=60) == 8.0


def test_retry_after_header_is_read_in_seconds_and_a_date_is_none():
    from kernelzero.retry import parse_retry_after
    assert parse_retry_after({"Retry-After": "3"}) == 3.0
    assert parse_retry_after({"Retry-After": "Wed, 21 Oct 2026 07:28:00 GMT"}) is None
    assert parse_retry_after({}) is None and parse_retry_after(None) is None
