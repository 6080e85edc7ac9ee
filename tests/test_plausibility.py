"""The plausibility checks of a timing (kernelzero/eval/plausibility.py): the roofline floor and
the judge's wall-clock cross-check (`timing_unconfirmed`)."""
from kernelzero.eval.plausibility import roofline_floor_ms, unconfirmed_saving
from kernelzero.eval.reference import ReferenceRun
from kernelzero.eval.verdict import Timing


def _t(ms: float, n: int = 100) -> Timing:
    return Timing(median_ms=ms, iqr_ms=0.0, mean_ms=ms, min_ms=ms, n=n)


def _ref(ms: float, wall_per_call: float) -> ReferenceRun:
    return ReferenceRun(True, timing=_t(ms), time_wall_ms_per_call=wall_per_call)


def test_a_saving_the_wall_clock_does_not_show_is_unconfirmed():
    ref = _ref(1.0, wall_per_call=1.5)
    # claims 0.9 ms saved per call, but the judge saw each call take as long as the reference's
    assert unconfirmed_saving(ref, _t(0.1), cand_wall_ms=150.0, cand_calls=100)
    # the same claim, and the judge's clock shows it: confirmed
    assert not unconfirmed_saving(ref, _t(0.1), cand_wall_ms=60.0, cand_calls=100)


def test_no_claimed_saving_means_nothing_to_confirm():
    """A slower candidate, or one as fast as the reference, is never flagged, however much its
    loop's fixed costs add to its wall clock per call (here 2.9 ms a call, for a kernel timed at
    0.203 or 0.130 ms against the reference's 0.131): no saving claimed, nothing to confirm."""
    ref = _ref(0.131, wall_per_call=0.4)
    assert not unconfirmed_saving(ref, _t(0.203, n=21), cand_wall_ms=21 * 2.9, cand_calls=21)
    assert not unconfirmed_saving(ref, _t(0.130, n=21), cand_wall_ms=21 * 2.9, cand_calls=21)


def test_the_calls_made_count_not_only_the_times_kept():
    ref = _ref(1.0, wall_per_call=1.5)
    # 8 times kept (work outlived the calls) out of 100 calls: per call, the wall is 150/100
    assert unconfirmed_saving(ref, _t(0.1, n=8), cand_wall_ms=150.0, cand_calls=100)
    assert not unconfirmed_saving(ref, _t(0.1, n=8), cand_wall_ms=60.0, cand_calls=100)


def test_the_roofline_floor():
    ref = ReferenceRun(True, io_bytes=int(4.8e9))  # 4.8 GB at the H200's 4.8 TB/s: 1 ms
    assert abs(roofline_floor_ms(ref, "NVIDIA H200") - 1.0) < 1e-9
    assert roofline_floor_ms(ReferenceRun(True), "NVIDIA H200") is None
