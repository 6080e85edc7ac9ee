"""`openai:URL#MODEL` — sample from any OpenAI-compatible chat-completions server.

Covers vLLM, SGLang and hosted APIs: one HTTP request per completion (n=1, seed = base seed +
sample index, so samples differ even where a server ignores `n` or fixes the seed), run by a
thread pool that bounds the requests in flight, each with a timeout, retried with exponential
backoff on timeouts, connection errors, 429 and 5xx. A 200 answer without the expected fields is
a `BackendError` naming what was missing; other 4xx answers fail at once with the server's text.

The API key is read from the environment (`KERNELZERO_API_KEY`, else `OPENAI_API_KEY`), never
from the command line; it appears in no message, log line or repr.

Uses only the standard library (urllib), so it runs on machines without extra packages. Proxy
settings come from the usual environment variables. Not covered: streaming, tool calls, the legacy
completions endpoint.
"""
from __future__ import annotations

import json
import os
import socket
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from kernelzero.models.base import (BackendError, Prompt, SamplingConfig, chat_messages,
                                    check_request)
from kernelzero.retry import RETRY_STATUSES, RetriesExhausted, Retryable, call_with_retries, parse_retry_after

KEY_ENV_VARS = ("KERNELZERO_API_KEY", "OPENAI_API_KEY")


@dataclass
class OpenAIConfig:
    """How the server is called.

    concurrency: most requests in flight at once.
    timeout_s: limit for one request (connect, and each wait for data).
    max_retries: further attempts after a retryable failure (timeout, connection error, 429, 5xx).
    backoff_s: wait before the first retry; doubled each time (with up to 25% jitter), capped at
        backoff_max_s.
    extra_body: extra JSON fields sent with every request (e.g. {"top_k": 20}).
    """

    concurrency: int = 16
    timeout_s: float = 600.0
    max_retries: int = 4
    backoff_s: float = 1.0
    backoff_max_s: float = 30.0
    extra_body: dict | None = None

    def __post_init__(self) -> None:
        if self.concurrency < 1:
            raise ValueError("OpenAIConfig.concurrency must be >= 1")
        if self.timeout_s <= 0:
            raise ValueError("OpenAIConfig.timeout_s must be positive")
        if self.max_retries < 0:
            raise ValueError("OpenAIConfig.max_retries must be >= 0")
        if self.backoff_s < 0 or self.backoff_max_s < self.backoff_s:
            raise ValueError("OpenAIConfig needs 0 <= backoff_s <= backoff_max_s")


def parse_spec(rest: str) -> tuple[str, str]:
    """`URL#MODEL` -> (chat-completions endpoint, model name)."""
    url, sep, model = rest.partition("#")
    if not sep or not model or not url.startswith(("http://", "https://")):
        raise ValueError(f"openai:{rest}: expected openai:URL#MODEL, e.g. "
                         "openai:http://127.0.0.1:8000/v1#Qwen/Qwen2.5-Coder-7B-Instruct")
    url = url.rstrip("/")
    if not url.endswith("/chat/completions"):
        url += "/chat/completions"
    return url, model


class OpenAIBackend:
    def __init__(self, url: str, model: str, config: OpenAIConfig | None = None) -> None:
        self.url, self.model = url, model
        self.config = config or OpenAIConfig()
        self.spec = f"openai:{url}#{model}"
        self._key = next((os.environ[v] for v in KEY_ENV_VARS if os.environ.get(v)), None)

    def __repr__(self) -> str:  # never show the key
        return f"OpenAIBackend(url={self.url!r}, model={self.model!r})"

    def generate(self, prompts: list[Prompt], n: int, sampling: SamplingConfig) -> list[list[str]]:
        check_request(prompts, n)
        jobs = [(i, j) for i in range(len(prompts)) for j in range(n)]
        out: list[list[str]] = [[""] * n for _ in prompts]
        with ThreadPoolExecutor(max_workers=self.config.concurrency) as pool:
            futures = {pool.submit(self._complete, prompts[i], sampling, j): (i, j)
                       for i, j in jobs}
            try:
                for fut, (i, j) in futures.items():
                    out[i][j] = fut.result()
            except BaseException:
                for f in futures:
                    f.cancel()
                raise
        return out

    def _complete(self, prompt: Prompt, sampling: SamplingConfig, index: int) -> str:
        body = {"model": self.model, "messages": chat_messages(prompt), "n": 1,
                "temperature": sampling.temperature, "top_p": sampling.top_p,
                "max_tokens": sampling.max_new_tokens}
        if sampling.seed is not None:
            body["seed"] = sampling.seed + index
        body.update(self.config.extra_body or {})
        data = json.dumps(body).encode()
        try:
            return call_with_retries(lambda: self._parse(self._post(data)), self.config.max_retries,
                                     self.config.backoff_s, self.config.backoff_max_s)
        except RetriesExhausted as e:
            raise BackendError(f"openai: {self.url} failed after {e.attempts} attempts; last "
                               f"error: {e.last.problem}") from None

    def _post(self, data: bytes) -> bytes:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        req = urllib.request.Request(self.url, data=data, headers=headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=self.config.timeout_s) as resp:
                return resp.read()
        except urllib.error.HTTPError as e:
            text = self._scrub(e.read()[:500].decode("utf-8", "replace"))
            if e.code in RETRY_STATUSES:
                raise Retryable(f"HTTP {e.code}: {text}", parse_retry_after(e.headers), e.code) from None
            raise BackendError(f"openai: {self.url} answered HTTP {e.code}: {text}") from None
        except (TimeoutError, socket.timeout):
            raise Retryable(f"no answer within {self.config.timeout_s:g} s") from None
        except urllib.error.URLError as e:
            if isinstance(e.reason, (TimeoutError, socket.timeout)):
                raise Retryable(f"no answer within {self.config.timeout_s:g} s") from None
            raise Retryable(f"connection failed: {e.reason}") from None
        except (ConnectionError, OSError) as e:  # reset mid-answer, remote closed, ...
            raise Retryable(f"connection failed: {type(e).__name__}: {e}") from None

    def _parse(self, raw: bytes) -> str:
        snippet = self._scrub(raw[:300].decode("utf-8", "replace"))
        try:
            doc = json.loads(raw)
        except ValueError:
            raise BackendError(f"openai: {self.url} answered with something that is not JSON: "
                               f"{snippet!r}") from None
        try:
            content = doc["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError):
            raise BackendError(f"openai: {self.url} answered without choices[0].message.content "
                               f"(not a chat-completions response?): {snippet!r}") from None
        if content is None:  # a refusal or a tool call: no text
            return ""
        if not isinstance(content, str):
            raise BackendError(f"openai: {self.url} answered with non-text content: {snippet!r}")
        return content

    def _scrub(self, text: str) -> str:
        return text.replace(self._key, "***") if self._key else text
