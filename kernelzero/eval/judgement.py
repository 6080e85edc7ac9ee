"""One candidate's judgement once its worker has loaded it: the part that uses the device.

In order (evaluator.Evaluator._judge_in_worker loads the candidate and gets the reference first):
1. admission: the judgement waits until its footprint fits beside the others' (memory_gate.py),
   then its worker takes that memory from the driver (reserve.py) and the judge maps the
   worker's arena, all before the GPU lock;
2. under the GPU lock (shared): the model moves to the device, and the correctness trials run,
   a request at a time for as many trials as `MemoryPlan.slots` allows (their outputs are
   compared before the next request); a streamed task's reference runs each trial beside it
   (streamed_reference.StreamedReference), compared at once;
3. on a GPU, the timing (exclusive), with the checked calls' outputs copied before the GPU is
   let go and compared after (shared);
4. under the strict policy, the library share of one profiled call.
"""
from __future__ import annotations

import time

from kernelzero.eval.compare import compare_many
from kernelzero.eval.transport.cuda_ipc import SharedMappings, hold_arena, shared_bytes
from kernelzero.eval.device.gpu_lock import gpu_lock_for
from kernelzero.eval.reference import ReferenceRun, reserve
from kernelzero.eval.rulings import check_trials, correct_verdict, timed_verdict, worker_status
from kernelzero.eval.sandbox.sandbox import SandboxWorker
from kernelzero.eval.schedule import Trial
from kernelzero.eval.streamed_reference import ReferenceFailed, StreamedReference
from kernelzero.eval.time_command import time_settled
from kernelzero.eval.transport.tensorio import decode
from kernelzero.eval.trial_results import decode_trials, worker_breakdown
from kernelzero.eval.verdict import Verdict


