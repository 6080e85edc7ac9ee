"""The reward service: an HTTP front for a judging pool (FastAPI).

Routes:
- `POST /v1/judge`: a JSON array of `{reference, candidate, backend?, name?}` (sources as text) in,
  a JSON array of verdicts (`Verdict.to_dict()`) out, in the same order.
- `GET /health`: queue depth, candidates in flight, dispatcher and pool state, pool kind.
- `GET /openapi.json` (and `/docs`): the schema.

Rules, in the order a request meets them:
1. Auth (only when a token is configured): no `Authorization: Bearer ...` header -> 401, a wrong
   token -> 403. The token is compared in constant time and never logged or echoed.
2. Size: a body over `max_body_bytes` -> 413 (checked on Content-Length and again while reading).
3. Shape: not JSON -> 400; JSON of the wrong shape -> 422 with where and what; more than
   `max_batch` items -> 413. A malformed request never gets a 500.
4. Back-pressure: when accepting the batch would put more than `max_queue` candidates in the
   building -> 429 with Retry-After; nothing of that batch is queued.
5. Judging runs in dispatcher threads (kernelzero/serve/dispatch.py), never on the event loop, so
   `/health` answers while candidates are being judged. A pool that raises -> 503.

Not covered: TLS (put the service behind a proxy, or keep it on 127.0.0.1), rate limits per
client, cancelling judged work when a client disconnects.
"""
from __future__ import annotations

import asyncio
import hmac
import math
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Literal

from fastapi import FastAPI, Request, Security
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.security import HTTPBearer
from pydantic import BaseModel, ConfigDict, Field

from kernelzero.eval.pools import pool_kind as _pool_kind
from kernelzero.eval.verdict import Verdict
from kernelzero.serve.dispatch import Dispatcher, PoolFailed, QueueFull
from kernelzero.tasks import Candidate, Task

JUDGE_PATH = "/v1/judge"
TOKEN_ENV = "KERNELZERO_SERVE_TOKEN"


@dataclass
class ServeConfig:
    """The service's limits.

    max_queue: candidates accepted and not yet judged (waiting + in flight); beyond it, 429.
    max_batch: items in one request; beyond it, 413 (split the batch: the client does).
    max_body_bytes: request body size; beyond it, 413.
    dispatchers / max_dispatch: threads calling the pool at once, and candidates per call (see
        `Dispatcher`): the local pool wants its max_workers and 1, RayPool a few and many.
    retry_after_s: the Retry-After a 429 carries.
    token: bearer token clients must send; None serves without auth (keep such a server on
        127.0.0.1). `kernelzero serve` reads it from an environment variable, never a flag.
    """

    max_queue: int = 256
    max_batch: int = 128
    max_body_bytes: int = 8 * 2**20
    dispatchers: int = 4
    max_dispatch: int = 1
    retry_after_s: int = 2
    token: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_queue", "max_batch", "max_body_bytes", "dispatchers", "max_dispatch",
                     "retry_after_s"):
            if getattr(self, name) < 1:
                raise ValueError(f"ServeConfig.{name} must be >= 1")
        if self.token is not None and not self.token.strip():
            raise ValueError("ServeConfig.token is empty: unset the variable or give a real token")

    def __repr__(self) -> str:  # keep the token out of logs and tracebacks
        return (f"ServeConfig(max_queue={self.max_queue}, max_batch={self.max_batch}, "
                f"max_body_bytes={self.max_body_bytes}, dispatchers={self.dispatchers}, "
                f"token={'set' if self.token else None})")


class JudgeItem(BaseModel):
    """One pair to judge: the reference module's source and the candidate's source."""

    model_config = ConfigDict(extra="forbid")
    reference: str = Field(
        description="reference module source: Model, get_inputs, get_init_inputs")
    candidate: str = Field(description="candidate source: a ModelNew class")
    backend: Literal["auto", "triton", "cuda"] = Field("auto", description="kernel language")
    name: str | None = Field(None, max_length=200,
                             description="a label for the candidate; not judged")

    def pair(self) -> tuple[Task, Candidate]:
        name = self.name or "candidate"
        return (Task.from_source(self.reference, name="task"),
                Candidate(source=self.candidate, name=name, backend=self.backend))


