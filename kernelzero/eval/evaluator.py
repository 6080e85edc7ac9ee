"""Evaluator: judge candidates against reference modules and return a `Verdict` for each.

The pipeline for one (task, candidate) pair, every step in the judge's own process except where
it says "worker":
1. static checks of the text (empty, no `ModelNew`, syntax error, CUDA code on a CPU machine);
2. the reference runs once per task in its own worker on the secret seed schedule (cached;
   its outputs are shared as soon as they exist, its timing follows: reference_cache.py);
3. the candidate loads in a fresh worker (import, compile, and construction on the CPU with the
   reference's weights), then its model moves to the device under the GPU lock (shared);
4. correctness trials (GPU lock shared), then (on a GPU) timing with re-checked timed calls (GPU
   lock exclusive); outputs come back as bytes or CUDA IPC and are compared here;
5. the worker is killed and its directory removed, whatever happened.

Several candidates are judged at once (`max_workers`): their imports, compiles and correctness
trials overlap, while each timing has the GPU to itself (`GpuLock`: shared for running, exclusive
for timing). A judgement that runs out of GPU memory beside others is judged again alone
(`SoloGate`), so a verdict never blames a candidate for its neighbours' memory.
"""
from __future__ import annotations

import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from kernelzero.eval.compare import warm_up_comparison
from kernelzero.eval.config import EvalConfig
from kernelzero.eval.cuda_ipc import SharedMappings, hold_arena, shared_bytes
from kernelzero.eval.environment import probe_gpu_name
from kernelzero.eval.gpu_lock import gpu_lock_for
from kernelzero.eval.reference import (ReferenceRun, decode_trials, run_reference, time_settled,
                                       worker_breakdown)
from kernelzero.eval.reference_cache import ReferenceCache
from kernelzero.eval.rulings import check_trials, correct_verdict, timed_verdict, worker_status
from kernelzero.eval.sandbox import (SandboxLimits, SandboxWorker, WorkerDied, WorkerTimeout,
                                    reap_pending)
from kernelzero.eval.solo_gate import SoloGate, out_of_memory
from kernelzero.eval.spares import SparePool
from kernelzero.eval.schedule import HARDENING_DISTS, Schedule, Trial, make_schedule, new_secret
from kernelzero.eval.tensorio import DecodeError, TensorOut, decode
from kernelzero.eval.verdict import Timing, Verdict
from kernelzero.tasks.task import (Candidate, Task, static_check_candidate, static_check_task)


@dataclass
class ReferenceProbe:
    """What `probe_reference` learned about a reference module (used by the audit and Proposer)."""

    ok: bool
    reason: str = ""
    outputs: list = field(default_factory=list)   # per seed: list of CPU tensors / scalars
    inputs: list = field(default_factory=list)    # per seed: list of CPU tensors / values
    runtime_ms: Timing | None = None
    mutated_inputs: list[int] = field(default_factory=list)
    peak_mem_bytes: int | None = None
    forward_peak_bytes: int | None = None


def _plain(obj):
    """TensorOut trees -> plain CPU tensors (for callers outside the judge)."""
    if isinstance(obj, TensorOut):
        return obj.tensor.cpu()
    if isinstance(obj, (tuple, list)):
        return [_plain(x) for x in obj]
    return obj


def _flatten_outputs(obj) -> list:
    out = _plain(obj)
    return list(out) if isinstance(out, list) else [out]


