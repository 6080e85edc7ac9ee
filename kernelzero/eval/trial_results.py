"""A trial's results as the judge holds them (`TrialResult`), read from a worker's `run` reply:
decoded into the judge's memory or mapped in place (`decode_trials`), or, for a streamed task,
only what the outputs say about the task (`_summary`); with the worker's own account of where
its trials spent their time (`worker_breakdown`, diagnostics).

For the reference's trials (reference.py, streamed_reference.py) and a candidate's
(judgement.py). Does not cover comparing outputs (compare.py) nor the `time` command
(time_command.py).
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelzero.eval.sandbox.sandbox import SandboxWorker
from kernelzero.eval.transport.cuda_ipc import SharedMappings
from kernelzero.eval.transport.tensorio import TensorOut, decode


@dataclass
class TrialResult:
    outputs: object                 # decoded (TensorOut / scalar / sequence); None: streamed
    digest: float                   # checksum of the inputs the worker generated
    mutated: list[int]              # inputs the module changed in place
    inputs_after: object = None     # decoded values of the mutated inputs after the call
    inputs: object = None           # decoded pristine inputs (probe only)
    out_bytes: int = 0              # the outputs' tensor bytes (streamed trials)
    known_finite: bool | None = None  # the outputs' finiteness, when they are not kept

    @property
    def finite(self) -> bool:
        return self.known_finite if self.known_finite is not None else _finite(self.outputs)


def _finite(obj) -> bool:
    import torch
    if isinstance(obj, TensorOut):
        t = obj.tensor
        if not (t.is_floating_point() or t.is_complex()):
            return True
        flat, chunk = t.reshape(-1), 1 << 25  # no whole-output boolean scratch
        return all(bool(torch.isfinite(flat[i:i + chunk]).all())
                   for i in range(0, flat.numel(), chunk))
    if isinstance(obj, (tuple, list)):
        return all(_finite(x) for x in obj)
    if isinstance(obj, float):
        return obj == obj and abs(obj) != float("inf")
    return True


def decode_trials(worker: SandboxWorker, reply: dict, want_inputs: bool = False,
                  mapped: SharedMappings | None = None,
                  keep_mapped: bool = False) -> list[TrialResult]:
    """Every trial's outputs (and inputs where sent), in the judge's own memory (or, with a
    `mapped` that does not copy, views of the worker's). Each shared allocation is mapped once
    for the whole reply and unmapped before this returns unless `keep_mapped`, under the
    caller's GPU lock (`mapped`, if given, counts the time spent mapping)."""
    out = []
    mapped = SharedMappings() if mapped is None else mapped

    def read(item):
        return decode(item["desc"], worker.path_of(item["file"]), mapped=mapped)
    for t in reply["trials"]:
        res = TrialResult(outputs=read(t["outputs"]), digest=float(t.get("input_digest", 0.0)),
                          mutated=[int(i) for i in t.get("mutated", [])])
        if "inputs_after" in t:
            res.inputs_after = read(t["inputs_after"])
        if want_inputs and "inputs" in t:
            res.inputs = read(t["inputs"])
        out.append(res)
    if not keep_mapped:
        mapped.clear()
    return out


def _summary(r: TrialResult) -> TrialResult:
    """A streamed trial: what the judge learns from the reference's outputs (their finiteness
    and size) and inputs, without keeping the outputs."""
    return TrialResult(outputs=None, digest=r.digest, mutated=r.mutated, known_finite=r.finite,
                       out_bytes=_nbytes(r.outputs))


def _nbytes(obj) -> int:
    if isinstance(obj, TensorOut):
        return obj.tensor.numel() * obj.tensor.element_size()
    if isinstance(obj, (tuple, list)):
        return sum(_nbytes(x) for x in obj)
    return 0


def worker_breakdown(reply: dict) -> dict:
    """Where the worker says its correctness trials spent their time (diagnostics only: the
    worker's word, never used for a verdict)."""
    try:
        trials = reply.get("trials") or []
        parts = {f"run_{k}_s": sum(float(t.get(f"{k}_ms", 0.0)) for t in trials) / 1e3
                 for k in ("inputs", "draw", "wall", "mutation_check")}
        if trials:
            parts["run_first_trial_s"] = sum(float(trials[0].get(f"{k}_ms", 0.0)) for k in
                                             ("inputs", "wall", "mutation_check")) / 1e3
        return parts
    except (TypeError, ValueError, AttributeError):
        return {}
