"""The judge's rulings on the evidence a worker sends back: one correctness trial against the
reference's, a timed loop (its outputs re-checked, its times cross-checked), and the verdict
of a candidate that passed. Pure functions of that evidence and the configuration; the
evaluator (evaluator.py) gathers the evidence."""
from __future__ import annotations

from kernelzero.eval.compare import compare_many
from kernelzero.eval.config import EvalConfig
from kernelzero.eval.plausibility import roofline_floor_ms, unconfirmed_saving
from kernelzero.eval.reference import ReferenceRun
from kernelzero.eval.time_command import timed_calls, timing_details
from kernelzero.eval.verdict import Timing, Verdict


def check_trials(cfg: EvalConfig, cases: list, backend: str):
    """The first failing verdict among a reply's correctness trials (`cases`: (reference's
    TrialResult, candidate's, label) in trial order), or their worst (max abs err, max rel err).
    Every comparison is queued first and read in one transfer (compare.compare_many)."""
    pairs, at = [], []  # at: per trial, where its outputs' and updated inputs' pairs are
    for exp, got, _ in cases:
        j, k = len(pairs), None
        pairs.append((exp.outputs, got.outputs))
        if exp.mutated and sorted(got.mutated) == sorted(exp.mutated):
            k = len(pairs)
            pairs.append((exp.inputs_after, got.inputs_after))
        at.append((j, k))
    cmps = compare_many(pairs, cfg.tolerance_for, cfg.device)
    worst_abs = worst_rel = 0.0
    for n, ((exp, got, label), (j, k)) in enumerate(zip(cases, at)):
        v = _trial_ruling(exp, got, label, backend, n, cmps[j], None if k is None else cmps[k])
        if isinstance(v, Verdict):
            return v
        worst_abs, worst_rel = max(worst_abs, v[0]), max(worst_rel, v[1])
    return worst_abs, worst_rel


def _trial_ruling(exp, got, label: str, backend: str, passed: int, cmp, cmp_inputs):
    """One trial: a failing verdict, or its (max abs err, max rel err). `cmp` compares the
    outputs, `cmp_inputs` the inputs it updated in place (None unless both updated the same)."""
    if exp.digest and abs(got.digest - exp.digest) > 1e-9 * max(1.0, abs(exp.digest)):
        return Verdict(status="rejected", backend=backend, trials_passed=passed,
                       flags=["input_generation_tampered"],
                       reason=f"{label}: the inputs in the candidate's process differ from the "
                              "reference's (input generation was altered)")
    extra = sorted(set(got.mutated) - set(exp.mutated))
    if extra:
        return Verdict(status="incorrect", backend=backend, trials_passed=passed,
                       flags=["input_mutated"],
                       reason=f"{label}: the candidate changed input(s) {extra} in place; "
                              "the reference does not")
    if cmp.ok and exp.mutated:
        if cmp_inputs is None:
            return Verdict(status="incorrect", backend=backend, trials_passed=passed,
                           flags=["input_mutation_missing"],
                           reason=f"{label}: the reference updates input(s) {exp.mutated} in "
                                  "place, the candidate does not")
        if not cmp_inputs.ok:
            cmp = cmp_inputs
            cmp.reason = "in-place updated input: " + cmp.reason
    if not cmp.ok:
        return Verdict(status="incorrect", backend=backend, trials_passed=passed,
                       flags=cmp.flags, reason=f"{label}: {cmp.reason}",
                       max_abs_err=cmp.max_abs_err, max_rel_err=cmp.max_rel_err)
    return cmp.max_abs_err, cmp.max_rel_err