class Evaluator:
    def __init__(self, config: EvalConfig | None = None, ref_cache=None,
                 limits: SandboxLimits | None = None):
        self.config = config or EvalConfig()
        self.limits = limits or SandboxLimits(
            threads=max(1, (os.cpu_count() or 1) // self.config.max_workers))
        self.ref_cache = ref_cache  # optional: get_ref_timing(key) / put_ref_timing(key, dict)
        self._secret = self.config.seed if self.config.seed is not None else new_secret()
        # Reference outputs can be large (and live in GPU memory on cuda): keep a few tasks.
        self.references = ReferenceCache(
            self._run_reference,
            capacity=self.config.max_workers + 2 if self.config.device == "cuda" else 16)
        # task hash -> where its reference's time went (diagnostics)
        self.reference_phases: dict[str, dict] = self.references.phases
        self._tmp = Path(self.config.work_dir or _default_work_dir())
        self._tmp.mkdir(parents=True, exist_ok=True)
        self._gpu_name: str | None = probe_gpu_name() if self.config.device == "cuda" else None
        self._live: set[SandboxWorker] = set()
        # Every candidate takes a spare and every new task one more (its reference); on a GPU a
        # spare takes seconds to start (torch, CUDA context, library handles), so keep enough that
        # neither ever waits for one. The 2-core CPU case keeps the pool small.
        self.spares = SparePool(self.config.device, self.limits, self.config.work_dir,
                                size=self.config.spare_pool_size if self.config.prestart else 0,
                                start_method=self.config.worker_start,
                                reserve_mb=self.config.spare_reserve_mb)
        self.aborted = False
        self._gate = SoloGate()

    # ------------------------------------------------------------------ public API
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self) -> None:
        self.references.clear()
        self.spares.close()
        reap_pending()  # judged workers are reaped in the background: all gone when this returns

    def abort(self) -> None:
        """Kill every worker now (Ctrl-C). Verdicts still in flight are discarded, not stored."""
        self.aborted = True
        for w in list(self._live):
            w.kill()

    def warm_up(self, timeout_s: float = 300.0) -> int:
        """Start the spare workers now and wait until they are ready (at most timeout_s); returns
        how many are. Optional: without it the first batch starts them. With outputs shared over
        CUDA IPC the judge's own CUDA context and comparison kernels are made ready too, instead
        of by the first batch's first outputs (a few hundred ms, under the GPU lock)."""
        if self.config.device == "cuda" and self.config.transfer_mode == "ipc":
            warm_up_comparison(self.config.tolerance_for)
        return self.spares.fill(timeout_s)

    def judge(self, task: Task, candidate: Candidate) -> Verdict:
        t0 = time.perf_counter()
        with self._gate.shared() as others_beside:
            v = self._judge(task, candidate)
            crowded = others_beside()
        if crowded and out_of_memory(v.status, v.reason) and not self.aborted:
            with self._gate.alone():  # the others' memory may be why: judged again, alone
                if not self.aborted:  # (Ctrl-C while it waited for the others)
                    self.references.forget_failed(task.hash)
                    first = v.reason
                    v = self._judge(task, candidate)
                    v.flags.append("judged_alone_after_oom")
                    v.reason += f" (judged again alone: beside other judgements, {first[:120]})"
        v.wall_s = time.perf_counter() - t0
        v.task_hash, v.candidate_hash = task.hash, candidate.hash
        v.device, v.policy = self.config.device, self.config.policy
        v.env = self.env()
        return v

    def judge_many(self, pairs, on_verdict=None) -> list[Verdict]:
        """Judge (task, candidate) pairs in parallel; results in the order given.

        Pairs are taken task by task; a background thread computes the next tasks' references
        ahead of the candidates that need them (a few tasks ahead, bounded by the reference
        cache), and a reference stays cached while any candidate of its task is still pending.
        """
        pairs = list(pairs)
        results: list[Verdict | None] = [None] * len(pairs)
        order = sorted(range(len(pairs)), key=lambda i: pairs[i][0].hash)
        released: set[int] = set()
        release_guard = threading.Lock()
        for t, _ in pairs:
            self.references.expect(t.hash)

        def release(i):
            with release_guard:
                if i in released:
                    return
                released.add(i)
            self.references.release(pairs[i][0].hash)

        def work(i):
            try:
                if self.aborted:
                    return None
                v = self.judge(*pairs[i])
                if self.aborted:  # killed mid-judgement: not a real verdict
                    return None
                results[i] = v
                if on_verdict is not None:
                    on_verdict(i, v)
                return v
            finally:
                release(i)

        done = threading.Event()
        # Only tasks that some candidate will actually run against need their reference early.
        runs = [i for i in order if self._static_verdict(
            pairs[i][0], pairs[i][1], self._backend(pairs[i][1])) is None]
        tasks = list({pairs[i][0].hash: pairs[i][0] for i in runs}.values())
        # A batch takes one worker per candidate and one per new task; spares beyond that would
        # start (CPU- and GPU-heavy) while this batch is judged, for nobody.
        self.spares.begin_batch(len(runs) + len(tasks))
        prefetch = threading.Thread(target=self.references.prefetch, daemon=True,
                                    args=(tasks, lambda: done.is_set() or self.aborted))
        prefetch.start()
        pool = ThreadPoolExecutor(max_workers=self.config.max_workers)
        try:
            futures = [pool.submit(work, i) for i in order]
            for f in futures:
                f.result()
        except KeyboardInterrupt:  # Ctrl-C: kill every worker now; nothing half-judged is kept
            self.abort()
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        except BaseException:  # a bug in the judge: stop this batch, keep the evaluator usable
            pool.shutdown(wait=True, cancel_futures=True)
            raise
        finally:
            done.set()
            self.references.wake()
            for i in range(len(pairs)):  # futures cancelled before they ran
                release(i)
            self.spares.end_batch()
        pool.shutdown(wait=True)
        prefetch.join(timeout=1)
        return results  # type: ignore[return-value]

    def probe_reference(self, task: Task, seeds: list[int], init_seed: int = 0,
                        return_inputs: bool = False, time: bool = False) -> ReferenceProbe:
        """Run a reference module on given seeds (task distribution) in a sandbox."""
        problem = static_check_task(task.source)
        if problem:
            return ReferenceProbe(False, problem)
        sched = Schedule([Trial(int(s)) for s in seeds], self._schedule(task).timing_seeds, [])
        run = run_reference(task.source, self.config, sched, self.spares.take,
                            time_it=time and self.config.timed, init_seed=init_seed,
                            want_inputs=return_inputs)
        if not run.ok:
            return ReferenceProbe(False, run.reason)
        results = [run.trials[Trial(int(s))] for s in seeds]
        return ReferenceProbe(
            True, outputs=[_flatten_outputs(r.outputs) for r in results],
            inputs=[_flatten_outputs(r.inputs) if r.inputs is not None else [] for r in results],
            runtime_ms=run.timing, peak_mem_bytes=run.peak_mem_bytes,
            forward_peak_bytes=run.forward_peak_bytes,
            mutated_inputs=sorted({i for r in results for i in r.mutated}))

    def env(self) -> dict:
        from kernelzero.eval.environment import environment
        return environment(self.config, self.limits, self._gpu_name)

    def env_key(self) -> str:
        from kernelzero.eval.environment import env_key
        return env_key(self.env())

    # ------------------------------------------------------------------ internals
    def _schedule(self, task: Task) -> Schedule:
        c = self.config
        return make_schedule(self._secret, task.hash, c.correctness_trials,
                             HARDENING_DISTS if c.hardening_trials else (),
                             c.timing_max_trials, c.timing_checked_calls, c.timing_min_trials)

    def _run_reference(self, task: Task, publish) -> ReferenceRun:
        """Run (and time) a task's reference; called by `self.references` in its own thread."""
        problem = static_check_task(task.source)
        if problem:
            return ReferenceRun(False, problem)
        cfg = self.config
        cache_key = None
        cached = None
        if cfg.timed and self.ref_cache is not None:
            from kernelzero.eval.environment import ref_timing_key
            cache_key = ref_timing_key(task.hash, self.env(), cfg)
            cached = self.ref_cache.get_ref_timing(cache_key)
        run = run_reference(task.source, cfg, self._schedule(task), self.spares.take,
                            time_it=cfg.timed and cached is None, publish=publish)
        if run.gpu:
            self._gpu_name = run.gpu
        if run.ok and cached is not None:
            run.timing = Timing(**cached["eager"])
            if cached.get("compile"):
                run.compile_timing = Timing(**cached["compile"])
        elif run.ok and cache_key is not None and run.timing is not None:
            import dataclasses
            self.ref_cache.put_ref_timing(cache_key, {
                "eager": dataclasses.asdict(run.timing),
                "compile": dataclasses.asdict(run.compile_timing) if run.compile_timing else None})
        return run

    def _judge(self, task: Task, cand: Candidate) -> Verdict:
        backend = self._backend(cand)
        return self._static_verdict(task, cand, backend) or self._judge_in_worker(task, cand, backend)

    def _backend(self, cand: Candidate) -> str:
        return cand.resolved_backend() if self.config.backend == "auto" else self.config.backend

    def _static_verdict(self, task: Task, cand: Candidate, backend: str) -> Verdict | None:
        """The verdict the text alone earns (no process started), or None when it must be run."""
        cfg = self.config
        problem = static_check_candidate(cand.source)
        if problem:
            return Verdict(status=problem[0], reason=problem[1], backend=backend)
        if backend == "cuda" and cfg.device == "cpu":
            return Verdict(status="rejected", backend=backend,
                           reason="CUDA candidates need a GPU (this evaluator runs on the CPU)")
        from kernelzero.eval.policy import static_policy_check
        refusal = static_policy_check(cand.source, task.source, cfg.policy)
        if refusal:
            return Verdict(status="rejected", reason=refusal[0], flags=refusal[1], backend=backend)
        return None

    def _judge_in_worker(self, task: Task, cand: Candidate, backend: str) -> Verdict:
        """Load (import, compile, build) the candidate while the reference is computed elsewhere,
        then run and time it against the reference."""
        cfg = self.config
        build = self._tmp / "builds" / cand.hash  # one build cache per candidate source
        t_take = time.perf_counter()
        try:
            w = self.spares.take("cand")
        except (WorkerDied, WorkerTimeout) as e:
            return Verdict(status="runtime_error", backend=backend,
                           reason=f"could not start a sandbox worker: {e}")
        reference = self.references.get(task)  # started now, it runs while this one loads
        with w.released():
            self._live.add(w)
            cand_path = os.path.join(w.dir, f"candidate_{cand.hash}.py")
            Path(cand_path).write_text(cand.source, encoding="utf-8")
            # The worker's own copy of the reference: nothing a candidate writes can change what
            # another worker imports.
            task_path = os.path.join(w.dir, f"task_{task.hash}.py")
            Path(task_path).write_text(task.source, encoding="utf-8")
            phase = "load"
            arena = SharedMappings()  # the worker's arena, mapped while it is judged
            # take_s: waiting for a worker (seconds when no spare was ready and one had to start)
            phases: dict[str, float] = {"take_s": time.perf_counter() - t_take}
            try:
                t0 = time.perf_counter()
                info = w.request({"op": "load", "role": "candidate", "task_path": task_path,
                                  "candidate_path": cand_path, "device": cfg.device,
                                  "transfer": cfg.transfer_mode, "build_dir": str(build),
                                  "init_seed": 0, **cfg.load_options()},
                                 cfg.load_timeout_s)
                phases["load_s"] = time.perf_counter() - t0
                if info.get("reserved_bytes"):  # reserve.py (a size, not a time)
                    phases["reserved_mb"] = info["reserved_bytes"] / 2**20
                ref = reference.outputs()
                if not ref.ok:
                    return Verdict(status="invalid_task", reason=ref.reason, backend=backend)
                if not info.get("ok"):
                    return Verdict(status=worker_status(info.get("status")), backend=backend,
                                   reason=_loading_reason(info), log_tail=w.log_tail())
                phases["reference_wait_s"] = time.perf_counter() - t0 - phases["load_s"]
                self._map_arena(w, ref, phases, arena)
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
                    phases["build_s"] = time.perf_counter() - t2
                    phase = "run"
                    v, stats = self._correctness(w, ref, backend, phases)
                if v is None and cfg.timed:
                    phase = "time"
                    t3 = time.perf_counter()
                    ref = reference.complete()  # its timing too (it started before this one)
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
                        # The timed calls' outputs become the judge's own copies before the GPU
                        # is let go (copies finished: nothing of this judge's runs beside the
                        # next timing) ...
                        outs = self._timed_outputs(w, reply, phases)
                    # ... and are compared with the GPU shared: comparing is not timed work,
                    # and other candidates' trials may run beside it.
                    t4 = time.perf_counter()
                    with gpu_lock_for(cfg.device, shared=True, what="cand_recheck"):
                        phases["recheck_wait_s"] = time.perf_counter() - t4
                        t4 = time.perf_counter()
                        v = timed_verdict(self.config, self._gpu_name, ref, backend, stats, reply,
                                          judge_wall_ms, outs)
                        phases["timed_check_s"] = time.perf_counter() - t4
                elif v is None:
                    v = correct_verdict(backend, None, ref, stats)
                if v.status == "correct" and self._profiles():
                    phase = "run"
                    with gpu_lock_for(cfg.device, shared=True, what="library_check"):
                        v = self._library_check(w, ref, backend, v)
                v.log_tail = w.log_tail()
                v.phases_s = {k: round(x, 4) for k, x in phases.items()}
                return v
            except WorkerTimeout:
                limit = cfg.load_timeout_s if phase == "load" else cfg.run_timeout_s
                return Verdict(status="timeout", backend=backend, log_tail=w.log_tail(),
                               reason=f"the candidate did not finish {_GERUND[phase]} within "
                                      f"{limit:g} s; its process group was killed")
            except WorkerDied as e:
                if e.exit_code == 0:  # ended itself before the checks could finish
                    return Verdict(status="rejected", backend=backend, flags=["harness_exit"],
                                   log_tail=w.log_tail(),
                                   reason=f"while {_GERUND[phase]}, the candidate ended its own "
                                          "process (exit code 0) before the checks finished")
                return Verdict(status="runtime_error", backend=backend, log_tail=w.log_tail(),
                               reason=f"while {_GERUND[phase]}, {e}")
            except (DecodeError, KeyError, TypeError, ValueError) as e:
                return Verdict(status="incorrect", backend=backend, flags=["bad_reply"],
                               reason=f"the candidate's outputs could not be read: {e}")
            finally:
                arena.clear()  # unmapped before the worker is killed
                self._live.discard(w)

    def _map_arena(self, w: SandboxWorker, ref: ReferenceRun, phases: dict,
                   arena: SharedMappings) -> None:
        """Have the worker allocate its arena (cuda_ipc.Arena), room for the trials' outputs
        sized from the reference's, and map it now, before the GPU lock is taken; `arena` keeps
        it mapped until it is cleared. Without one, outputs travel as they otherwise would."""
        cfg = self.config
        if not (cfg.ipc_arena and cfg.device == "cuda" and cfg.transfer_mode == "ipc"):
            return
        per_call = max((shared_bytes(r.outputs, cfg.ipc_min_bytes) for r in
                        [*ref.trials.values(), *ref.timed.values()]), default=0)
        slots = max(len(ref.trials), len(ref.schedule.checked) if ref.schedule else 0)
        if not per_call:
            return
        t0 = time.perf_counter()
        reply = w.request({"op": "arena", "bytes": per_call * slots}, cfg.load_timeout_s)
        if not reply.get("ok"):
            return
        try:
            arena.keep(reply["ipc"]["handle"], hold_arena(reply["ipc"]))
        except (ValueError, TypeError, KeyError, RuntimeError):
            return  # the candidate's process broke it: its outputs will say so
        phases["arena_map_s"] = time.perf_counter() - t0

    def _correctness(self, w: SandboxWorker, ref: ReferenceRun, backend: str, phases: dict):
        """(failing verdict, None), or (None, (trials, max abs err, max rel err)) when all matched."""
        cfg = self.config
        trials = list(ref.trials)
        t0 = time.perf_counter()
        reply = w.request({"op": "run", "trials": [t.as_dict() for t in trials], "poison": True,
                           "log_ops": cfg.policy == "strict"}, cfg.run_timeout_s)
        phases["run_s"] = time.perf_counter() - t0
        phases.update(worker_breakdown(reply))
        t0 = time.perf_counter()
        if not reply.get("ok"):
            return Verdict(status=worker_status(reply.get("status")), backend=backend,
                           reason=f"raised during the correctness trials: {reply.get('reason')}"), None
        if cfg.policy == "strict":
            from kernelzero.eval.policy import forbidden_ops
            first = (reply.get("trials") or [{}])[0]
            if "aten_ops" not in first:
                return Verdict(status="rejected", backend=backend, flags=["op_log_missing"],
                               reason="strict policy: the op log of the first call is missing"), None
            bad = forbidden_ops(first["aten_ops"])
            if bad:
                return Verdict(status="rejected", backend=backend, flags=["forbidden_op"],
                               reason="strict policy: ModelNew.forward ran PyTorch compute ops "
                                      f"({', '.join(bad[:6])}); compute must happen in its own "
                                      "kernels"), None
        t1 = time.perf_counter()
        mapped = SharedMappings()
        results = decode_trials(w, reply, mapped=mapped)
        phases["decode_s"] = time.perf_counter() - t1  # the judge's copies of the outputs
        phases["decode_map_s"] = mapped.map_s  # of which mapping worker memory
        if len(results) != len(trials):
            return Verdict(status="incorrect", backend=backend, flags=["bad_reply"],
                           reason="the candidate process returned the wrong number of trials"), None
        v = check_trials(cfg, [(ref.trials[t], got, f"trial {n + 1} ({t.dist} inputs)")
                               for n, (t, got) in enumerate(zip(trials, results))], backend)
        if isinstance(v, Verdict):
            v.trials_run = len(trials)
            return v, None
        phases["check_s"] = time.perf_counter() - t0
        return None, (len(trials), *v)

    @staticmethod
    def _timed_outputs(w: SandboxWorker, reply: dict, phases: dict) -> dict:
        """The checked timed calls' outputs, decoded into the judge's own memory right away,
        the copies finished when this returns (phases: timed_copy_s to queue them, of which
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

    def _profiles(self) -> bool:
        c = self.config
        return c.policy == "strict" and c.device == "cuda" and c.max_library_share is not None

    def _library_check(self, w, ref: ReferenceRun, backend: str, v: Verdict) -> Verdict:
        """Strict policy, runtime evidence: the share of one profiled call's GPU time spent in
        vendor-library kernels. Asked for after the timing, so that nothing the profiler leaves
        in the worker can slow the timed calls."""
        from kernelzero.eval.library_share import library_share

        first = next(iter(ref.trials))  # the first correctness trial's inputs
        reply = w.request({"op": "profile", **first.as_dict()}, self.config.run_timeout_s)
        share, lib_names = library_share(reply.get("kernels") or [])
        if share is not None and share > self.config.max_library_share:
            return Verdict(status="rejected", backend=backend, flags=["library_compute"],
                           library_share=share, trials_run=v.trials_run,
                           reason=f"strict policy: {100 * share:.0f}% of the call's GPU time ran "
                                  f"in vendor-library kernels ({', '.join(lib_names[:3])}); "
                                  "compute must happen in its own kernels")
        v.library_share = share
        return v


_GERUND = {"load": "loading", "run": "running", "time": "timing"}


def _loading_reason(info: dict) -> str:
    phase = info.get("phase")
    where = {"import": "failed to import/compile", "init": "failed to build ModelNew"}.get(phase, "failed to load")
    return f"the candidate {where}: {info.get('reason')}"


def _default_work_dir() -> str:
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"kernelzero-{os.getuid()}")