class CandidateJudgement:
    """`phase` says what ran when a worker exception escapes (the evaluator's verdict)."""

    def __init__(self, ev, w: SandboxWorker, reference, ref: ReferenceRun, backend: str,
                 phases: dict, oracle: StreamedReference | None):
        self.ev, self.cfg, self.plan = ev, ev.config, ev.memory
        self.w, self.reference, self.ref, self.backend = w, reference, ref, backend
        self.phases, self.oracle = phases, oracle
        self.phase = "load"
        self.memory: dict = {}  # Verdict.memory
        self.grant = None
        self.fp = ref.footprint
        self.slots = 1 if ref.streamed else self.plan.slots(self.fp, len(ref.trials))

    def run(self, arena: SharedMappings) -> Verdict:
        """The verdict; `self.grant`, the memory admitted, is the caller's to release once the
        workers are gone."""
        cfg, w, phases, ref = self.cfg, self.w, self.phases, self.ref
        checked = len(ref.schedule.checked) if ref.schedule else 0
        t0 = time.perf_counter()
        self.grant = grant = self.plan.admit(
            self.plan.judgement_bytes(self.fp, len(ref.trials), checked, ref.streamed),
            "judgement")
        self.memory = {"footprint": self.fp.to_dict(), "admitted_bytes": grant.nbytes,
                       "streamed": ref.streamed, "reference_peak_bytes": ref.peak_mem_bytes,
                       "candidate_peak_bytes": 0}
        try:
            phases["memory_wait_s"] = time.perf_counter() - t0
            reserve(w, cfg, self.plan.reserve_bytes(self.fp, grant.nbytes), phases)
            self._map_arena(arena, max(self.slots, checked))
            return self._run()
        except ReferenceFailed as e:  # a streamed task's reference, beside the candidate
            reason = str(e)
            if "out of memory" in reason.lower():  # both at once did not fit: judged again alone
                return Verdict(status="runtime_error", backend=self.backend,
                               reason="the reference ran out of memory beside the candidate (a "
                                      f"streamed task runs both at once): {reason}")
            return Verdict(status="invalid_task", backend=self.backend,
                           reason=f"the reference failed beside the candidate: {reason}")

    def _run(self) -> Verdict:
        cfg, w, phases, backend = self.cfg, self.w, self.phases, self.backend
        t1 = time.perf_counter()
        # Moving the model (constructed on the CPU while loading) to the GPU and the
        # correctness trials run alongside other candidates' (shared lock); the timing
        # below waits for the GPU to itself (exclusive lock).
        with gpu_lock_for(cfg.device, shared=True, what="cand_run"):
            phases["gpu_wait_s"] = time.perf_counter() - t1
            t2 = time.perf_counter()
            info = w.request({"op": "build", "init_seed": 0}, cfg.load_timeout_s)
            if not info.get("ok"):
                return Verdict(status=worker_status(info.get("status")), backend=backend,
                               reason=_loading_reason(info), log_tail=w.log_tail())
            if self.oracle is not None:
                problem = self.oracle.build()
                if problem:
                    return Verdict(status="invalid_task", reason=problem, backend=backend)
            phases["build_s"] = time.perf_counter() - t2
            self.phase = "run"
            v, stats = self._correctness()
        if v is None and cfg.timed:
            v = self._timing(stats)
        elif v is None:
            v = correct_verdict(backend, None, self.ref, stats)
        if v.status == "correct" and self._profiles():
            self.phase = "run"
            with gpu_lock_for(cfg.device, shared=True, what="library_check"):
                v = self._library_check(v)
        return v

    # -- correctness ---------------------------------------------------------------------------
    def _correctness(self):
        """(failing verdict, None), or (None, (trials, max abs err, max rel err)) when all
        matched. A request per `slots` trials, numbered in schedule order (trials.py)."""
        cfg, w, ref, backend, phases = self.cfg, self.w, self.ref, self.backend, self.phases
        trials = list(ref.trials)
        worst_abs = worst_rel = 0.0
        for at in range(0, len(trials), self.slots):
            part = trials[at:at + self.slots]
            t0 = time.perf_counter()
            reply = w.request({"op": "run", "poison": True, "reuse": True,
                               "trials": [{**t.as_dict(), "index": at + k}
                                          for k, t in enumerate(part)],
                               "log_ops": cfg.policy == "strict" and at == 0,
                               "trim": ref.streamed}, cfg.run_timeout_s)
            _add(phases, "run_s", time.perf_counter() - t0)
            self.memory["candidate_peak_bytes"] = max(self.memory["candidate_peak_bytes"],
                                                      int(reply.get("peak_mem_bytes") or 0))
            for k, x in worker_breakdown(reply).items():
                _add(phases, k, x)
            if not reply.get("ok"):
                return Verdict(status=worker_status(reply.get("status")), backend=backend,
                               reason="raised during the correctness trials: "
                                      f"{reply.get('reason')}"), None
            if at == 0 and cfg.policy == "strict":
                v = _strict_op_log(reply, backend)
                if v is not None:
                    return v, None
            t1 = time.perf_counter()
            mapped = SharedMappings()
            results = decode_trials(w, reply, mapped=mapped)
            _add(phases, "decode_s", time.perf_counter() - t1)  # the judge's copies
            _add(phases, "decode_map_s", mapped.map_s)  # of which mapping worker memory
            if len(results) != len(part):
                return Verdict(status="incorrect", backend=backend, flags=["bad_reply"],
                               reason="the candidate process returned the wrong number of "
                                      "trials"), None
            t1 = time.perf_counter()
            expected = [self._expected(t) for t in part]
            v = check_trials(cfg, [(exp, got, f"trial {at + k + 1} ({_label(t)} inputs)")
                                   for k, (t, exp, got) in enumerate(zip(part, expected,
                                                                          results))], backend)
            del expected, results
            if self.oracle is not None:
                self.oracle.release()
            _add(phases, "check_s", time.perf_counter() - t1)
            if isinstance(v, Verdict):
                v.trials_run = len(trials)
                return v, None
            worst_abs, worst_rel = max(worst_abs, v[0]), max(worst_rel, v[1])
        return None, (len(trials), worst_abs, worst_rel)

    def _expected(self, t: Trial):
        """The reference's result of a trial: kept, or computed now (streamed)."""
        if self.oracle is None:
            return self.ref.trials[t]
        return self.oracle.trial(t, self.plan)

    # -- timing --------------------------------------------------------------------------------
    def _timing(self, stats) -> Verdict:
        cfg, w, phases, backend = self.cfg, self.w, self.phases, self.backend
        self.phase = "time"
        t3 = time.perf_counter()
        ref = self.reference.complete()  # its timing too (it started before this one)
        phases["reference_timing_wait_s"] = time.perf_counter() - t3
        if not ref.ok:
            return Verdict(status="invalid_task", reason=ref.reason, backend=backend)
        t3 = time.perf_counter()
        with gpu_lock_for(cfg.device, what="cand_time"):
            phases["timing_wait_s"] = time.perf_counter() - t3
            t4 = time.perf_counter()
            reply, judge_wall_ms = time_settled(w, cfg, ref.schedule, ref.l2_bytes,
                                                checked=ref.schedule.checked)
            phases["timing_s"] = time.perf_counter() - t4
            # The timed calls' outputs become the judge's own copies before the GPU is let
            # go (copies finished: nothing of this judge's runs beside the next timing) ...
            outs = _timed_outputs(w, reply, phases)
        # ... and are compared with the GPU shared: comparing is not timed work, and other
        # candidates' trials may run beside it.
        t4 = time.perf_counter()
        with gpu_lock_for(cfg.device, shared=True, what="cand_recheck"):
            phases["recheck_wait_s"] = time.perf_counter() - t4
            t4 = time.perf_counter()
            cmps = self._compare_timed(ref, outs) if reply.get("ok") else None
            v = timed_verdict(cfg, self.ev.gpu_name, ref, backend, stats, reply, judge_wall_ms,
                              outs, cmps)
            phases["timed_check_s"] = time.perf_counter() - t4
        return v

    def _compare_timed(self, ref: ReferenceRun, outs: dict):
        """(index, comparison) of each re-checked timed call whose output came back: all in one
        transfer against kept outputs, one at a time against a streamed reference."""
        present = [idx for idx in ref.timed if idx in outs]
        if self.oracle is None:
            cmps = compare_many([(ref.timed[i].outputs, outs[i]) for i in present],
                                self.cfg.tolerance_for, self.cfg.device)
            return list(zip(present, cmps))
        pairs = []
        for i in present:
            exp = self.oracle.trial(Trial(ref.schedule.timing_seeds[i]), self.plan)
            pairs.append((i, compare_many([(exp.outputs, outs[i])], self.cfg.tolerance_for,
                                          self.cfg.device)[0]))
            del exp
            outs[i] = None  # compared: its memory goes now
            self.oracle.release()
        return pairs

    # -- memory and evidence -------------------------------------------------------------------
    def _map_arena(self, arena: SharedMappings, slots: int) -> None:
        """Have the worker allocate its arena (cuda_ipc.Arena), room for `slots` outputs sized
        from the reference's, and map it now, before the GPU lock is taken; `arena` keeps it
        mapped until it is cleared. Without one, outputs travel as they otherwise would."""
        cfg, ref, min_bytes = self.cfg, self.ref, self.cfg.runtime.ipc_min_bytes
        if not (cfg.runtime.ipc_arena and cfg.device == "cuda" and cfg.transfer_mode == "ipc"):
            return
        if ref.streamed:
            per_call = self.fp.output_bytes if self.fp.output_bytes >= min_bytes else 0
        else:
            per_call = max((shared_bytes(r.outputs, min_bytes) for r in
                            [*ref.trials.values(), *ref.timed.values()]), default=0)
        if not per_call:
            return
        t0 = time.perf_counter()
        reply = self.w.request({"op": "arena", "bytes": per_call * slots}, cfg.load_timeout_s)
        if not reply.get("ok"):
            return
        try:
            arena.keep(reply["ipc"]["handle"], hold_arena(reply["ipc"]))
        except (ValueError, TypeError, KeyError, RuntimeError):
            return  # the candidate's process broke it: its outputs will say so
        self.phases["arena_map_s"] = time.perf_counter() - t0

    def _profiles(self) -> bool:
        c = self.cfg
        return c.policy == "strict" and c.device == "cuda" and c.max_library_share is not None

    def _library_check(self, v: Verdict) -> Verdict:
        """Strict policy, runtime evidence: the share of one profiled call's GPU time spent in
        vendor-library kernels. Asked for after the timing, so that nothing the profiler
        leaves in the worker can slow the timed calls."""
        from kernelzero.eval.worker.library_share import library_share

        first = next(iter(self.ref.trials))  # the first correctness trial's inputs
        reply = self.w.request({"op": "profile", **first.as_dict()}, self.cfg.run_timeout_s)
        share, lib_names = library_share(reply.get("kernels") or [])
        if share is not None and share > self.cfg.max_library_share:
            return Verdict(status="rejected", backend=self.backend, flags=["library_compute"],
                           library_share=share, trials_run=v.trials_run,
                           reason=f"strict policy: {100 * share:.0f}% of the call's GPU time "
                                  f"ran in vendor-library kernels ({', '.join(lib_names[:3])}); "
                                  "compute must happen in its own kernels")
        v.library_share = share
        return v


