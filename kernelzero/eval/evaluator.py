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

Several candidates are judged at once (`max_workers`, batch.py): their imports, compiles and
correctness trials overlap, while each timing has the GPU to itself (`GpuLock`: shared for
running, exclusive for timing). A judgement that runs out of GPU memory beside others is judged
again alone (`SoloGate`), so a verdict never blames a candidate for its neighbours' memory.
"""
from __future__ import annotations

import contextlib
import gc
import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from kernelzero.eval.batch import JudgingBatch
from kernelzero.eval.worker.builds import BuildCache
from kernelzero.eval.compare import warm_up_comparison
from kernelzero.eval.config import EvalConfig
from kernelzero.eval.environment import probe_gpu
from kernelzero.eval.device.footprint import gib
from kernelzero.eval.device.memory_gate import out_of_memory
from kernelzero.eval.device.memory_plan import MemoryPlan
from kernelzero.eval.held_candidate import (HeldCandidate, died_verdict, timeout_verdict,
                                           write_sources)
from kernelzero.eval.judgement import CandidateJudgement, _loading_reason
from kernelzero.eval.reference import WAIT_EXIT_BYTES, ReferenceRun, run_reference
from kernelzero.eval.reference_cache import ReferenceCache
from kernelzero.eval.rulings import worker_status
from kernelzero.eval.sandbox.channel import WorkerDied, WorkerTimeout
from kernelzero.eval.sandbox.sandbox import SandboxLimits, SandboxWorker, reap_pending
from kernelzero.eval.sandbox.spares import SparePool
from kernelzero.eval.schedule import HARDENING_DISTS, Schedule, Trial, make_schedule, new_secret
from kernelzero.eval.streamed_reference import StreamedReference
from kernelzero.eval.transport.tensorio import DecodeError, TensorOut
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
        # compiled extensions by candidate source, kept where no worker writes (builds.py)
        self.builds = BuildCache(self._tmp / "build_cache", self.config)
        self._gpu_name, gpu_bytes = probe_gpu() if self.config.device == "cuda" else (None, None)
        self._live: set[SandboxWorker] = set()
        # Every candidate takes a spare and every new task one more (its reference); on a GPU a
        # spare takes seconds to start (torch, CUDA context, library handles), so keep enough that
        # neither ever waits for one. The 2-core CPU case keeps the pool small.
        runtime = self.config.runtime
        self.spares = SparePool(self.config.device, self.limits, self.config.work_dir,
                                size=self.config.spares_on(gpu_bytes) if runtime.prestart else 0,
                                start_method=self.config.worker_start,
                                reserve_mb=runtime.spare_reserve_mb)
        self.aborted = False
        # Device memory: each judgement and reference run admitted for its footprint, an
        # out-of-memory verdict judged again alone (memory_gate.py, memory_plan.py).
        self.memory = MemoryPlan(self.config, self.spares.size, reclaim=self.references.reclaim,
                                 spares_ready=self.spares.ready)

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
        with self.memory.gate.shared():
            v = self._judge(task, candidate)
        if out_of_memory(v.status, v.reason) and not self.aborted:
            v = self._judge_alone(task, candidate, v)
        v.wall_s = time.perf_counter() - t0
        v.task_hash, v.candidate_hash = task.hash, candidate.hash
        v.device, v.policy = self.config.device, self.config.policy
        v.env = self.env()
        return v

    def judge_many(self, pairs, on_verdict=None) -> list[Verdict]:
        """Judge (task, candidate) pairs in parallel; results in the order given (batch.py:
        taken task by task, each task's reference computed ahead of its candidates)."""
        return JudgingBatch(self, list(pairs), on_verdict).run()  # type: ignore[return-value]

    def needs_worker(self, task: Task, cand: Candidate) -> bool:
        """Whether judging the pair starts a worker (its text alone does not decide the verdict)."""
        return self._static_verdict(task, cand, self._backend(cand)) is None

    def probe_reference(self, task: Task, seeds: list[int], init_seed: int = 0,
                        return_inputs: bool = False, time: bool = False) -> ReferenceProbe:
        """Run a reference module on given seeds (task distribution) in a sandbox. Admitted
        for its footprint like a judgement; out of memory, it runs again alone."""
        problem = static_check_task(task.source)
        if problem:
            return ReferenceProbe(False, problem)
        sched = Schedule([Trial(int(s)) for s in seeds], self._schedule(task).timing_seeds, [])

        def probe() -> ReferenceRun:
            return run_reference(task.source, self.config, sched, self.spares.take,
                                 time_it=time and self.config.timed, init_seed=init_seed,
                                 want_inputs=return_inputs, plan=self.memory, cached=False)
        with self.memory.gate.shared():
            run = probe()
        if not run.ok and out_of_memory("invalid_task", run.reason) and not self.aborted:
            with self._released_alone(None) as free:
                run = probe()
            if not run.ok:
                run.reason += _alone_note(free)
        if not run.ok:
            return ReferenceProbe(False, run.reason)
        results = [run.trials[Trial(int(s))] for s in seeds]
        return ReferenceProbe(
            True, outputs=[_flatten_outputs(r.outputs) for r in results],
            inputs=[_flatten_outputs(r.inputs) if r.inputs is not None else [] for r in results],
            runtime_ms=run.timing, peak_mem_bytes=run.peak_mem_bytes,
            forward_peak_bytes=run.forward_peak_bytes,
            mutated_inputs=sorted({i for r in results for i in r.mutated}))

    @property
    def gpu_name(self) -> str | None:
        """The GPU judged on (probed at start, then as the reference workers report it)."""
        return self._gpu_name

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
                             c.timing_max_trials, c.timing_checked_calls, c.timing_min_trials,
                             poke_trial=c.poke_trial)

    def _judge_alone(self, task: Task, cand: Candidate, first: Verdict) -> Verdict:
        """Judge again with nothing else in flight and the memory the judge keeps released
        (an out-of-memory verdict may be its neighbours' doing). Out of memory again, the
        verdict says what the task needs and what the GPU had free: the task is blamed (
        invalid_task) only when its reference alone did not fit."""
        with self._released_alone(task) as free:
            if self.aborted:  # Ctrl-C while it waited for the others
                return first
            self.references.restart(task)
            v = self._judge(task, cand)
        v.flags.append("judged_alone_after_oom")
        if out_of_memory(v.status, v.reason):
            v.reason += _alone_note(free)
            handle = self.references.get(task)
            run = handle.run if handle.has_outputs.is_set() else None
            if v.status != "invalid_task" and run is not None and run.ok:
                # the reference fits alone: the candidate needed more than the GPU had
                v.reason += f" ({self.memory.describe_need(run.footprint)})"
        else:
            v.reason += f" (judged again alone: {first.reason[:160]})"
        return v

    @contextlib.contextmanager
    def _released_alone(self, task: Task | None):
        """Alone (memory_gate.MemoryGate.alone), with the other tasks' references dropped, no
        spare kept and the judge's cached blocks freed; yields the device memory then free."""
        with self.memory.gate.alone():
            self.references.clear(keep=task.hash if task is not None else None)
            self.spares.pause()
            try:
                gc.collect()
                if self.config.device == "cuda":
                    import torch
                    torch.cuda.empty_cache()
                yield self.memory.free_now()
            finally:
                self.spares.resume()

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
                            time_it=cfg.timed and cached is None, publish=publish,
                            plan=self.memory)
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
        """Load (import, compile, construct) the candidate while the reference is computed
        elsewhere, then judge it against the reference (judgement.py)."""
        t_take = time.perf_counter()
        try:
            w = self.spares.take("cand")
        except (WorkerDied, WorkerTimeout) as e:
            return Verdict(status="runtime_error", backend=backend,
                           reason=f"could not start a sandbox worker: {e}")
        reference = self.references.get(task)  # started now, it runs while this one loads
        with w.released():
            self._live.add(w)
            paths = write_sources(w, task, cand)
            held = HeldCandidate(w)
            # take_s: waiting for a worker (seconds when no spare was ready and one had to start)
            phases: dict[str, float] = {"take_s": time.perf_counter() - t_take}
            try:
                return self._load_and_judge(task, cand, backend, held, reference, paths, phases)
            except WorkerTimeout:
                return timeout_verdict(held, self.config, backend)
            except WorkerDied as e:
                return died_verdict(e, held.phase, w, backend)
            except (DecodeError, KeyError, TypeError, ValueError) as e:
                return Verdict(status="incorrect", backend=backend, flags=["bad_reply"],
                               reason=f"the candidate's outputs could not be read: {e}")
            finally:
                self._release(held)

    def _load_and_judge(self, task: Task, cand: Candidate, backend: str, held: HeldCandidate, reference,
                        paths: dict, phases: dict[str, float]) -> Verdict:
        """Load the candidate in `held.worker`, wait for its task's reference outputs (or start
        the reference beside it, for a streamed task), then judge it; `phases` gains the
        loading and the waiting. Worker failures propagate (see _judge_in_worker)."""
        cfg, w = self.config, held.worker
        t0 = time.perf_counter()
        info = w.request({"op": "load", "role": "candidate", **paths, "device": cfg.device,
                          "transfer": cfg.transfer_mode, **self.builds.load_fields(w, cand.hash),
                          "init_seed": 0, **cfg.load_options()},
                         cfg.load_timeout_s)
        phases["load_s"] = time.perf_counter() - t0
        ref = reference.outputs()
        if not ref.ok:
            return Verdict(status="invalid_task", reason=ref.reason, backend=backend)
        if not info.get("ok"):
            return Verdict(status=worker_status(info.get("status")), backend=backend,
                           reason=_loading_reason(info), log_tail=w.log_tail())
        self.builds.keep(w, cand.hash)
        phases["reference_wait_s"] = time.perf_counter() - t0 - phases["load_s"]
        if ref.streamed:  # its reference runs beside it (reference.StreamedReference)
            held.oracle = StreamedReference(task.source, cfg, self.spares.take)
            self._live.add(held.oracle.w)
            problem = held.oracle.start()
            if problem:
                return Verdict(status="invalid_task", reason=problem, backend=backend)
        held.judgement = CandidateJudgement(self, w, reference, ref, backend, phases, held.oracle)
        v = held.judgement.run(held.arena)
        v.memory = held.judgement.memory
        v.log_tail = w.log_tail()
        v.phases_s = {k: round(x, 4) for k, x in phases.items()}
        return v

    def _release(self, held: HeldCandidate) -> None:
        """After a judgement, whatever became of it: the arena unmapped before the worker is
        killed, and a large grant released only once its workers' memory is back."""
        held.arena.clear()
        grant = held.judgement.grant if held.judgement is not None else None
        big = grant is not None and grant.nbytes >= WAIT_EXIT_BYTES
        if held.oracle is not None:
            self._live.discard(held.oracle.w)
            held.oracle.close(wait=big)
        if big:
            held.worker.close(wait=True)  # their memory back before the grant goes
        self._live.discard(held.worker)
        if grant is not None:
            grant.release()


def _alone_note(free: int | None) -> str:
    """What a verdict that ran out of memory alone adds: what the GPU had free."""
    if free is None:
        return " (judged again alone: still out of memory)"
    return f" (judged again alone: the GPU had {gib(free)} free)"


def _default_work_dir() -> str:
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"kernelzero-{os.getuid()}")