class _Gate:
    """Pure-ASGI guard for JUDGE_PATH: auth first, then the body size, before FastAPI parses."""

    def __init__(self, app, config: ServeConfig):
        self.app = app
        self.config = config

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["path"] != JUDGE_PATH:
            return await self.app(scope, receive, send)
        headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope["headers"]}
        refusal = self._auth(headers.get("authorization"))
        if refusal is None:
            refusal = await self._read_body(headers.get("content-length"), receive)
        if isinstance(refusal, JSONResponse):
            return await refusal(scope, receive, send)
        body = refusal  # the whole body, replayed to FastAPI
        sent = False

        async def replay():
            nonlocal sent
            if sent:
                return await receive()
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}

        return await self.app(scope, replay, send)

    def _auth(self, header: str | None) -> JSONResponse | None:
        token = self.config.token
        if not token:
            return None
        challenge = {"WWW-Authenticate": "Bearer"}
        if not header or not header.lower().startswith("bearer "):
            return JSONResponse({"detail": "this server needs `Authorization: Bearer <token>`"},
                                status_code=401, headers=challenge)
        given = header[7:].strip().encode()
        if not hmac.compare_digest(given, token.encode()):
            return JSONResponse({"detail": "the bearer token is not valid for this server"},
                                status_code=403)
        return None

    async def _read_body(self, content_length: str | None, receive) -> bytes | JSONResponse:
        limit = self.config.max_body_bytes
        too_big = JSONResponse({"detail": f"the request body is larger than the server's limit of "
                                          f"{limit} bytes; send fewer or smaller items"},
                               status_code=413)
        if content_length is not None:
            try:
                if int(content_length) > limit:
                    return too_big
            except ValueError:
                return JSONResponse({"detail": "Content-Length is not a number"}, status_code=400)
        chunks, size = [], 0
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return JSONResponse({"detail": "client disconnected"}, status_code=400)
            chunk = message.get("body", b"")
            size += len(chunk)
            if size > limit:
                return too_big
            chunks.append(chunk)
            if not message.get("more_body", False):
                return b"".join(chunks)


