"""Benchmark metrics over verdict records: pass@k, fast_p, geometric-mean speedup, bootstrap CIs.

Covers: turning a flat list of per-sample records into the numbers a report shows. Each record is a
dict `{"task": str, "correct": bool, "speedup": float | None, "speedup_compile": float | None}`
(optionally `"status"`); `kernelzero.store.Store.records()` returns exactly that shape.
Does not cover: judging (the evaluator), storage (`store.py`) or rendering (`report.py`).

The rules, stated once:
- pass@k: the unbiased estimator `1 - C(n-c, k) / C(n, k)` (Chen et al. 2021), computed per task
  from that task's `n` samples and `c` correct ones, then averaged over tasks. k runs over
  1..min n (n = samples per task). When tasks have differing n, k stops at the smallest n and each
  task still uses all its own samples (the estimator is unbiased for any n >= k); the summary
  says so in `notes`.
- fast_p (KernelBench's definition): a sample is "fast at p" when it is correct AND its speedup
  over the baseline is strictly greater than p. Per task, the share of its samples that are fast at
  p; then the mean over tasks. A correct sample without a measured speedup counts as not fast
  (nothing was measured, nothing is claimed). Computed against the eager baseline (`speedup`) and
  the torch.compile baseline (`speedup_compile`). A baseline's fast_p is `None` ("not measured")
  when some sample is correct but no correct sample has that speedup (e.g. a CPU-only run).
- geomean speedup: exp(mean(log speedup)) over all correct samples that have a speedup, pooled
  across tasks; `None` when there are none.
- Confidence intervals: percentile bootstrap over tasks (resample tasks with replacement, recompute
  the metric on the resample), `n_boot` resamples from a fixed `seed`; the same resamples are used
  for every metric. Point estimates are never rounded; rounding is for display only.
"""
from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np

