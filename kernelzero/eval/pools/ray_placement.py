"""Where the Ray pool sends a queued candidate: to an actor that already holds its task, else to
the least busy actor.

Each actor's evaluator computes a task's reference (seconds of GPU work, and a timing) the first
time it judges a candidate of that task, and caches it; another actor judging the same task
computes it again. So the driver remembers which actors were given each task (`TaskAffinity`)
and, each time it fills a free slot, `choose` picks the (queued job, actor) pair:

1. the first queued job whose task an actor with a free slot holds -> that actor (of several such
   holders, the one with the most free slots);
2. else the first queued job whose task no live actor holds -> the actor with the most free
   slots (so the first jobs of a batch spread over the actors instead of filling one first);
3. else (every queued task is held only by full actors) the head of the queue -> the actor with
   the most free slots, which from then on holds that task too.

Ties go to the lowest actor id. A free slot is never left idle while a job is queued: affinity
orders the choice, it never makes a job wait. Pure (no Ray): tested in tests/test_ray_placement.py.
"""
from __future__ import annotations

import collections
import itertools
from collections.abc import Collection, Iterable, Mapping

SCAN_LIMIT = 4096  # queued jobs looked at per choice; beyond, the head of the queue is taken


def most_free(free: Mapping[int, int], among: Iterable[int] | None = None) -> int | None:
    """The actor (of `among`, default all) with the most free slots, lowest id on ties; None
    when none has a free slot. `free` maps each ready actor's id to its free slots."""
    best = None
    for aid in (free if among is None else among):
        n = free.get(aid, 0)
        if n > 0 and (best is None or n > free[best] or (n == free[best] and aid < best)):
            best = aid
    return best


def choose(task_hashes: Iterable[str], free: Mapping[int, int],
           holders: Mapping[str, Collection[int]], scan: int = SCAN_LIMIT
           ) -> tuple[int, int] | None:
    """(index of the queued job, actor id) for the next free slot, by the module's rules; None
    when no actor has a free slot or nothing is queued. `task_hashes`: the queued jobs' tasks in
    queue order; `free`: every ready actor's free slots (full ones too, with 0); `holders`: task
    hash -> ids of the actors given that task (ids missing from `free` are ignored)."""
    anywhere = most_free(free)
    if anywhere is None:
        return None
    first_new = None
    seen = False
    for i, h in enumerate(itertools.islice(task_hashes, scan)):
        seen = True
        held = [a for a in holders.get(h, ()) if a in free]
        if not held:
            if first_new is None:
                first_new = i
            continue
        aid = most_free(free, held)
        if aid is not None:
            return i, aid
    if not seen:
        return None
    return (first_new if first_new is not None else 0), anywhere


class TaskAffinity:
    """Task hash -> ids of the actors given a candidate of that task (the newest `max_tasks`
    tasks are remembered). The driver's view: an actor's evaluator may have evicted a reference
    since; that only costs the recomputation affinity tries to avoid."""

    def __init__(self, max_tasks: int = 100_000):
        self.max_tasks = max_tasks
        self.holders: collections.OrderedDict[str, set[int]] = collections.OrderedDict()

    def add(self, task_hash: str, aid: int) -> None:
        self.holders.setdefault(task_hash, set()).add(aid)
        self.holders.move_to_end(task_hash)
        while len(self.holders) > self.max_tasks:
            self.holders.popitem(last=False)

    def forget_actor(self, aid: int) -> None:
        """The actor is gone (dropped, or its node died): its tasks are no longer held there."""
        for h in list(self.holders):
            self.holders[h].discard(aid)
            if not self.holders[h]:
                del self.holders[h]

    def tasks_per_actor(self) -> collections.Counter:
        return collections.Counter(a for aids in self.holders.values() for a in aids)
