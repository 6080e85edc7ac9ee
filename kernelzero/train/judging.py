"""Judging for training: a judging pool behind a verdict cache keyed by (task hash, candidate hash).

Covers: opening the pool the config's `reward` section names (`open_pool`: the local Evaluator,
a Ray pool, or the reward service's HTTP client, all with `judge_many`), de-duplicating a batch,
skipping pairs already judged (in this run or a killed earlier attempt of it), sending the rest
to the pool's `judge_many` in parallel, appending every new verdict to a JSONL file at once (so a
kill loses nothing already judged and a resume judges nothing twice), and the latency of each
batch.

Does not cover: how a verdict is reached (kernelzero.eval), how it travels over HTTP
(kernelzero.serve.client) or what reward it earns (rewards.py).
One cache file per process: with several processes each rank writes its own
`verdicts.rank{R}.jsonl`, and readers merge them (`load_verdict_records`).

Integrity: each line carries a tag only the judge can make (kernelzero.integrity). A line whose tag
does not check out (edited behind the judge's back, untagged, or tagged with another key) is never
loaded: its pair is judged again, so a forged cached verdict never becomes a reward.
"""
from __future__ import annotations

import json
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable

from kernelzero.eval import Verdict
from kernelzero.integrity import OK, VerdictKey, load_key
from kernelzero.tasks import Candidate, Task

PROGRESS_EVERY_S = 30.0  # between progress lines of a long batch (Judge.log)
log = logging.getLogger(__name__)


def verdict_cache_key(task_hash: str, candidate_hash: str) -> str:
    return f"{task_hash}:{candidate_hash}"


class VerdictCache:
    """Verdicts by (task hash, candidate hash), in memory and (optionally) in an append-only JSONL file.

    A half-written last line (the process was killed mid-write) is cut off on load; a line whose
    integrity tag does not check out is left out (counted in `refused`, by kind) and warned about.
    """

    def __init__(self, path: str | Path | None = None, read_paths: Iterable[str | Path] = (),
                 key: VerdictKey | None = None):
        """key: tags new lines and checks loaded ones (default: the user's verdict key)."""
        self.path = Path(path) if path else None
        self.key = key if key is not None else _user_key()
        if self.path:
            _drop_torn_tail(self.path)
        self._verdicts: dict[str, Verdict] = {}
        self.refused: dict[str, int] = {}
        for p in [*read_paths, *([self.path] if self.path else [])]:
            for rec in _read_jsonl(Path(p)):
                kind = _integrity(self.key, rec)
                if kind != OK:
                    self.refused[kind] = self.refused.get(kind, 0) + 1
                    continue
                self._verdicts.setdefault(rec["key"], Verdict.from_dict(rec["verdict"]))
        if self.refused:
            log.warning("verdict cache: %s line(s) failed the integrity check (%s) and will be "
                        "judged again", sum(self.refused.values()),
                        ", ".join(f"{k} {n}" for k, n in sorted(self.refused.items())))

    def get(self, task_hash: str, candidate_hash: str) -> Verdict | None:
        return self._verdicts.get(verdict_cache_key(task_hash, candidate_hash))

    def put_many(self, items: list[tuple[str, dict, Verdict]]) -> None:
        """Store (key, context, verdict) triples; `context` (task key, round, phase) goes to the file."""
        fresh = [(k, ctx, v) for k, ctx, v in items if k not in self._verdicts]
        for k, _, v in fresh:
            self._verdicts[k] = v
        if self.path and fresh:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as f:
                for k, ctx, v in fresh:
                    rec = {"key": k, **ctx, "verdict": v.to_dict()}
                    rec = json.loads(json.dumps(rec))  # tagged as it will read back
                    if self.key is not None:
                        rec["tag"] = self.key.tag(rec)
                    f.write(json.dumps(rec) + "\n")
                f.flush()
                os.fsync(f.fileno())

    def __len__(self) -> int:
        return len(self._verdicts)

    def keys(self) -> set[str]:
        return set(self._verdicts)


