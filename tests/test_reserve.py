"""The memory a worker reserves once admitted (reserve.py, the `reserve` command): on a GPU, used
by the trials instead of new `cudaMalloc` calls."""

import pytest
import torch

from kernelzero.eval import EvalConfig, RuntimeConfig
from kernelzero.eval.worker.worker import Worker

TASK = """import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(1024, 1024)
    def forward(self, x, y, k):
        return torch.relu(self.fc(x)) + y * k
def get_inputs():
    return [torch.randn(2048, 1024), torch.randn(2048, 1024), 3]
def get_init_inputs():
    return []
"""


def test_config():
    cfg = EvalConfig(runtime=RuntimeConfig(load_reserve_factor=2.5, load_reserve_max_mb=10))
    assert cfg.load_options() == {"ipc_pool": True, "ipc_min_bytes": 2 << 20, "ipc_arena": True}
    no_pool = EvalConfig(runtime=RuntimeConfig(ipc_output_pool=False))
    assert no_pool.load_options()["ipc_pool"] is False
    for bad in ({"load_reserve_factor": -1}, {"load_reserve_max_mb": -1}, {"ipc_min_bytes": -1}):
        with pytest.raises(ValueError, match=next(iter(bad))):
            RuntimeConfig(**bad)


def _load(tmp_path, device, reserve_bytes=0, **options):
    (tmp_path / "task.py").write_text(TASK)
    w = Worker()
    w.out_dir = str(tmp_path)
    reply = w.load({"device": device, "role": "reference", "task_path": str(tmp_path / "task.py"),
                    "init_seed": 0, **options})
    if reserve_bytes and reply.get("ok"):
        reply.update(w.reserve({"bytes": reserve_bytes}))
    return w, reply


def test_no_reserve_on_the_cpu(tmp_path):
    w, reply = _load(tmp_path, "cpu")
    assert reply == {"ok": True}
    assert w.reserve({"bytes": 1 << 20}) == {"ok": True, "reserved_bytes": 0}


def test_a_reserve_that_fails_never_fails(tmp_path, monkeypatch):
    # as on a GPU whose context the candidate's import broke: no CUDA call works here
    monkeypatch.setattr(Worker, "_cuda_ready", lambda self: True)
    w, reply = _load(tmp_path, "cpu")
    assert w.reserve({"bytes": 1 << 20}) == {"ok": True, "reserved_bytes": 0}


@pytest.mark.gpu
def test_the_trials_allocate_from_the_reserve_not_from_the_driver(tmp_path):
    torch.cuda.init()
    torch.zeros(1, device="cuda")  # a warmed spare's context
    torch.cuda.empty_cache()
    segments = torch.cuda.memory_stats().get("segment.large_pool.allocated", 0)
    inputs = 2 * 2048 * 1024 * 4
    w, reply = _load(tmp_path, "cuda", reserve_bytes=8 * inputs)
    assert reply["ok"] and reply["reserved_bytes"] == 8 * inputs
    assert torch.cuda.max_memory_allocated() < reply["reserved_bytes"]  # peak stats were reset
    after_reserve = torch.cuda.memory_stats()["segment.large_pool.allocated"]
    assert after_reserve == segments + 1
    assert w.build({"init_seed": 0})["ok"]
    out = w.run({"trials": [{"seed": 1}, {"seed": 2}, {"seed": 3}]})
    assert out["ok"], out
    assert torch.cuda.memory_stats()["segment.large_pool.allocated"] == after_reserve


@pytest.mark.gpu
@pytest.mark.parametrize("ipc_pool", [True, False])
def test_shared_outputs_get_allocations_of_their_own(tmp_path, ipc_pool):
    """The judge maps a shared output's whole allocation: with the output pool that allocation is
    output-sized (8 MiB here, rounded to the allocator's 20 MiB segment), without it the copy is
    cut from the reserve and the judge would map all of it."""
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    w, reply = _load(tmp_path, "cuda", reserve_bytes=128 << 20, transfer="ipc",
                     ipc_pool=ipc_pool)
    assert reply["ok"] and reply["reserved_bytes"] > 64 << 20
    assert w.build({"init_seed": 0})["ok"]
    out = w.run({"trials": [{"seed": 1}, {"seed": 2}]})
    assert out["ok"], out
    segments = [(s["address"], s["total_size"]) for s in torch.cuda.memory_snapshot()]
    sizes = [next(n for a, n in segments if a <= t.data_ptr() < a + n) for t in w._keep]
    assert len(sizes) == 2
    if ipc_pool:
        assert all(n <= 20 << 20 for n in sizes), sizes
    else:
        assert all(n >= reply["reserved_bytes"] for n in sizes), sizes
    w._keep.clear()


@pytest.mark.gpu
@pytest.mark.parametrize("min_bytes", [0, 16 << 20])
def test_outputs_under_ipc_min_bytes_go_through_host_memory(tmp_path, min_bytes):
    """RuntimeConfig.ipc_min_bytes: an 8 MiB output is shared over CUDA IPC above the threshold and
    written to host memory, with the right values, under it."""
    from kernelzero.eval.transport.tensorio import decode
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    w, reply = _load(tmp_path, "cuda", transfer="ipc", ipc_pool=True, ipc_min_bytes=min_bytes)
    assert reply["ok"] and w.build({"init_seed": 0})["ok"]
    out = w.run({"trials": [{"seed": 1}]})
    assert out["ok"], out
    item = out["trials"][0]["outputs"]
    shared = min_bytes == 0
    assert ("ipc" in item["desc"]) is shared and len(w._keep) == int(shared)
    if not shared:
        got = decode(item["desc"], tmp_path / item["file"]).tensor
        with torch.no_grad():
            expected = w.model(*w.make_inputs(1)).cpu()
        assert got.device.type == "cpu" and torch.allclose(got, expected, rtol=1e-6, atol=1e-6)
    w._keep.clear()
