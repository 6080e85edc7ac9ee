"""The tasks the Coder trains on besides the Proposer's pool (`TrainConfig.seed_tasks`): a task
directory, or draws of the op family's training modules, `family:N[:ops=A-B]`, several joined by
commas; never a held-out task.

Does not cover the pool (kernelzero/propose/task_pool.py) or the held-out sets (heldout.py).
"""
from __future__ import annotations

from pathlib import Path


def seed_task_specs(spec: str) -> list[tuple[str, int, dict]]:
    """`seed_tasks` read into (kind, n, family overrides) items: ("family", N, {"min_ops": A,
    "max_ops": B} or {}) per `family:N[:ops=A-B]`, ("dir", 0, {}) for anything else (a task
    directory, kept whole in the first item's place)."""
    items = []
    for part in (p.strip() for p in spec.split(",")):
        if not part.startswith("family:"):
            if "," in spec:
                raise ValueError(f"seed_tasks={spec!r}: only family:N items join with commas")
            return [("dir", 0, {})]
        bits = part.split(":")
        try:
            n = int(bits[1])
            over = {}
            for opt in bits[2:]:
                key, _, val = opt.partition("=")
                if key != "ops":
                    raise ValueError(key)
                lo, _, hi = val.partition("-")
                over = {"min_ops": int(lo), "max_ops": int(hi or lo)}
                if not 1 <= over["min_ops"] <= over["max_ops"]:
                    raise ValueError(val)
            if n < 0:
                raise ValueError(n)
        except (IndexError, ValueError):
            raise ValueError(f"seed_tasks item {part!r}: write family:N or family:N:ops=A-B "
                             "(N >= 0 modules, chains of A to B ops, 1 <= A <= B)") from None
        items.append(("family", n, over))
    return items


def seed_tasks(spec: str | None, family: dict, seed: int, held: set[str], default_dir: Path) -> list:
    """The tasks `spec` names, minus any whose content hash is in `held` (held out means held
    out). `family` is cold_start.family, which each `family:` item's `ops` overrides; item k
    draws from a stream of its own (seed + 17 + 1000 k), so adding an item leaves the others'
    modules as they were."""
    from kernelzero.tasks import Task, load_tasks

    if spec and spec.startswith("family:"):
        from kernelzero.family import FamilyConfig
        from kernelzero.family.holdout import training_modules
        tasks = []
        for k, (_, n, over) in enumerate(seed_task_specs(spec)):
            mods = training_modules(n, seed=seed + 17 + 1000 * k, config=FamilyConfig(**{**family, **over}))
            tasks += [Task(source=m.source, name=f"seed_{len(tasks) + i}_{m.name}", meta=m.meta)
                      for i, m in enumerate(mods)]
    else:
        tasks = load_tasks(spec or default_dir)
    return [t for t in tasks if t.hash not in held]
