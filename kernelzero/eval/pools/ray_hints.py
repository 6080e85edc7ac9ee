"""BatchHints: how many workers each Ray judging actor should expect its batch to take.

An actor is handed one candidate at a time, so its spare pool (`SparePool.expect`) cannot see the
batch. The driver counts for it: a batch expects one worker take per candidate and one per
distinct task (its reference; counted even when an actor has it cached, and candidates rejected
before a worker are counted too). While batches are in progress each ready actor is told its
share of what they still expect (ceil over the ready actors: placement spreads the work, though
not evenly, so this is an estimate; one that becomes ready mid-batch is told then), and
`expect(None)` when the last batch ends. With batches from several threads a hint counts the
others' takes not yet delivered (some already taken: an overestimate, capped by the pool size),
and the end of a batch that is not the last sends nothing: the counts already sent stay at or
above what is left.

Hints are sent without waiting, on the actors' own concurrency group (`HINT_GROUP`: a hint must
not queue behind judging, which holds every slot of the default group). A hint only saves
start-ups, so one that fails (its actor died) is ignored; its result is still collected, since
Ray logs the errors nobody read. The owner calls every method under its own lock.
"""
from __future__ import annotations

HINT_GROUP = "kz_hints"


class BatchHints:
    def __init__(self, ray) -> None:
        self._ray = ray
        self.batches = 0   # batches in progress
        self._takes = 0    # worker takes those batches still expect
        self._refs: list = []  # expect() calls not yet collected

    def begin(self, takes: int, ready: list) -> None:
        """A batch of `takes` starts; `ready`: the ready actors' handles. Sent before the
        batch is queued, so that it reaches them before its first takes."""
        self.batches += 1
        self._takes += takes
        self._send(self._share(len(ready)), ready)

    def delivered(self, n: int) -> None:
        """n candidates of some batch came back (each took its worker)."""
        self._takes -= n

    def end(self, undelivered: int, ready: list) -> None:
        """A batch ended with `undelivered` of its takes never delivered (interrupted)."""
        self.batches -= 1
        self._takes -= undelivered
        if not self.batches:
            self._send(None, ready)

    def actor_ready(self, handle, n_ready: int) -> None:
        """An actor became ready mid-batch (a cold start, a replacement)."""
        if self.batches:
            self._send(self._share(n_ready), [handle])

    def collect(self, timeout_s: float = 0.0) -> None:
        """Read the results of the hints that have finished (at most timeout_s for the rest)."""
        if not self._refs:
            return
        done, self._refs = self._ray.wait(self._refs, num_returns=len(self._refs),
                                          timeout=timeout_s)
        for ref in done:
            try:
                self._ray.get(ref)
            except Exception:  # the actor died, or its evaluator's hint failed: no matter
                pass

    @property
    def unread(self) -> int:
        """Hints sent whose results were not collected yet."""
        return len(self._refs)

    def _share(self, n_ready: int) -> int:
        return -(-self._takes // max(1, n_ready))

    def _send(self, takes: int | None, handles: list) -> None:
        for handle in handles:
            try:
                self._refs.append(handle.expect.options(concurrency_group=HINT_GROUP)
                                  .remote(takes))
            except Exception:  # a dead actor's handle: its judging calls report the death
                pass
