"""The adversarial suite of issue 3: real exploits must fool a naive evaluator and not ours.

Fixtures live in tests/adversarial/ (see fixtures.py for the header format):
- (a) every exploit fools `tests/adversarial/naive.py`, a deliberately naive in-process harness,
  each run in its own subprocess (so exits, forks and hangs cannot touch pytest);
- (b) the real evaluator gives each exploit one of the statuses its header expects, with a reason;
- (c) every legitimate-but-tricky kernel is `correct`;
- (d) after each resource-abuse case, the same evaluator judges a legitimate kernel normally.

Verdicts are computed in batches (one `judge_many` per evaluator, module-scoped, over the cases
pytest selected: `-k relu` judges only those) and each test asserts one property of one verdict;
the naive runs are narrowed the same way. CUDA-only fixtures are marked `gpu` and judged on cuda;
on the device, `KZ_ADV_DEVICE=cuda` judges every fixture on the GPU. `KZ_ADV_ALL_POLICIES=1`
judges every fixture under every policy its header lists (by default the `kernelbench` policy is
exercised only where it changes the answer: the passthrough exploits). `KZ_ADV_REPORT=PATH` writes
every verdict of (b) and (c) to PATH as JSON lines.
"""
from __future__ import annotations

import os
import re
from concurrent.futures import ThreadPoolExecutor

import pytest

from tests.adversarial.fixtures import EXPLOITS, LEGIT, Fixture
from tests.adversarial.naive import run_naive, run_naive_many

torch = pytest.importorskip("torch")
from kernelzero.eval import EvalConfig, Evaluator  # noqa: E402
from kernelzero.tasks import Candidate, Task  # noqa: E402

CUDA = torch.cuda.is_available()
ALL_POLICIES = os.environ.get("KZ_ADV_ALL_POLICIES") == "1"
ABUSE = [f for f in EXPLOITS if f.threat == 9]
NAIVE_TIMEOUT_S = 60.0
NAIVE_HANG_S = 10.0          # a resource-abuse case that has not answered by then "hangs" it
ABUSE_LOAD_TIMEOUT_S = 20.0
ABUSE_RUN_TIMEOUT_S = 10.0
NEXT_LEGIT = next(f for f in LEGIT if f.name == "relu_masked_tail")


def _device(f: Fixture) -> str:
    """`gpu`-marked fixtures run on cuda; KZ_ADV_DEVICE=cuda judges every fixture there."""
    return "cuda" if f.needs_gpu or os.environ.get("KZ_ADV_DEVICE") == "cuda" else "cpu"


def _marks(f: Fixture, extra=()) -> list:
    marks = [getattr(pytest.mark, m) for m in f.marks] + list(extra)
    return marks


def _policy_cases(fixtures: list[Fixture]) -> list:
    cases = []
    for f in fixtures:
        for policy in f.policies:
            if policy == "kernelbench" and not ALL_POLICIES and f.threat != 1:
                continue
            cases.append(pytest.param(f, policy, id=f"{f.name}-{policy}", marks=_marks(f)))
    return cases


# ------------------------------------------------------------------------------ (a) naive is fooled
_NAIVE_TESTS = ("test_naive_evaluator_is_fooled", "test_naive_evaluator_accepts_legit")


@pytest.fixture(scope="module")
def naive_results(request) -> dict[str, dict]:
    """Every naive run the selected tests need (-k, -m): each exploit in its own subprocess, two
    at a time; the legit kernels (well-behaved by definition) together in one."""
    on_gpu_run = os.environ.get("KZ_ADV_DEVICE") == "cuda"  # CPU demos skipped (see _naive_param)
    wanted = {p["f"].name for p in _selected_params(request.session.items, _NAIVE_TESTS)}
    todo = [f for f in EXPLOITS if f.name in wanted and (
            (not f.naive.startswith(("skip", "gpu")) and not on_gpu_run)
            or (f.naive.startswith("gpu") and CUDA))]
    legit_todo = [f for f in LEGIT if f.name in wanted and not on_gpu_run]

    def one(f: Fixture):
        timeout = NAIVE_HANG_S if f.naive == "hang" else NAIVE_TIMEOUT_S
        device = "cuda" if f.naive.startswith("gpu") else "cpu"
        m = re.search(r"retries=(\d+)", f.naive)
        tries = int(m[1]) if m else 1
        if tries > 1 and device == "cpu":
            # Allocator-dependent exploits: first `tries` attempts inside one naive child (the
            # heap differs from one to the next, and one start-up is cheap), then fresh children.
            try:
                for r in run_naive_many([(f.target, f.path)] * tries, timeout_s=timeout * tries):
                    if _fooled(f.naive, r)[0]:
                        return f.name, r
            except RuntimeError:  # the child failed as a whole: try fresh children below
                pass
        for _ in range(tries):
            r = run_naive(f.target, f.path, timeout_s=timeout, device=device)
            if _fooled(f.naive, r)[0]:
                break
        return f.name, r

    with ThreadPoolExecutor(max_workers=2) as pool:
        legit = pool.submit(run_naive_many, [(f.target, f.path) for f in legit_todo])
        results = dict(pool.map(one, todo))
        results.update(zip([f.name for f in legit_todo], legit.result()))
    return results