def _user_key() -> VerdictKey | None:
    try:
        return load_key()
    except (OSError, ValueError) as e:
        log.warning("verdict cache: no verdict key (%s): lines are written untagged and none "
                    "is loaded back", e)
        return None


def _integrity(key: VerdictKey | None, rec: dict) -> str:
    """A JSONL record's integrity (kernelzero.integrity): its tag over everything else in it."""
    body = {k: v for k, v in rec.items() if k != "tag"}
    if key is None:
        return "unsigned" if not rec.get("tag") else "other_key"
    return key.check(body, rec.get("tag"))


def _drop_torn_tail(path: Path) -> None:
    """Cut a last line left half-written by a kill, so the next append starts on a fresh line."""
    if not path.exists() or path.stat().st_size == 0:
        return
    data = path.read_bytes()
    if data.endswith(b"\n"):
        return
    with path.open("r+b") as f:
        f.truncate(data.rfind(b"\n") + 1)


def _read_jsonl(path: Path):
    if not path.exists():
        return
    with path.open(encoding="utf-8") as f:
        for line in f:
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue  # a line cut short by a kill
            if isinstance(rec, dict) and "key" in rec and isinstance(rec.get("verdict"), dict):
                yield rec


def load_verdict_records(run_dir: str | Path) -> list[dict]:
    """Every verdict record of a run (all ranks' files), in file order, each with `integrity`
    (kernelzero.integrity: `ok` unless edited after the judge wrote it, untagged, or tagged with
    another key)."""
    key = _user_key()
    out = []
    for p in sorted(Path(run_dir).glob("verdicts*.jsonl")):
        with p.open(encoding="utf-8") as f:
            for line in f:
                try:
                    rec = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if isinstance(rec, dict):
                    out.append({**rec, "integrity": _integrity(key, rec)})
    return out


@dataclass
class BatchStats:
    """One judged batch: sizes and wall time (seconds)."""

    n_pairs: int = 0
    n_unique: int = 0
    n_cached: int = 0
    n_judged: int = 0
    latency_s: float = 0.0


class PoolUnavailable(RuntimeError):
    """The judging pool the config names cannot be opened (no service at reward.url, Ray missing
    or unreachable): a problem with the run's settings, found before any training starts."""


# Start-up check of a reward service: a wrong URL should fail in seconds, not after the client's
# minutes of backoff (those retries are for a service that was up and is briefly overloaded).
SERVICE_CHECK_ATTEMPTS = 2
SERVICE_CHECK_TIMEOUT_S = 10.0


def open_pool(reward, eval_config):
    """The pool `reward` (a config.RewardConfig) names, opened; close it (or use `with`) when done.

    url set: a `RewardClient` on the service, checked first (health, and the token with an empty
    batch). Else `make_pool(reward.pool, eval_config, ray_address=...)`: an Evaluator or a RayPool.
    Ray and the HTTP client are imported only when asked for. Raises PoolUnavailable.
    """
    if reward.url:
        return _service_client(reward, eval_config)
    from kernelzero.eval.pools import make_pool

    try:
        return make_pool(reward.pool, eval_config, ray_address=reward.ray_address)
    except ImportError as e:
        raise PoolUnavailable(str(e)) from e
    except (ConnectionError, RuntimeError) as e:  # ray.init found no cluster, or no GPU to claim
        if reward.pool != "ray":
            raise
        where = reward.ray_address or "a private local cluster"
        raise PoolUnavailable(f"the Ray pool ({where}) could not start: {_one_line(e)}") from e


