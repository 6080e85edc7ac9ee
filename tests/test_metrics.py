"""pass@k, fast_p, geomean and bootstrap CIs against hand-computed values."""
from __future__ import annotations

import json
import math
import random
from fractions import Fraction
from math import comb

import pytest

from kernelzero import metrics
from kernelzero.metrics import pass_at_k, summarize


def exact_pass_at_k(n, c, k) -> Fraction:
    return 1 - Fraction(comb(n - c, k), comb(n, k))


def rec(task, correct, speedup=None, speedup_compile=None, **kw):
    return {"task": task, "correct": correct, "speedup": speedup,
            "speedup_compile": speedup_compile, **kw}


# -- pass@k -------------------------------------------------------------------------------------

@pytest.mark.parametrize("k, expected", [(1, Fraction(2, 5)), (2, Fraction(7, 10)),
                                         (3, Fraction(9, 10)), (4, Fraction(1)), (5, Fraction(1))])
def test_pass_at_k_n5_c2_exact(k, expected):
    assert exact_pass_at_k(5, 2, k) == expected  # the hand computation itself
    assert pass_at_k(5, 2, k) == pytest.approx(float(expected), abs=1e-15)


def test_pass_at_k_edges_and_large_n():
    assert pass_at_k(10, 0, 3) == 0.0
    assert pass_at_k(10, 10, 3) == 1.0
    assert pass_at_k(1000, 1, 1) == pytest.approx(0.001, rel=1e-12)
    # binomials here have thousands of digits; the product form stays exact to float precision
    assert pass_at_k(5000, 7, 200) == pytest.approx(float(exact_pass_at_k(5000, 7, 200)), rel=1e-10)


@pytest.mark.parametrize("n, c, k", [(0, 0, 1), (5, 6, 1), (5, -1, 1), (5, 2, 0), (5, 2, 6)])
def test_pass_at_k_rejects_impossible_arguments(n, c, k):
    with pytest.raises(ValueError):
        pass_at_k(n, c, k)


# -- a hand-made set -----------------------------------------------------------------------------

HAND = [
    rec("A", True, 2.5, status="correct"), rec("A", True, 0.9, status="correct"),
    rec("A", False, status="incorrect"), rec("A", True, None, status="correct"),
    rec("B", True, 1.2, 0.6, status="correct"), rec("B", True, 1.0, 1.6, status="correct"),
    rec("C", False, status="timeout"), rec("C", False, status="compile_error"),
]


def test_hand_made_pass_at_k_and_counts():
    s = summarize(HAND, n_boot=0)
    assert (s["n_tasks"], s["n_records"], s["n_correct"]) == (3, 8, 5)
    assert s["samples_per_task"] == {"min": 2, "max": 4}
    assert list(s["pass_at_k"]) == ["1", "2"]  # k stops at the smallest n
    assert s["pass_at_k"]["1"]["value"] == pytest.approx(7 / 12)   # (3/4 + 1 + 0) / 3
    assert s["pass_at_k"]["2"]["value"] == pytest.approx(2 / 3)    # (1 + 1 + 0) / 3
    assert s["pass_at_k"]["1"]["lo"] is None  # no bootstrap asked for
    assert any("differing sample counts" in n for n in s["notes"])
    assert s["statuses"] == {"correct": 5, "compile_error": 1, "incorrect": 1, "timeout": 1}


def test_hand_made_fast_p_per_sample_then_per_task():
    s = summarize(HAND, n_boot=0)
    eager = {p: m["value"] for p, m in s["fast_p"]["eager"].items()}
    # A: 2.5, 0.9 of 4 samples (the untimed correct one is not fast); B: 1.2, 1.0 of 2; C: 0 of 2
    assert eager == pytest.approx({"0": 0.5, "0.5": 0.5, "0.8": 0.5, "1": 0.25,
                                   "1.5": 1 / 12, "2": 1 / 12})
    compile_ = {p: m["value"] for p, m in s["fast_p"]["compile"].items()}
    # only B has compile speedups (0.6, 1.6): 1, 1, .5, .5, .5, 0, divided over 3 tasks
    assert compile_ == pytest.approx({"0": 1 / 3, "0.5": 1 / 3, "0.8": 1 / 6, "1": 1 / 6,
                                      "1.5": 1 / 6, "2": 0.0})
    assert any("1 of 5 correct samples have no eager speedup" in n for n in s["notes"])


def test_hand_made_geomean():
    s = summarize(HAND, n_boot=0)
    g = s["geomean_speedup"]
    assert g["eager"]["value"] == pytest.approx((2.5 * 0.9 * 1.2 * 1.0) ** 0.25)
    assert g["eager"]["n"] == 4
    assert g["compile"]["value"] == pytest.approx(math.sqrt(0.6 * 1.6))
    assert s["speedups"]["eager"] == [2.5, 0.9, 1.2, 1.0]


def test_speedup_of_an_incorrect_sample_is_ignored():
    s = summarize([rec("A", False, 50.0), rec("A", True, 2.0)], n_boot=0)
    assert s["geomean_speedup"]["eager"]["value"] == pytest.approx(2.0)
    assert s["fast_p"]["eager"]["1"]["value"] == pytest.approx(0.5)


def test_untimed_run_reports_not_measured_and_all_wrong_reports_zero():
    cpu = summarize([rec("A", True), rec("B", False)], n_boot=0)
    assert cpu["fast_p"] == {"eager": None, "compile": None}
    assert cpu["geomean_speedup"]["eager"]["value"] is None
    wrong = summarize([rec("A", False), rec("B", False)], n_boot=0)
    assert all(m["value"] == 0.0 for m in wrong["fast_p"]["eager"].values())


