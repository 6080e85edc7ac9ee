"""MemoryPlan: how much device memory each part of a judgement is admitted for, and how a task's
trials are run to stay within it (RuntimeConfig's memory knobs; figures from footprint.py).

- `budget_bytes`: what the judge plans into (memory_gate.MemoryGate's capacity).
- `slots`: trials per `run` request, so that the outputs one request returns (held by the
  worker and copied by the judge until compared) stay under `stream_chunk_mb`.
- `streamed`: whether a task's reference outputs are too large to keep (`reference_store_mb`):
  then every judgement runs the reference again beside its candidate, one trial at a time.
- `reference_bytes` / `judgement_bytes`: what a reference run and a judgement hold at their peak,
  each worker counted with its overhead (CUDA context and libraries).
"""
from __future__ import annotations

from kernelzero.eval.config import EvalConfig
from kernelzero.eval.device.footprint import Footprint, gib
from kernelzero.eval.device.memory_gate import Grant, MemoryGate

MiB = 2 ** 20


IN_PLACE_BYTES = 256 * MiB  # a reference's outputs from this size are shared, not copied


class MemoryPlan:
    def __init__(self, cfg: EvalConfig, spares: int = 0, reclaim=None, spares_ready=None):
        """spares: the spare workers kept started (their overhead leaves the budget);
        reclaim: the gate's (memory_gate.MemoryGate); spares_ready: how many spares are
        started now (their memory is already gone from what the driver reports free)."""
        self.cfg, self.spares, self.spares_ready = cfg, spares, spares_ready
        self._budget: int | None = None
        self._measured = False
        self.gate = MemoryGate(None, reclaim)

    def measures(self) -> bool:
        """Whether reference loads measure the task's footprint (footprint.measure: FakeTensorMode
        costs 0.3-3 s a process): on cuda, or on the CPU where a budget or a store limit asks."""
        rt = self.cfg.runtime
        return self.cfg.device == "cuda" or rt.memory_budget_mb is not None \
            or rt.reference_store_mb is not None

    def admit(self, nbytes: int, what: str) -> Grant:
        """A grant of `nbytes` from the gate, whose capacity is the budget (read at first use)."""
        if self.gate.capacity is None:
            self.gate.capacity = self.budget_bytes()
        return self.gate.admit(nbytes, what)

    def free_now(self) -> int | None:
        """Device memory free right now (None off cuda)."""
        if self.cfg.device != "cuda":
            return None
        import torch
        return int(torch.cuda.mem_get_info()[0])

    def in_place_bytes(self) -> int:
        """From what size a reference shares its outputs as they are (cuda_ipc.Sharing)."""
        return IN_PLACE_BYTES if self.cfg.device == "cuda" else 0

    def describe_need(self, fp: Footprint, peak: int | None = None) -> str:
        """What running a task's reference takes, for a message."""
        need = fp.worker_bytes(1, copies=False) + self.cfg.runtime.worker_overhead_mb * MiB
        text = f"the reference needs ~{gib(need)}: {fp.describe()}"
        if peak:
            text += f"; it held {gib(peak)} when it ran out"
        return text

    def budget_bytes(self) -> int | None:
        """RuntimeConfig.memory_budget_mb, or on cuda the memory free now (read once) less the
        margin and the overhead of the spares not started yet; None (no limit) on the CPU.
        A started spare's CUDA context is already missing from the free memory: counting its
        overhead again shut the budget on an 80 GB card with a trainer's 72 spares, and every
        judgement then ran alone (0.27 a second; docs/perf.md)."""
        rt = self.cfg.runtime
        if rt.memory_budget_mb is not None:
            return rt.memory_budget_mb * MiB
        if self.cfg.device != "cuda":
            return None
        if not self._measured:
            import torch
            free = torch.cuda.mem_get_info()[0]
            ready = self.spares_ready() if self.spares_ready is not None else 0
            to_start = max(0, self.spares - ready)
            self._budget = max(0, free - (rt.memory_margin_mb
                                          + to_start * rt.worker_overhead_mb) * MiB)
            self._measured = True
        return self._budget

    def store_limit(self) -> int | None:
        if self.cfg.runtime.reference_store_mb is not None:
            return self.cfg.runtime.reference_store_mb * MiB
        budget = self.budget_bytes()
        return None if budget is None else budget // 8

    def streamed(self, fp: Footprint, outputs: int) -> bool:
        """Whether `outputs` reference outputs of this task are too large to keep."""
        limit = self.store_limit()
        return limit is not None and fp.stored_bytes(outputs) > limit

    def slots(self, fp: Footprint, n: int) -> int:
        if not fp.output_bytes:
            return max(1, n)
        return max(1, min(n, (self.cfg.runtime.stream_chunk_mb * MiB) // fp.output_bytes))

    def reference_bytes(self, fp: Footprint, outputs: int, streamed: bool) -> int:
        """A reference run: its worker, and the outputs the judge keeps (cached tasks) or
        looks at in place one trial at a time (streamed ones)."""
        overhead = self.cfg.runtime.worker_overhead_mb * MiB
        if streamed:
            return fp.worker_bytes(1, copies=False) + overhead
        return (fp.worker_bytes(self.slots(fp, outputs), copies=False)
                + fp.stored_bytes(outputs) + overhead)

    def judgement_bytes(self, fp: Footprint, trials: int, checked: int, streamed: bool) -> int:
        """A candidate's judgement: its worker (its trials' and its timed calls' outputs held
        as copies), the judge's copies and comparison scratch, and for a streamed task the
        reference worker beside it."""
        rt = self.cfg.runtime
        overhead = rt.worker_overhead_mb * MiB
        held = max(1 if streamed else self.slots(fp, trials), checked)
        need = (fp.worker_bytes(held) + fp.judge_bytes(held, rt.stream_chunk_mb * MiB)
                + overhead)
        if streamed:
            need += fp.worker_bytes(1, copies=False) + overhead
        return need

    def reserve_bytes(self, fp: Footprint, granted: int) -> int:
        """What a worker takes from the driver before its GPU phases (reserve.py)."""
        rt = self.cfg.runtime
        if not rt.load_reserve_factor or self.cfg.device != "cuda":
            return 0
        cap = min(rt.load_reserve_max_mb * MiB, granted)
        if fp.input_bytes > cap:  # the inputs could not come from it: it would only add to them
            return 0
        want = int(rt.load_reserve_factor * fp.input_bytes) + fp.weight_bytes
        return min(want, cap)