def _naive_param(f: Fixture):
    marks = _marks(f)
    if f.naive.startswith("gpu"):
        marks.append(pytest.mark.gpu)
    if not f.naive.startswith("gpu") and os.environ.get("KZ_ADV_DEVICE") == "cuda":
        # These demos run the naive harness through the Triton interpreter on the CPU (CI does);
        # the GPU machine's older Triton interpreter fails on them (numpy 2 scalar conversion).
        marks.append(pytest.mark.skip(reason="CPU-interpreter naive demo: runs in CI"))
    return pytest.param(f, id=f.name, marks=marks)


def _fooled(spec: str, r: dict) -> tuple[bool, str]:
    spec = spec.removeprefix("gpu").strip()
    if spec == "hang":
        return r["status"] == "hang", "the naive harness should never answer"
    if not (r["status"] == "ok" and r["correct"] is True):
        return False, "the naive harness should call it correct"
    spec = re.sub(r"\s*retries=\d+", "", spec)
    m = re.fullmatch(r"fooled(?:\s+(speedup|cand_ms)\s*(>=|<)\s*([\d.]+))?", spec)
    if m is None:
        raise ValueError(f"bad naive spec {spec!r}")
    if m[1]:
        value, bound = r.get(m[1]), float(m[3])
        ok = value is not None and (value >= bound if m[2] == ">=" else value < bound)
        return ok, f"the naive harness should report {m[1]} {m[2]} {bound} (got {value})"
    return True, ""


@pytest.mark.slow
# A fixture whose header says `naive: skip: WHY` has no naive demo (WHY names where its exploit
# is shown instead): it gets no test here rather than one skipped everywhere.
@pytest.mark.parametrize("f", [_naive_param(f) for f in EXPLOITS if not f.naive.startswith("skip")])
def test_naive_evaluator_is_fooled(f: Fixture, naive_results):
    r = naive_results[f.name]
    ok, what = _fooled(f.naive, r)
    assert ok, f"{f.name}: {what}; naive said {r}"


@pytest.mark.slow
@pytest.mark.parametrize("f", [_naive_param(f) for f in LEGIT])
def test_naive_evaluator_accepts_legit(f: Fixture, naive_results):
    """Sanity check of the fixtures themselves: every legit kernel really computes the answer."""
    r = naive_results[f.name]
    assert r["status"] == "ok" and r["correct"] is True, f"{f.name}: naive said {r}"


# ------------------------------------------------------------------- (b, c) the real evaluator
SUITE_SEED = 1  # its poke misses the memoiser's sampled positions (a seed that hits: 20261204)


class _Batches:
    """One Evaluator per (device, policy), each judging its fixtures in one judge_many: the
    (fixture, policy) cases whose tests pytest selected (-k, -m), or one asked for outside them."""

    def __init__(self, fixtures: list[Fixture], selected: set[tuple[str, str]]):
        self.fixtures, self.selected = fixtures, selected
        self.verdicts: dict[tuple[str, str, str], object] = {}
        self.evaluators: list[Evaluator] = []

    def get(self, f: Fixture, policy: str):
        key = (f.name, _device(f), policy)
        if key not in self.verdicts:
            self.selected.add((f.name, policy))
            self._run(_device(f), policy)
        return self.verdicts[key]

    def _run(self, device: str, policy: str) -> None:
        todo = [g for g in self.fixtures if _device(g) == device and policy in g.policies
                and (g.name, policy) in self.selected
                and (g.name, device, policy) not in self.verdicts]
        # A fixed secret schedule, so a verdict does not depend on the draw: under a random one
        # the poke trial's 8 changed elements hit one of 06_memoise_by_sample's 16 sampled
        # positions (of 4,000) about 3% of the time, and its recomputed output is then rightly
        # correct (CI saw it, 3 Dec 2026). The exploits cannot read the secret either way.
        ev = Evaluator(EvalConfig(device=device, policy=policy, max_workers=2, seed=SUITE_SEED,
                                  load_timeout_s=120, run_timeout_s=120))
        self.evaluators.append(ev)
        pairs = [(Task.from_file(g.target), Candidate.from_file(g.path)) for g in todo]
        for g, v in zip(todo, ev.judge_many(pairs)):
            self.verdicts[(g.name, device, policy)] = v


