"""compare_outputs on float tensors: the finiteness rules and the error figures, read in one
transfer on the usual path and recomputed on the finite positions when something is not finite."""
import math

import torch

from kernelzero.eval.compare import compare_outputs
from kernelzero.eval.config import EvalConfig
from kernelzero.eval.transport.tensorio import TensorOut

TOL = EvalConfig().tolerance_for  # fp32 1e-4


def _cmp(ref, cand):
    return compare_outputs(TensorOut(ref, "cpu", True, []), TensorOut(cand, "cpu", True, []),
                           TOL, "cpu")


def test_within_tolerance_reports_its_errors():
    r = torch.linspace(1, 2, 1000)
    res = _cmp(r, r + 5e-5)
    assert res.ok and math.isclose(res.max_abs_err, 5e-5, rel_tol=0.05)
    assert 0 < res.max_rel_err <= 5e-5


def test_beyond_tolerance_names_the_first_index():
    r = torch.ones(100)
    c = r.clone()
    c[37] = 1.01
    res = _cmp(r, c)
    assert not res.ok and res.flags == ["value_mismatch"] and "flat index 37" in res.reason


def test_nan_where_the_reference_is_finite():
    r = torch.ones(10)
    c = r.clone()
    c[3] = float("nan")
    res = _cmp(r, c)
    assert not res.ok and res.flags == ["non_finite"] and "1 NaN/Inf" in res.reason


def test_matching_non_finite_positions_pass_and_errors_come_from_the_rest():
    r = torch.tensor([1.0, float("nan"), float("inf"), -float("inf"), 2.0])
    c = r.clone()
    c[4] = 2.0001
    res = _cmp(r, c)
    assert res.ok and math.isclose(res.max_abs_err, 1e-4, rel_tol=0.05)
    c[2] = -float("inf")  # the wrong signed infinity
    res = _cmp(r, c)
    assert not res.ok and res.flags == ["value_mismatch"] and "NaN/Inf" in res.reason
    # nothing finite at all, on both sides alike
    r = torch.full((4,), float("nan"))
    assert _cmp(r, r.clone()).ok


def test_an_all_zero_answer_fails_the_norm_check():
    r = torch.full((1000,), 1e-5)  # every element within atol of zero, the whole output not
    res = _cmp(r, torch.zeros(1000))
    assert not res.ok and res.flags == ["relative_norm_mismatch"]


def test_float64_and_complex_keep_their_precision():
    r = torch.linspace(1, 2, 100, dtype=torch.float64)
    assert not _cmp(r, r + 1e-6).ok  # float64's tolerance is 1e-7
    z = torch.complex(torch.ones(8), torch.zeros(8))
    assert _cmp(z, z.clone()).ok
    w = z.clone()
    w[2] = complex(1, 0.5)
    assert not _cmp(z, w).ok


def test_shared_mappings_keep_one_storage_per_allocation():
    """One storage keeps an allocation mapped for the rest of a decode (cuda_ipc.SharedMappings)."""
    from kernelzero.eval.transport.cuda_ipc import SharedMappings
    m = SharedMappings()
    first, other = torch.UntypedStorage(1024), torch.UntypedStorage(64)
    m.keep("aa", first)
    m.keep("aa", torch.UntypedStorage(16))
    m.keep("bb", other)
    assert m._kept == {"aa": first, "bb": other}
    m.clear()
    assert m._kept == {} and m.map_s == 0.0


def _out(t):
    return TensorOut(t, "cpu", True, [])