def timed_verdict(cfg: EvalConfig, gpu_name: str | None, ref: ReferenceRun, backend: str, stats,
                  reply: dict, judge_wall_ms: float, outputs: dict, cmps=None) -> Verdict:
    """The verdict from a `time` reply: timed outputs re-checked, times cross-checked against
    the judge's own clock (`judge_wall_ms`) and the roofline. `cmps`: (index, comparison) of
    the outputs that came back, where the caller compared them (else compared here, in one
    transfer)."""
    if not reply.get("ok"):
        return Verdict(status=worker_status(reply.get("status")), backend=backend,
                       reason=f"raised during the timed calls: {reply.get('reason')}")
    for idx in ref.timed:
        if idx not in outputs:
            return Verdict(status="incorrect", backend=backend, flags=["timed_output_missing"],
                           reason=f"timed call {idx} produced no output to re-check")
    if cmps is None:
        cmps = list(zip(ref.timed, compare_many(
            [(exp.outputs, outputs[idx]) for idx, exp in ref.timed.items()],
            cfg.tolerance_for, cfg.device)))
    for idx, cmp in cmps:
        if not cmp.ok:
            return Verdict(status="incorrect", backend=backend,
                           flags=cmp.flags + ["timed_output_mismatch"],
                           reason=f"timed call {idx} (fresh inputs): {cmp.reason}")
    times = [float(x) for x in reply["times_ms"]]
    if not times or min(times) < 0 or sum(times) > judge_wall_ms:
        return Verdict(status="rejected", backend=backend, flags=["timing_inconsistent"],
                       reason="the reported timings are impossible (their sum exceeds the "
                              "wall-clock time the judge measured)")
    timing = Timing.from_samples(times)
    # Flagged, not rejected: the two loops' fixed costs differ with their call counts, so
    # this check is evidence for a human (and a reward that wants it), not a verdict.
    unconfirmed = unconfirmed_saving(ref, timing, judge_wall_ms, timed_calls(reply, timing))
    floor = roofline_floor_ms(ref, gpu_name)
    if floor and timing.median_ms < 0.5 * floor:
        return Verdict(status="rejected", backend=backend, flags=["implausible_speedup"],
                       runtime_ms=timing, ref_runtime_ms=ref.timing,
                       reason=f"{timing.median_ms:.4g} ms is under half the time needed just "
                              f"to move the task's inputs and outputs ({floor:.4g} ms at the "
                              "GPU's memory bandwidth): not a measurement to trust")
    v = correct_verdict(backend, timing, ref, stats)
    v.timing_details = {"candidate": timing_details(reply), "reference": ref.timing_details}
    if unconfirmed:
        v.flags.append("timing_unconfirmed")
    if reply.get("work_after_stream"):  # its times include that work (see worker.time)
        v.flags.append("work_after_stream")
    if reply.get("host_busy"):  # ... and maybe the host's lateness too: an upper bound (timer.py)
        v.flags.append("busy_host")
    return v


def correct_verdict(backend: str, timing: Timing | None, ref: ReferenceRun, stats) -> Verdict:
    """The `correct` verdict: trials passed, errors, and the speedups when timed."""
    n, worst_abs, worst_rel = stats
    v = Verdict(status="correct", backend=backend, trials_run=n, trials_passed=n,
                max_abs_err=worst_abs, max_rel_err=worst_rel,
                reason=f"all {n} correctness trials matched the reference "
                       f"(max abs err {worst_abs:.2g})")
    if timing is not None:
        v.runtime_ms, v.ref_runtime_ms = timing, ref.timing
        if ref.timing and timing.median_ms > 0:
            v.speedup = ref.timing.median_ms / timing.median_ms
            v.reason += f"; {timing.median_ms:.4g} ms vs {ref.timing.median_ms:.4g} ms eager " \
                        f"({v.speedup:.2f}x)"
        if ref.compile_timing and timing.median_ms > 0:
            v.ref_compile_runtime_ms = ref.compile_timing
            v.speedup_compile = ref.compile_timing.median_ms / timing.median_ms
    return v


def worker_status(s) -> str:
    """A worker's failure status, or runtime_error when it names none the judge knows."""
    return s if s in ("compile_error", "runtime_error", "format_error", "timeout", "rejected") \
        else "runtime_error"