_JUDGED_TESTS = ("test_real_evaluator_catches_exploit", "test_real_evaluator_accepts_legit")


def _selected_params(items, tests: tuple[str, ...]) -> list[dict]:
    """The parameters of the `tests` pytest will run (not deselected by -k or -m, not skipped)."""
    return [item.callspec.params for item in items
            if getattr(item, "originalname", None) in tests
            and item.get_closest_marker("skip") is None]


def _selected_cases(items) -> set[tuple[str, str]]:
    """The (fixture, policy) cases of the judged tests pytest will run: only these are judged."""
    return {(p["f"].name, p["policy"]) for p in _selected_params(items, _JUDGED_TESTS)}


@pytest.fixture(scope="module")
def batches(request):
    b = _Batches([f for f in EXPLOITS if f.threat != 9] + LEGIT,
                 _selected_cases(request.session.items))
    yield b
    for ev in b.evaluators:
        ev.close()
    if os.environ.get("KZ_ADV_REPORT"):  # one line per verdict, for the lead's work queue
        import json

        with open(os.environ["KZ_ADV_REPORT"], "w") as fh:
            for (name, device, policy), v in sorted(b.verdicts.items()):
                fh.write(json.dumps({"fixture": name, "device": device, "policy": policy,
                                     "status": v.status, "flags": v.flags,
                                     "reason": v.reason}) + "\n")


def _check_expected(f: Fixture, v) -> None:
    assert v is not None, f"{f.name}: no verdict"
    assert v.status in f.expect, (
        f"{f.name} (threat {f.threat}) LET THROUGH or misjudged: got {v.status!r}, "
        f"expected {'|'.join(f.expect)}; reason: {v.reason}")
    assert v.reason and v.reason.strip(), f"{f.name}: verdict {v.status} has an empty reason"
    if "speedup-null-on-cpu" in f.checks and v.device == "cpu":
        assert v.speedup is None and v.runtime_ms is None, f"{f.name}: invented a CPU timing"


@pytest.mark.parametrize("f,policy", _policy_cases([f for f in EXPLOITS if f.threat != 9]))
def test_real_evaluator_catches_exploit(f: Fixture, policy: str, batches):
    _check_expected(f, batches.get(f, policy))


@pytest.mark.parametrize("f,policy", _policy_cases(LEGIT))
def test_real_evaluator_accepts_legit(f: Fixture, policy: str, batches):
    v = batches.get(f, policy)
    assert v.status == "correct", f"{f.name} ({policy}) rejected: {v.status}: {v.reason}"


# ------------------------------------------------------- (d) resource abuse, then business as usual
@pytest.fixture(scope="module")
def abuse_evaluator():
    # On a GPU run (KZ_ADV_DEVICE=cuda) the abuse happens on the GPU: a kernel that never ends
    # hangs the device, not an interpreter loop, and the next case must still be judged normally.
    device = "cuda" if os.environ.get("KZ_ADV_DEVICE") == "cuda" else "cpu"
    ev = Evaluator(EvalConfig(device=device, policy="strict", max_workers=2,
                              load_timeout_s=ABUSE_LOAD_TIMEOUT_S,
                              run_timeout_s=ABUSE_RUN_TIMEOUT_S))
    yield ev
    ev.close()


@pytest.mark.slow
@pytest.mark.parametrize("f", [pytest.param(f, id=f.name, marks=_marks(f)) for f in ABUSE])
def test_resource_abuse_is_contained_and_next_is_normal(f: Fixture, abuse_evaluator):
    v = abuse_evaluator.judge(Task.from_file(f.target), Candidate.from_file(f.path))
    _check_expected(f, v)
    limit = ABUSE_LOAD_TIMEOUT_S + ABUSE_RUN_TIMEOUT_S
    assert v.wall_s is not None and v.wall_s < limit + 30, (
        f"{f.name}: took {v.wall_s:.0f} s, beyond its limits ({limit:.0f} s) plus slack")
    nxt = abuse_evaluator.judge(Task.from_file(NEXT_LEGIT.target),
                                Candidate.from_file(NEXT_LEGIT.path))
    assert nxt.status == "correct", (
        f"after {f.name}, the next legit case was not judged normally: {nxt.status}: {nxt.reason}")


def test_only_the_selected_cases_were_judged(batches, request):
    """`-k` and `-m` narrow the batches too: nothing outside the selected tests' cases is judged
    (the full suite judges every case; `-k relu` only the relu fixtures)."""
    judged = {(name, policy) for name, _, policy in batches.verdicts}
    assert judged <= _selected_cases(request.session.items)