def test_compare_many_reads_once_and_keeps_each_pairs_own_first_failure(monkeypatch):
    from kernelzero.eval import compare
    r = torch.linspace(1, 2, 64)
    bad = r.clone()
    bad[5] = 9.0
    pairs = [(_out(r), _out(r + 1e-6)),                      # passes
             (_out(r), _out(bad)),                           # value mismatch at 5
             (_out(r), _out(r[:10])),                        # shape
             ((_out(r), _out(r)), (_out(bad), "x")),         # item 0's values come first
             ((_out(r),), (_out(torch.arange(64)),)),        # dtype
             (_out(torch.arange(4)), _out(torch.tensor([0, 1, 5, 3])))]  # integers
    alone = [compare_outputs(a, b, TOL, "cpu") for a, b in pairs]
    reads = []
    real = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda self: reads.append(1) or real(self))
    together = compare.compare_many(pairs, TOL, "cpu")
    assert len(reads) == 1  # every figure of every pair in one transfer
    assert [(c.ok, c.reason, c.flags) for c in together] == \
        [(c.ok, c.reason, c.flags) for c in alone]
    assert [c.ok for c in together] == [True, False, False, False, False, False]
    assert "flat index 5" in together[3].reason and together[3].flags == ["value_mismatch"]
    assert "1 of 4 integer values differ" in together[5].reason


def test_check_trials_rules_on_the_first_failing_trial():
    from kernelzero.eval.trial_results import TrialResult
    from kernelzero.eval.rulings import check_trials
    from kernelzero.eval.verdict import Verdict
    cfg = EvalConfig()
    r = torch.linspace(1, 2, 32)

    def trial(out, digest=1.0, mutated=(), after=None):
        return TrialResult(outputs=_out(out), digest=digest, mutated=list(mutated),
                           inputs_after=after)
    exp = trial(r)
    good = [(exp, trial(r + 1e-6), f"trial {n}") for n in range(3)]
    ok = check_trials(cfg, good, "triton")
    assert isinstance(ok, tuple) and 0 < ok[0] < 1e-5
    cases = good[:1] + [(exp, trial(r * 2), "trial 2"), (exp, trial(r, digest=7.0), "trial 3")]
    v = check_trials(cfg, cases, "triton")
    assert isinstance(v, Verdict) and v.status == "incorrect" and v.trials_passed == 1
    assert v.reason.startswith("trial 2: ")
    v = check_trials(cfg, [good[0], (exp, trial(r, digest=7.0), "trial 2")], "triton")
    assert v.status == "rejected" and v.flags == ["input_generation_tampered"]
    # an in-place update: missing, or wrong, is a failure of its own
    upd = trial(r, mutated=[0], after=[_out(r + 1)])
    v = check_trials(cfg, [(upd, trial(r), "trial 1")], "triton")
    assert v.flags == ["input_mutation_missing"]
    v = check_trials(cfg, [(upd, trial(r, mutated=[0], after=[_out(r)]), "trial 1")], "triton")
    assert v.status == "incorrect" and "in-place updated input" in v.reason
    assert check_trials(cfg, [(upd, trial(r, mutated=[0], after=[_out(r + 1)]), "t")], "triton")


def test_chunked_comparison_gives_the_whole_tensor_figures(monkeypatch):
    """Large outputs are compared CHUNK elements at a time (no scratch the size of an output):
    the figures, the failure and its first index are those of one whole-tensor pass."""
    from kernelzero.eval import compare
    g = torch.Generator().manual_seed(0)
    r = torch.randn(1000, generator=g) * 3
    r[500] = float("nan")
    c = r + torch.randn(1000, generator=g) * 1e-5
    c[617] += 1.0  # the only value over the tolerance, in a late chunk
    c[500] = float("nan")
    whole_ok, whole_bad = _cmp(r[:400], c[:400]), _cmp(r, c)
    monkeypatch.setattr(compare, "CHUNK", 64)
    ok, bad = _cmp(r[:400], c[:400]), _cmp(r, c)
    assert ok.ok and whole_ok.ok
    assert math.isclose(ok.max_abs_err, whole_ok.max_abs_err, rel_tol=1e-6)
    assert math.isclose(ok.max_rel_err, whole_ok.max_rel_err, rel_tol=1e-6)
    assert not bad.ok and bad.reason == whole_bad.reason
    assert "1 of 1000 values" in bad.reason and "first at flat index 616" in bad.reason