DEFAULT_PS: tuple[float, ...] = (0, 0.5, 0.8, 1, 1.5, 2)
_BOOT_CHUNK_CELLS = 4_000_000  # rows x tasks per bootstrap chunk (bounds memory at ~32 MB)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k for one task: 1 - C(n-c, k) / C(n, k), in the stable product form.

    C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i), which never forms a huge binomial.
    """
    if not (isinstance(n, int) and isinstance(c, int) and isinstance(k, int)):
        raise TypeError(f"pass_at_k needs integers, got n={n!r}, c={c!r}, k={k!r}")
    if n < 1 or not 0 <= c <= n or not 1 <= k <= n:
        raise ValueError("pass_at_k needs n >= 1, 0 <= c <= n and 1 <= k <= n; "
                         f"got n={n}, c={c}, k={k}")
    if n - c < k:  # every k-subset contains a correct sample
        return 1.0
    prob_all_wrong = 1.0
    for i in range(n - c + 1, n + 1):
        prob_all_wrong *= 1.0 - k / i
    return 1.0 - prob_all_wrong


def p_label(p: float) -> str:
    """The key under which fast_p for threshold p is stored: 0 -> "0", 0.5 -> "0.5"."""
    return f"{p:g}"


@dataclass
class SummaryConfig:
    """What `summarize` computes."""

    ks: tuple[int, ...] | None = None   # pass@k values of k; None = every k from 1 to min n
    ps: tuple[float, ...] = DEFAULT_PS  # fast_p thresholds (speedup must be strictly greater)
    n_boot: int = 1000                  # bootstrap resamples for the CIs; 0 = no CIs
    seed: int = 0                       # seed of the bootstrap resampling
    ci_level: float = 0.95              # two-sided coverage of the percentile interval

    def __post_init__(self):
        if self.ks is not None:
            self.ks = tuple(self.ks)
            bad = [k for k in self.ks if not isinstance(k, int) or isinstance(k, bool) or k < 1]
            if bad:
                raise ValueError(f"ks must be positive integers; got {bad}")
        self.ps = tuple(float(p) for p in self.ps)
        if any(not math.isfinite(p) or p < 0 for p in self.ps):
            raise ValueError(f"ps must be finite and >= 0; got {self.ps}")
        if not isinstance(self.n_boot, int) or self.n_boot < 0:
            raise ValueError(f"n_boot must be an integer >= 0; got {self.n_boot!r}")
        if not 0 < self.ci_level < 1:
            raise ValueError(f"ci_level must lie in (0, 1); got {self.ci_level}")


def _check_speedup(value, name: str, i: int) -> float | None:
    if value is None:
        return None
    x = float(value)
    if not math.isfinite(x) or x <= 0:
        raise ValueError(f"record {i}: {name} must be a finite positive number or None; "
                         f"got {value!r}")
    return x


def _group(records: list[dict]) -> dict[str, list[tuple[bool, float | None, float | None]]]:
    """task -> [(correct, speedup, speedup_compile)], first-seen order; speedups only if correct."""
    tasks: dict[str, list] = {}
    for i, r in enumerate(records):
        if "task" not in r or "correct" not in r:
            raise ValueError(f"record {i} needs 'task' and 'correct' keys; got {sorted(r)}")
        correct = bool(r["correct"])
        s = _check_speedup(r.get("speedup"), "speedup", i)
        sc = _check_speedup(r.get("speedup_compile"), "speedup_compile", i)
        tasks.setdefault(str(r["task"]), []).append((correct, s if correct else None,
                                                       sc if correct else None))
    return tasks


class _Bootstrap:
    """Percentile-bootstrap CIs over tasks, with one set of resamples shared by every metric.

    A resample is a vector of multinomial counts w (how often each task was drawn), so a mean over
    tasks is w @ v / T and a pooled ratio is (w @ num) / (w @ den).
    """

    def __init__(self, n_tasks: int, n_boot: int, seed: int, level: float):
        self.n_tasks, self.n_boot, self.seed = n_tasks, n_boot, seed
        self.q = (100 * (1 - level) / 2, 100 * (1 + level) / 2)

    def _weights(self):
        rng = np.random.default_rng(self.seed)
        rows = max(1, _BOOT_CHUNK_CELLS // max(1, self.n_tasks))
        probs = np.full(self.n_tasks, 1.0 / self.n_tasks)
        done = 0
        while done < self.n_boot:
            b = min(rows, self.n_boot - done)
            yield rng.multinomial(self.n_tasks, probs, size=b).astype(np.float64)
            done += b

    def means(self, columns: np.ndarray) -> list[tuple[float | None, float | None]]:
        """CI of the mean over tasks of each column of `columns` (tasks x metrics)."""
        if self.n_boot == 0 or columns.shape[1] == 0:
            return [(None, None)] * columns.shape[1]
        stats = np.concatenate([w @ columns / self.n_tasks for w in self._weights()])
        lo, hi = np.percentile(stats, self.q, axis=0)
        return [(float(a), float(b)) for a, b in zip(lo, hi)]

    def log_ratio(self, num: np.ndarray, den: np.ndarray) -> tuple[float | None, float | None]:
        """CI of exp(sum(num) / sum(den)) over resampled tasks (resamples with den = 0 dropped)."""
        if self.n_boot == 0:
            return None, None
        parts = []
        for w in self._weights():
            d = w @ den
            with np.errstate(invalid="ignore", divide="ignore"):
                parts.append(np.where(d > 0, (w @ num) / np.where(d > 0, d, 1), np.nan))
        stats = np.concatenate(parts)
        stats = stats[~np.isnan(stats)]
        if stats.size == 0:
            return None, None
        lo, hi = np.percentile(stats, self.q)
        return float(math.exp(lo)), float(math.exp(hi))


def paired_difference(before: dict[str, float], after: dict[str, float], n_boot: int = 2000,
                      seed: int = 0, level: float = 0.95) -> dict:
    """after - before over the tasks both have (each a task -> score map, e.g. greedy
    correctness 0/1), with a percentile-bootstrap CI over tasks: the same tasks are resampled for
    both, so the CI is the paired one (much narrower than two marginal CIs side by side).
    `gained` / `lost`: tasks whose score rose / fell."""
    tasks = sorted(set(before) & set(after))
    if not tasks:
        return {"delta": None, "lo": None, "hi": None, "n_tasks": 0, "gained": 0, "lost": 0}
    d = np.array([[float(after[t]) - float(before[t])] for t in tasks])
    (lo, hi), = _Bootstrap(len(tasks), n_boot, seed, level).means(d)
    return {"delta": float(d.mean()), "lo": lo, "hi": hi, "n_tasks": len(tasks),
            "gained": int((d > 0).sum()), "lost": int((d < 0).sum())}


def _metric(value, ci) -> dict:
    return {"value": None if value is None else float(value), "lo": ci[0], "hi": ci[1]}


def summarize(records: list[dict], ks=None, ps=DEFAULT_PS, n_boot: int = 1000, seed: int = 0,
              ci_level: float = 0.95) -> dict:
    """Summarize per-sample records into a JSON-serialisable dict (see the module docstring).

    Keys: n_records, n_tasks, samples_per_task {min, max}, n_correct, statuses (when records
    carry "status"), ci {level, n_boot, seed, method}, pass_at_k {"k": metric},
    fast_p {"eager"|"compile": {"p": metric} | None}, geomean_speedup {"eager"|"compile":
    metric + "n"}, timed {"eager"|"compile": correct samples with that speedup},
    speedups {"eager"|"compile": [speedup of each correct sample that has one]}, notes [str].
    A metric is {"value", "lo", "hi"}; lo/hi are None without bootstrap (n_boot = 0). One function
    on purpose: it computes the keys above in that order, each in a few lines.
    """
    cfg = SummaryConfig(ks=ks, ps=ps, n_boot=n_boot, seed=seed, ci_level=ci_level)
    records = list(records)
    if not records:
        raise ValueError("no records to summarize")
    tasks = _group(records)
    samples = list(tasks.values())
    n_tasks = len(samples)
    ns = np.array([len(s) for s in samples])
    cs = np.array([sum(c for c, _, _ in s) for s in samples])
    n_min, n_max = int(ns.min()), int(ns.max())
    notes: list[str] = []
    if n_min != n_max:
        notes.append(f"tasks have differing sample counts ({n_min}..{n_max}); pass@k is reported "
                     f"for k <= {n_min} (the smallest n) and each task uses all its own samples")
    ks_used = list(range(1, n_min + 1)) if cfg.ks is None else sorted(set(cfg.ks))
    dropped = [k for k in ks_used if k > n_min]
    if dropped:
        notes.append(f"pass@k skipped for k={dropped}: some task has only {n_min} samples")
        ks_used = [k for k in ks_used if k <= n_min]

    boot = _Bootstrap(n_tasks, cfg.n_boot, cfg.seed, cfg.ci_level)
    summary: dict = {
        "n_records": len(records), "n_tasks": n_tasks,
        "samples_per_task": {"min": n_min, "max": n_max}, "n_correct": int(cs.sum()),
        "ci": {"level": cfg.ci_level, "n_boot": cfg.n_boot, "seed": cfg.seed,
               "method": "percentile bootstrap over tasks"},
    }
    if any("status" in r for r in records):
        counts = Counter(str(r.get("status", "unknown")) for r in records)
        summary["statuses"] = dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))

    pk = np.array([[pass_at_k(int(n), int(c), k) for k in ks_used] for n, c in zip(ns, cs)])
    pk = pk.reshape(n_tasks, len(ks_used))
    summary["pass_at_k"] = {str(k): _metric(pk[:, j].mean(), ci)
                            for j, (k, ci) in enumerate(zip(ks_used, boot.means(pk)))}

    summary["fast_p"], summary["geomean_speedup"] = {}, {}
    summary["timed"], summary["speedups"] = {}, {}
    for name, col in (("eager", 1), ("compile", 2)):
        speeds = [[x[col] for x in s if x[0] and x[col] is not None] for s in samples]
        flat = [v for per_task in speeds for v in per_task]
        summary["timed"][name] = len(flat)
        summary["speedups"][name] = flat
        if not flat and cs.sum() > 0:
            summary["fast_p"][name] = None
            notes.append(f"no correct sample has a {name} speedup: fast_p and geomean vs {name} "
                         "not measured")
        else:
            fast = np.array([[sum(v > p for v in sp) / n for p in cfg.ps]
                             for sp, n in zip(speeds, ns)]).reshape(n_tasks, len(cfg.ps))
            summary["fast_p"][name] = {p_label(p): _metric(fast[:, j].mean(), ci)
                                       for j, (p, ci) in enumerate(zip(cfg.ps, boot.means(fast)))}
            if 0 < len(flat) < cs.sum():
                notes.append(f"{int(cs.sum()) - len(flat)} of {int(cs.sum())} correct samples have "
                             f"no {name} speedup; they count as not fast")
        num = np.array([sum(math.log(v) for v in sp) for sp in speeds])
        den = np.array([len(sp) for sp in speeds], dtype=np.float64)
        point = math.exp(num.sum() / den.sum()) if den.sum() > 0 else None
        ci = boot.log_ratio(num, den) if point is not None else (None, None)
        summary["geomean_speedup"][name] = {**_metric(point, ci), "n": len(flat)}
    summary["notes"] = notes
    return summary
