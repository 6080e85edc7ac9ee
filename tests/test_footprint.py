"""A task's footprint (footprint.py) learned without allocating, and what the judge plans from it
(memory_plan.py)."""
import random
import types

import pytest
import torch

from kernelzero.eval import EvalConfig, RuntimeConfig
from kernelzero.eval.device.footprint import Footprint, measure
from kernelzero.eval.device.memory_plan import MemoryPlan

GiB = 2 ** 30


def _module(source: str):
    m = types.ModuleType("kz_task")
    exec(source, m.__dict__)
    return m


BIG = _module("""
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(1024, 1024)
        self.bn = torch.nn.BatchNorm1d(1024)
    def forward(self, x, k):
        y = torch.abs(x)          # 8 GiB of scratch, freed before the output is made
        s = y.sum(1, keepdim=True)
        del y
        return (x / s).mul_(k)
def get_inputs():
    return [torch.rand(2 ** 21, 1024), 3]   # 8 GiB if it were real
def get_init_inputs():
    return []
""")


def test_measure_learns_inputs_outputs_weights_and_the_forward_peak_without_allocating():
    fp = measure(torch, BIG)
    assert fp.known and fp.input_bytes == 8 * GiB and fp.output_bytes == 8 * GiB
    assert fp.weight_bytes == (1024 * 1024 + 1024) * 4 + (4 * 1024 * 4 + 8)  # fc, bn (+ count)
    # |x| (8 GiB) lives until the output (8 GiB) is made: the peak is one of them plus the sums
    assert 8 * GiB < fp.forward_bytes < 8 * GiB + (64 << 20)


def test_measure_touches_no_real_state():
    random.seed(3)
    expected_py = random.random()
    random.seed(3)
    torch.manual_seed(5)
    expected_torch = torch.rand(1)
    torch.manual_seed(5)
    m = _module("""
import random, torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(4)
    def forward(self, x):
        return self.bn(x)
def get_inputs():
    return [torch.randn(random.randint(2, 9), 4)]
def get_init_inputs():
    return []
""")
    fp = measure(torch, m)
    assert fp.known and fp.output_bytes == fp.input_bytes
    assert random.random() == expected_py and torch.equal(torch.rand(1), expected_torch)


def test_measure_falls_back_where_the_fake_run_fails_and_never_raises():
    reads = _module("""
import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x[: int(x.sum().item()) % 3 + 1]
def get_inputs():
    return [torch.randn(1000)]
def get_init_inputs():
    return []
""")
    fp = measure(torch, reads)
    assert fp.known and fp.input_bytes == 4000 and fp.output_bytes == 0
    assert fp.forward == 4000  # estimated: one scratch tensor the size of the inputs
    exits = _module("def get_inputs():\n    raise SystemExit(3)\n")
    assert measure(torch, exits) == Footprint()


def test_measured_figures_replace_the_estimate():
    fp = Footprint(input_bytes=100, output_bytes=0, known=True)
    got = fp.with_measured(forward_peak_bytes=450, output_bytes=50)
    assert (got.output_bytes, got.forward_bytes, got.measured) == (50, 350, True)
    assert Footprint.from_dict(got.to_dict()) == got
    assert Footprint.from_dict({"input_bytes": "x"}) == Footprint()


def test_worker_and_judge_bytes():
    fp = Footprint(input_bytes=8, output_bytes=4, weight_bytes=1, forward_bytes=6, known=True)
    # a candidate: inputs + pristine copy + forward + its shared copies
    assert fp.worker_bytes(1) == 1 + 16 + 6 + 4
    assert fp.worker_bytes(3) == 1 + 16 + 6 + 12
    # a reference shares in place: the output it holds is part of the forward's
    assert fp.worker_bytes(1, copies=False) == 1 + 16 + 6
    assert fp.judge_bytes(2, chunk_bytes=2) == 8 + 8
    # inputs too large to copy are held once: half the card stays half the card
    half = Footprint(input_bytes=64 * GiB, output_bytes=4096, forward_bytes=4096, known=True)
    assert half.worker_bytes(1) == 64 * GiB + 2 * 4096


def test_the_plan_streams_tasks_too_large_to_keep_and_sizes_requests():
    cfg = EvalConfig(runtime=RuntimeConfig(memory_budget_mb=100 * 1024,
                                           reference_store_mb=16 * 1024, stream_chunk_mb=1024))
    plan = MemoryPlan(cfg)
    huge = Footprint(input_bytes=6 * GiB, output_bytes=6 * GiB, known=True)
    small = Footprint(input_bytes=64 << 20, output_bytes=256 << 20, known=True)
    assert plan.streamed(huge, 12) and not plan.streamed(small, 12)
    assert plan.slots(huge, 12) == 1 and plan.slots(small, 12) == 4
    assert plan.slots(Footprint(), 12) == 12
    assert plan.judgement_bytes(huge, 9, 3, streamed=True) > \
        plan.judgement_bytes(huge, 9, 3, streamed=False) - huge.stored_bytes(12)
    assert plan.reference_bytes(small, 12, False) >= small.stored_bytes(12)
    assert MemoryPlan(EvalConfig()).budget_bytes() is None  # no limit on the CPU
    gpu = MemoryPlan(EvalConfig(device="cuda", runtime=RuntimeConfig(memory_budget_mb=100 * 1024)))
    assert gpu.reserve_bytes(small, 8 * GiB) == 6 * (64 << 20)  # its trials' memory, early
    assert gpu.reserve_bytes(small, 100 << 20) == 100 << 20      # at most what was granted
    assert gpu.reserve_bytes(huge, 100 * GiB) == 0  # inputs over the cap: no reserve at all
    assert MemoryPlan(EvalConfig(runtime=RuntimeConfig(memory_budget_mb=8192))).store_limit() == GiB


def test_the_budget_counts_only_spares_not_started_yet(monkeypatch):
    # The driver's free memory already lacks a started spare's CUDA context: counting its overhead
    # again shut an 80 GB card's budget with a trainer's 72 spares (every judgement then ran
    # alone). Spares still to start are counted, since they will take their memory later.
    free = 60 * GiB
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (free, 80 * GiB))
    cfg = EvalConfig(device="cuda")
    rt = cfg.runtime
    margin, overhead = rt.memory_margin_mb << 20, rt.worker_overhead_mb << 20
    started = MemoryPlan(cfg, spares=40, spares_ready=lambda: 40)
    assert started.budget_bytes() == free - margin
    some = MemoryPlan(cfg, spares=40, spares_ready=lambda: 30)
    assert some.budget_bytes() == free - margin - 10 * overhead
    unknown = MemoryPlan(cfg, spares=72)  # nothing says what is started: all of them counted
    assert unknown.budget_bytes() == 0


def test_the_evaluator_tells_its_plan_how_many_spares_are_started(tmp_path):
    from kernelzero.eval import Evaluator
    with Evaluator(EvalConfig(max_workers=1, work_dir=str(tmp_path),
                              runtime=RuntimeConfig(prestart=False))) as ev:
        assert ev.memory.spares_ready is not None and ev.memory.spares_ready() == ev.spares.ready() == 0


@pytest.mark.parametrize("bad", [{"memory_budget_mb": -1}, {"reference_store_mb": -2},
                                 {"stream_chunk_mb": -1}, {"compile_jobs": 0}])
def test_memory_knobs_are_validated(bad):
    with pytest.raises(ValueError, match=next(iter(bad))):
        RuntimeConfig(**bad)