def _timed_outputs(w: SandboxWorker, reply: dict, phases: dict) -> dict:
    """The checked timed calls' outputs, decoded into the judge's own memory right away, the
    copies finished when this returns (phases: timed_copy_s to queue them, of which
    timed_map_s mapping worker memory; timed_sync_s to wait for them)."""
    if not reply.get("ok"):
        return {}
    t0, mapped = time.perf_counter(), SharedMappings()
    outs = {int(idx): decode(item["desc"], w.path_of(item["file"]), mapped=mapped)
            for idx, item in (reply.get("outputs") or {}).items()}
    t1 = time.perf_counter()
    import torch
    if outs and torch.cuda.is_initialized():
        torch.cuda.synchronize()
    mapped.clear()
    phases["timed_copy_s"], phases["timed_sync_s"] = t1 - t0, time.perf_counter() - t1
    phases["timed_map_s"] = mapped.map_s
    return outs


def _strict_op_log(reply: dict, backend: str) -> Verdict | None:
    """Strict policy, the first call's op log: a refusal, or None."""
    from kernelzero.eval.policy import forbidden_ops
    first = (reply.get("trials") or [{}])[0]
    if "aten_ops" not in first:
        return Verdict(status="rejected", backend=backend, flags=["op_log_missing"],
                       reason="strict policy: the op log of the first call is missing")
    bad = forbidden_ops(first["aten_ops"])
    if bad:
        return Verdict(status="rejected", backend=backend, flags=["forbidden_op"],
                       reason="strict policy: ModelNew.forward ran PyTorch compute ops "
                              f"({', '.join(bad[:6])}); compute must happen in its own kernels")
    return None


def _label(t: Trial) -> str:
    return f"{t.dist}, changed in place" if t.poke else t.dist


def _add(phases: dict, key: str, seconds: float) -> None:
    phases[key] = phases.get(key, 0.0) + seconds


def _loading_reason(info: dict) -> str:
    phase = info.get("phase")
    where = {"import": "failed to import/compile", "init": "failed to build ModelNew"}.get(phase, "failed to load")
    return f"the candidate {where}: {info.get('reason')}"