def _service_client(reward, eval_config):
    try:
        from kernelzero.serve.client import RewardClient, RewardServiceError

        client = RewardClient(reward.url, token=reward.token)
    except (ImportError, ValueError) as e:
        raise PoolUnavailable(str(e)) from e
    try:
        health = client.check(attempts=SERVICE_CHECK_ATTEMPTS, timeout=SERVICE_CHECK_TIMEOUT_S)
    except RewardServiceError as e:
        client.close()
        raise PoolUnavailable(f"reward service at {client.url} is not usable: {_one_line(e)}") from e
    differ = settings_mismatch(health.get("judging"), eval_config.judging_settings())
    if differ:
        client.close()
        raise PoolUnavailable(
            f"reward service at {client.url} judges with other settings than this run's `eval` "
            f"section ({differ}): its rewards would not mean what this run configured; start it "
            "with `kernelzero serve --eval-config CONFIG.yaml` (this run's config)")
    return client


def settings_mismatch(service: dict | None, wanted: dict) -> str:
    """'' when the service judges as `wanted` says; else the differing fields, readable."""
    if not isinstance(service, dict):
        return "the service does not report its judging settings"
    diffs = [f"{k}: service {service.get(k)!r}, run {v!r}" for k, v in wanted.items()
             if service.get(k) != v]
    return "; ".join(diffs)


def _one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0] if text else type(e).__name__


@dataclass
class Judge:
    """A judging pool plus the cache. `pool` has `judge_many(pairs, on_verdict=None) ->
    [Verdict]` (an Evaluator, a RayPool or a RewardClient; see `open_pool`), already open.

    Each verdict goes to the cache as it comes in, so a batch killed halfway (a step limit, a
    lost machine) keeps the verdicts it reached and a resumed run judges only the rest. `log`
    gets a progress line about every PROGRESS_EVERY_S seconds of a long batch."""

    pool: object
    cache: VerdictCache = field(default_factory=VerdictCache)
    on_verdict: Callable[[Task, Candidate, Verdict], None] | None = None
    last: BatchStats = field(default_factory=BatchStats)
    log: Callable[[str], None] | None = None

    def judge(self, pairs: list[tuple[Task, Candidate]], context: dict | None = None) -> list[Verdict]:
        """Verdicts for `pairs` in order; each distinct pair is judged at most once, ever."""
        t0 = time.perf_counter()
        keys = [verdict_cache_key(t.hash, c.hash) for t, c in pairs]
        todo: dict[str, tuple[Task, Candidate]] = {}
        cached = 0
        for key, (t, c) in zip(keys, pairs):
            if key in todo:
                continue
            if self.cache.get(t.hash, c.hash) is not None:
                cached += 1
            else:
                todo[key] = (t, c)
        if todo:
            ctx = dict(context or {})
            items = list(todo.items())
            verdicts = self.pool.judge_many([pair for _, pair in items],
                                            on_verdict=self._streaming(items, ctx, t0))
            self.cache.put_many([(k, {**ctx, "task": t.key}, v)  # those not streamed
                                 for (k, (t, _)), v in zip(items, verdicts)])
            if self.on_verdict:
                for (t, c), v in zip(todo.values(), verdicts):
                    self.on_verdict(t, c, v)
        out = [self.cache.get(t.hash, c.hash) for t, c in pairs]
        self.last = BatchStats(n_pairs=len(pairs), n_unique=len(set(keys)), n_cached=cached,
                               n_judged=len(todo), latency_s=time.perf_counter() - t0)
        return out

    def _streaming(self, items: list, ctx: dict, t0: float):
        """The pool's `on_verdict(i, v)`: the verdict into the cache at once (pools call it from
        their judging threads, hence the lock), and a progress line now and then."""
        lock, done, last = threading.Lock(), [0], [t0]

        def on_verdict(i: int, v: Verdict) -> None:
            k, (t, _) = items[i]
            with lock:
                self.cache.put_many([(k, {**ctx, "task": t.key}, v)])
                done[0] += 1
                now = time.perf_counter()
                if self.log and now - last[0] >= PROGRESS_EVERY_S and done[0] < len(items):
                    last[0] = now
                    self.log(f"    judged {done[0]}/{len(items)} ({done[0] / (now - t0):.1f}/s)")

        return on_verdict
