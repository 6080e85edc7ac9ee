"""The Ray pool's placement policy (kernelzero.eval.pools.ray_placement), without Ray.

- one job: a holder of its task with a free slot, else the actor with the most free slots;
  ties to the lowest id; None when every actor is full;
- a queue: affine jobs first, then jobs of unheld tasks, then the head (never an idle slot);
- the first jobs of a batch spread over the actors; a batch of two candidates per task lands
  each task on one actor; a dropped actor's tasks are forgotten.
"""
from __future__ import annotations

from kernelzero.eval.pools.ray_placement import TaskAffinity, choose, most_free


def test_most_free_ties_go_to_the_lowest_id_and_full_actors_are_skipped():
    assert most_free({0: 2, 1: 2}) == 0
    assert most_free({3: 1, 1: 1, 2: 0}) == 1
    assert most_free({0: 1, 1: 3}) == 1
    assert most_free({0: 0, 1: 0}) is None
    assert most_free({}) is None
    assert most_free({0: 4, 1: 2}, among=[1]) == 1
    assert most_free({0: 4, 1: 0}, among=[1, 7]) is None  # 7: not a ready actor


def test_one_job_prefers_the_holder_and_goes_elsewhere_when_it_is_full():
    holders = {"t": {1}}
    assert choose(["t"], {0: 4, 1: 1}, holders) == (0, 1)  # affine, though 0 has more free slots
    assert choose(["t"], {0: 4, 1: 0}, holders) == (0, 0)  # affine actor full: never wait for it
    assert choose(["new"], {0: 1, 1: 3}, holders) == (0, 1)  # unheld: the most free slots
    assert choose(["t"], {0: 0, 1: 0}, holders) is None  # no free slot anywhere
    assert choose(["t"], {0: 2}, {"t": {1}}) == (0, 0)  # the holder is gone (not ready / dropped)
    assert choose(["t"], {0: 1, 1: 1, 2: 3}, {"t": {0, 1}}) == (0, 0)  # holders tie: lowest id


def test_choose_nothing_to_do():
    assert choose([], {0: 2}, {}) is None
    assert choose(["a", "b"], {0: 0, 1: 0}, {}) is None
    assert choose(["a"], {}, {}) is None


def test_choose_affine_job_first_then_unheld_task_then_head():
    free = {0: 1, 1: 1}
    assert choose(["a", "b"], free, {"a": {0}, "b": {1}}) == (0, 0)
    # 'a' is held by the full actor 0, 'b' by actor 1 (free): 'b' is taken before the earlier 'a'
    assert choose(["a", "b"], {0: 0, 1: 1}, {"a": {0}, "b": {1}}) == (1, 1)
    # the head's actor is full; 'c' is held by nobody: it takes the slot, no duplicate of 'a'
    assert choose(["a", "c"], {0: 0, 1: 2}, {"a": {0}}) == (1, 1)
    # every queued task is held by a full actor: the head goes to the free one, not left idle
    assert choose(["a", "a", "b"], {0: 0, 1: 0, 2: 1}, {"a": {0}, "b": {1}}) == (0, 2)


def test_choose_scan_limit_falls_back_to_the_head():
    queue = ["held"] * 10 + ["mine"]
    free, holders = {0: 0, 1: 1}, {"held": {0}, "mine": {1}}
    assert choose(queue, free, holders) == (10, 1)
    assert choose(queue, free, holders, scan=5) == (0, 1)


def simulate(queue: list[str], slots: dict[int, int], affinity: TaskAffinity):
    """Fill every free slot as RayPool._assign does; returns [(task, actor)] in order."""
    queue, free, out = list(queue), dict(slots), []
    while (picked := choose(queue, free, affinity.holders)) is not None:
        i, aid = picked
        task = queue.pop(i)
        free[aid] -= 1
        affinity.add(task, aid)
        out.append((task, aid))
    return out, queue, free


def test_first_jobs_spread_over_the_actors():
    placed, left, _ = simulate(["a", "b", "c", "d", "e", "f"], {0: 3, 1: 3}, TaskAffinity())
    assert placed == [("a", 0), ("b", 1), ("c", 0), ("d", 1), ("e", 0), ("f", 1)]
    assert left == []


def test_two_candidates_per_task_each_task_on_one_actor():
    """The measured batch: 10 tasks, 2 candidates each, in two rounds; 2 actors x 4 slots."""
    tasks = [f"t{i}" for i in range(10)]
    affinity = TaskAffinity()
    placed, left, free = simulate(tasks + tasks, {0: 4, 1: 4}, affinity)
    assert len(placed) == 8 and free == {0: 0, 1: 0}
    on = {}
    for task, aid in placed:
        on.setdefault(task, set()).add(aid)
    assert all(len(a) == 1 for a in on.values())
    # slots free up one at a time; each goes to a task its actor holds, or a new one
    while left:
        done_on = placed.pop(0)[1]
        more, left, _ = simulate(left, {0: 0, 1: 0, done_on: 1}, affinity)
        placed += more
        for task, aid in more:
            on.setdefault(task, set()).add(aid)
    assert all(len(a) == 1 for a in on.values()), on  # no reference computed twice
    assert sorted(affinity.tasks_per_actor().values()) == [5, 5]


def test_affine_actor_full_the_job_goes_elsewhere_and_both_hold_the_task():
    affinity = TaskAffinity()
    placed, _, _ = simulate(["a"] * 3, {0: 2, 1: 2}, affinity)
    assert placed == [("a", 0), ("a", 0), ("a", 1)]
    assert affinity.holders["a"] == {0, 1}


def test_dropped_actor_is_forgotten():
    affinity = TaskAffinity()
    for task, aid in [("a", 0), ("b", 0), ("b", 1), ("c", 1)]:
        affinity.add(task, aid)
    affinity.forget_actor(0)
    assert dict(affinity.holders) == {"b": {1}, "c": {1}}
    assert affinity.tasks_per_actor() == {1: 2}
    # 'a' is no longer held: it goes to the actor with the most free slots
    assert choose(["a"], {1: 1, 2: 3}, affinity.holders) == (0, 2)


def test_affinity_remembers_the_newest_tasks_only():
    affinity = TaskAffinity(max_tasks=2)
    for task in ("a", "b", "a", "c"):
        affinity.add(task, 0)
    assert list(affinity.holders) == ["a", "c"]  # 'b' was the least recently placed