def test_explicit_ks_beyond_min_n_are_dropped_with_a_note():
    s = summarize([rec("A", True), rec("A", False), rec("B", True), rec("B", True)], ks=[1, 2, 5],
                  n_boot=0)
    assert list(s["pass_at_k"]) == ["1", "2"]
    assert any("k=[5]" in n for n in s["notes"])


@pytest.mark.parametrize("bad", [{"task": "A"}, rec("A", True, 0.0), rec("A", True, float("inf")),
                                 rec("A", True, -1.0), rec("A", True, 1.0, float("nan"))])
def test_bad_records_raise(bad):
    with pytest.raises(ValueError):
        summarize([bad], n_boot=0)


def test_empty_and_bad_config_raise():
    with pytest.raises(ValueError):
        summarize([])
    with pytest.raises(ValueError):
        summarize(HAND, n_boot=-1)
    with pytest.raises(ValueError):
        summarize(HAND, ks=[0])


# -- bootstrap CIs --------------------------------------------------------------------------------

def random_records(n_tasks, n_samples, seed):
    rng = random.Random(seed)
    out = []
    for t in range(n_tasks):
        p = rng.random()
        for _ in range(n_samples):
            ok = rng.random() < p
            sp = rng.lognormvariate(0, 0.7) if ok else None
            out.append(rec(f"t{t}", ok, sp, sp * rng.uniform(0.5, 1.2) if sp else None))
    return out


def all_metrics(s):
    yield from s["pass_at_k"].values()
    for table in s["fast_p"].values():
        yield from table.values()
    yield from s["geomean_speedup"].values()


def test_ci_contains_point_estimate_and_is_deterministic():
    recs = random_records(40, 5, seed=1)
    s = summarize(recs, n_boot=500, seed=3)
    for m in all_metrics(s):
        assert m["lo"] <= m["value"] + 1e-12 and m["value"] <= m["hi"] + 1e-12, m
    assert summarize(recs, n_boot=500, seed=3) == s
    assert summarize(recs, n_boot=500, seed=4)["pass_at_k"]["1"] != s["pass_at_k"]["1"]
    json.dumps(s, allow_nan=False)  # JSON-serialisable, no NaN


def test_ci_width_matches_normal_theory_and_shrinks_with_more_tasks():
    # 100 tasks, half always right, half always wrong: pass@1 = 0.5, se = 0.05, 95% CI ~ +-0.098
    recs = [rec(f"t{t}", t % 2 == 0) for t in range(100)]
    m = summarize(recs, n_boot=2000)["pass_at_k"]["1"]
    assert 0.16 < m["hi"] - m["lo"] < 0.24
    small = random_records(10, 4, seed=2)
    big = [dict(r, task=f"{r['task']}#{i}") for i in range(10) for r in small]  # same, x10 tasks
    ws = summarize(small, n_boot=1000)
    wb = summarize(big, n_boot=1000)
    for key in ("1", "4"):
        assert wb["pass_at_k"][key]["value"] == pytest.approx(ws["pass_at_k"][key]["value"])
        width = lambda s: s["pass_at_k"][key]["hi"] - s["pass_at_k"][key]["lo"]  # noqa: E731
        if width(ws) > 0:
            assert width(wb) < 0.6 * width(ws)
    gs, gb = ws["geomean_speedup"]["eager"], wb["geomean_speedup"]["eager"]
    assert gb["hi"] - gb["lo"] < 0.6 * (gs["hi"] - gs["lo"])


def test_bootstrap_chunking_does_not_change_the_answer(monkeypatch):
    recs = random_records(30, 3, seed=5)
    whole = summarize(recs, n_boot=300, seed=7)
    monkeypatch.setattr(metrics, "_BOOT_CHUNK_CELLS", 30 * 7)  # 7 resamples per chunk
    assert summarize(recs, n_boot=300, seed=7) == whole


# -- paired differences -------------------------------------------------------------------------

def test_paired_difference_counts_gains_and_losses_over_common_tasks():
    before = {"a": 0, "b": 0, "c": 1, "d": 1, "only_before": 1}
    after = {"a": 1, "b": 1, "c": 1, "d": 0, "only_after": 0}
    d = metrics.paired_difference(before, after, n_boot=500)
    assert d["n_tasks"] == 4 and d["gained"] == 2 and d["lost"] == 1
    assert d["delta"] == pytest.approx(0.25)
    assert d["lo"] <= d["delta"] <= d["hi"]
    assert metrics.paired_difference({}, after)["delta"] is None


def test_paired_ci_excludes_zero_where_two_marginal_cis_overlap():
    """60 tasks, half solved before; after, 6 more solved and none lost. Resampling tasks for both
    rounds together keeps the CI above 0; two marginal CIs (about +-13 points each) overlap."""
    before = {f"t{i}": float(i % 2) for i in range(60)}
    after = {t: 1.0 if (v or i < 12) else 0.0 for i, (t, v) in enumerate(before.items())}
    d = metrics.paired_difference(before, after, n_boot=2000, seed=0)
    assert d["gained"] == 6 and d["lost"] == 0 and d["delta"] == pytest.approx(0.1)
    assert d["lo"] > 0
    sb = summarize([rec(t, bool(v)) for t, v in before.items()], ks=[1], n_boot=2000)["pass_at_k"]["1"]
    sa = summarize([rec(t, bool(v)) for t, v in after.items()], ks=[1], n_boot=2000)["pass_at_k"]["1"]
    assert sa["lo"] < sb["hi"]
    flipped = metrics.paired_difference(after, before, n_boot=2000, seed=0)
    assert flipped["delta"] == pytest.approx(-0.1) and flipped["hi"] < 0