def _json_safe(obj):
    """Strict JSON has no NaN/Infinity: a non-finite float (an overflowed error) becomes null."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: _json_safe(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_json_safe(v) for v in obj]
    return obj


def _describe(errors: list[dict]) -> str:
    parts = []
    for e in errors[:5]:
        where = ".".join(str(x) for x in e.get("loc", ()) if x != "body") or "body"
        parts.append(f"{where}: {e.get('msg', 'invalid')}")
    more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
    return "; ".join(parts) + more


def create_app(pool, config: ServeConfig | None = None, pool_kind: str | None = None) -> FastAPI:
    """The FastAPI app serving `pool` (anything with `judge_many(pairs, on_verdict)`).

    The app starts its dispatcher threads on startup and stops them on shutdown; it does not
    close the pool (whoever made the pool does). Long on purpose: the routes are closures over the
    app's dispatcher, config and pool, and read top to bottom beside their OpenAPI responses.
    """
    config = config or ServeConfig()
    kind = pool_kind or _pool_kind(pool)
    dispatcher = Dispatcher(pool, max_queue=config.max_queue, threads=config.dispatchers,
                            max_dispatch=config.max_dispatch)
    started = time.time()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        dispatcher.start()
        try:
            yield
        finally:
            dispatcher.close()

    app = FastAPI(title="KernelZero reward service", version="1",
                  description="Judge candidate GPU kernels against reference PyTorch modules.",
                  lifespan=lifespan)
    app.state.dispatcher = dispatcher
    app.state.config = config
    app.add_middleware(_Gate, config=config)  # auth and size, before FastAPI reads the body
    bearer = HTTPBearer(auto_error=False, description="set when the server has a token")
    _add_error_handlers(app)

    @app.post(JUDGE_PATH, dependencies=[Security(bearer)],
              responses={200: {"model": list[Verdict], "description": "one verdict per item, in "
                               "order (each also has `correct`, `trials` and `hashes`)"},
                         400: {"description": "not JSON"}, 401: {"description": "no token"},
                         403: {"description": "wrong token"}, 413: {"description": "too large"},
                         422: {"description": "wrong shape"}, 429: {"description": "queue full"},
                         503: {"description": "the pool failed or is shutting down"}})
    async def judge(items: list[JudgeItem]):
        """Judge a batch of (reference, candidate) pairs; verdicts come back in order."""
        if len(items) > config.max_batch:
            return JSONResponse({"detail": f"{len(items)} items in one request; this server takes "
                                           f"at most {config.max_batch}: split the batch"},
                                status_code=413)
        if not items:
            return []
        try:
            futures = dispatcher.submit([item.pair() for item in items])
        except QueueFull as e:
            return JSONResponse({"detail": f"the judging queue is full ({e}); retry later"},
                                status_code=429,
                                headers={"Retry-After": str(config.retry_after_s)})
        except PoolFailed as e:
            return JSONResponse({"detail": str(e)}, status_code=503)
        try:
            verdicts = await asyncio.gather(*(asyncio.wrap_future(f) for f in futures))
        except PoolFailed as e:
            return JSONResponse({"detail": str(e)}, status_code=503)
        return JSONResponse([_json_safe(v.to_dict()) for v in verdicts])

    @app.get("/health")
    async def health():
        """Queue depth, candidates in flight, dispatcher and pool state."""
        workers = await asyncio.to_thread(_pool_state, pool)
        broken = bool(workers.get("aborted") or workers.get("broken")) or "error" in workers
        cfg = getattr(pool, "config", None)
        return {"status": "broken" if broken else "ok", "pool": kind, "auth": bool(config.token),
                "uptime_s": round(time.time() - started, 3), **dispatcher.state(),
                "workers": workers,
                # What its verdicts mean: a trainer checks these against its own settings.
                "judging": cfg.judging_settings() if hasattr(cfg, "judging_settings") else None,
                "limits": {"max_batch": config.max_batch, "max_body_bytes": config.max_body_bytes}}

    return app


def _add_error_handlers(app: FastAPI) -> None:
    """A body FastAPI cannot read as the schema -> 400 (not JSON) or 422 (wrong shape), with
    where and what; any other exception -> 500 naming only its type (a KernelZero bug)."""

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        errors = [{k: v for k, v in e.items() if k in ("loc", "msg", "type")} for e in exc.errors()]
        if any(e.get("type") == "json_invalid" for e in errors):
            return JSONResponse({"detail": "the body is not valid JSON: " + _describe(errors)},
                                status_code=400)
        return JSONResponse({"detail": "the body does not match the schema (a JSON array of "
                                       "{reference, candidate, backend?, name?}): "
                                       + _describe(errors), "errors": errors}, status_code=422)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):  # a KernelZero bug, not the client's
        return JSONResponse({"detail": f"internal error: {type(exc).__name__}"}, status_code=500)


def _pool_state(pool) -> dict:
    """What the pool says about its workers (RayPool: the cluster); never raises."""
    try:
        if hasattr(pool, "health"):
            return pool.health()
        cfg = getattr(pool, "config", None)
        return {"aborted": bool(getattr(pool, "aborted", False)),
                "device": getattr(cfg, "device", None),
                "max_workers": getattr(cfg, "max_workers", None)}
    except Exception as e:  # health must answer even when the pool cannot
        return {"error": f"{type(e).__name__}: {e}"}
