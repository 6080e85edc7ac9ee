"""A worker's arena (cuda_ipc.Arena): the one allocation its shared outputs are copied into, so
that the judge maps it once (a candidate's before the GPU lock is taken) instead of mapping an
allocation per output inside the lock's holds."""
import pytest
import torch

from kernelzero.eval.transport.cuda_ipc import ARENA_ALIGN, Arena, aligned, hold_arena, shared_bytes
from kernelzero.eval.transport.tensorio import TensorOut, decode
from kernelzero.eval.worker.worker import Worker

TASK = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x), x.sum()
def get_inputs():
    return [torch.randn(2048, 2048)]
def get_init_inputs():
    return []
"""
# The relu output: 16 MiB, over the caching allocator's 10 MiB, so that without an arena each
# copy gets a segment of its own (smaller ones share 20 MiB segments); the 4-byte sum goes
# through host memory.
OUT_BYTES = 2048 * 2048 * 4


def test_slices_are_aligned_copies_and_reset_starts_over():
    arena = Arena(torch.zeros(3 * ARENA_ALIGN, dtype=torch.uint8))
    a = torch.arange(10, dtype=torch.float32)
    b = torch.arange(6, dtype=torch.int64).reshape(2, 3)
    va, vb = arena.place(torch, a), arena.place(torch, b)
    assert torch.equal(va, a) and torch.equal(vb, b) and vb.shape == (2, 3)
    assert vb.data_ptr() - va.data_ptr() == ARENA_ALIGN  # the second slice starts aligned
    a += 1
    assert not torch.equal(va, a)  # a copy, not a view of the output
    assert arena.place(torch, torch.zeros(2 * ARENA_ALIGN, dtype=torch.uint8)) is None  # no room
    assert arena.place(torch, torch.zeros(0)) is None  # nothing to share
    arena.reset()
    assert arena.place(torch, b).data_ptr() == va.data_ptr()


def test_a_non_contiguous_output_is_placed_contiguous():
    arena = Arena(torch.zeros(ARENA_ALIGN, dtype=torch.uint8))
    t = torch.arange(12, dtype=torch.float32).reshape(3, 4).t()
    v = arena.place(torch, t)
    assert v.is_contiguous() and torch.equal(v, t)


class _FakeCuda:  # what shared_bytes reads of a CUDA tensor, on a machine without one
    is_cuda = True

    def __init__(self, n):
        self.n = n

    def numel(self):
        return self.n

    def element_size(self):
        return 4


def test_shared_bytes_counts_what_the_arena_would_hold():
    tree = (_FakeCuda(1000), [_FakeCuda(10), 3.0, None], TensorOut(_FakeCuda(2000), "cuda", True, []))
    assert shared_bytes(tree, 0) == aligned(4000) + aligned(40) + aligned(8000)
    assert shared_bytes(tree, 100) == aligned(4000) + aligned(8000)  # smaller: host memory
    assert shared_bytes(torch.ones(1000), 0) == 0  # a CPU tensor is never shared
    assert aligned(1) == ARENA_ALIGN and aligned(ARENA_ALIGN) == ARENA_ALIGN and aligned(0) == 0


def test_no_arena_without_cuda_ipc_and_a_malformed_one_is_refused(tmp_path):
    w = Worker()
    w.out_dir = str(tmp_path)
    reply = w.arena({"bytes": 1 << 20})
    assert reply["ok"] is False and "IPC" in reply["reason"]
    for bad in (None, {}, {"size_bytes": 0, "handle": "00", "storage_offset_bytes": 0},
                {"size_bytes": 10, "handle": 5, "storage_offset_bytes": 0}):
        with pytest.raises(ValueError, match="arena description"):
            hold_arena(bad)


@pytest.fixture
def worker(tmp_path):
    """A real worker process on the GPU (CUDA IPC cannot open a handle in its own process)."""
    from kernelzero.eval.sandbox.sandbox import SandboxLimits, SandboxWorker
    with SandboxWorker("cuda", SandboxLimits(), work_root=str(tmp_path), name="arena") as w:
        w.start()
        assert w.request({"op": "warm", "device": "cuda", "stages": ["context"]}, 120)["ok"]
        yield w


def _load(w, **load):
    task = f"{w.dir}/task.py"
    open(task, "w").write(TASK)
    reply = w.request({"op": "load", "role": "reference", "task_path": task, "device": "cuda",
                       "init_seed": 0, "transfer": "ipc", "ipc_pool": True,
                       "ipc_min_bytes": 1 << 20, **load}, 120)
    assert reply["ok"], reply
    assert w.request({"op": "build", "init_seed": 0}, 120)["ok"]


def _run(w, seeds):
    out = w.request({"op": "run", "trials": [{"seed": s} for s in seeds]}, 120)
    assert out["ok"], out
    return out


def _expected(seed):
    torch.manual_seed(seed)
    with torch.device("cuda"):
        return torch.relu(torch.randn(2048, 2048))


def _handle(trial):
    return trial["outputs"]["desc"]["items"][0]["ipc"]["handle"]


@pytest.mark.gpu
def test_a_premapped_arena_carries_every_trial_and_needs_no_mapping(worker):
    from kernelzero.eval.transport.cuda_ipc import SharedMappings
    _load(worker, ipc_arena=True)
    made = worker.request({"op": "arena", "bytes": 3 * aligned(OUT_BYTES)}, 120)
    assert made["ok"], made
    held = hold_arena(made["ipc"])  # the judge maps it before taking the GPU lock
    out = _run(worker, (1, 2, 3))
    mapped = SharedMappings()
    for seed, trial in zip((1, 2, 3), out["trials"]):
        desc = trial["outputs"]["desc"]["items"][0]
        assert desc["ipc"]["handle"] == made["ipc"]["handle"]
        assert desc["ipc"]["event_sync_required"] is False
        got = decode(trial["outputs"]["desc"], f"{worker.dir}/{trial['outputs']['file']}",
                     mapped=mapped)
        assert torch.equal(got[0].tensor, _expected(seed))
        assert "ipc" not in trial["outputs"]["desc"]["items"][1]  # 4 bytes: host memory
    assert mapped.map_s < 0.05  # the arena was mapped already: nothing left to map
    mapped.clear()
    # a fourth output in one command does not fit: it gets an allocation of its own
    more = _run(worker, (1, 2, 3, 4))
    handles = [_handle(t) for t in more["trials"]]
    assert handles[:3] == [made["ipc"]["handle"]] * 3 and handles[3] != handles[0]
    del held


@pytest.mark.gpu
def test_a_reference_makes_its_arena_at_its_first_output(worker):
    _load(worker, ipc_arena=True)
    out = _run(worker, (1, 2))
    assert len({_handle(t) for t in out["trials"]}) == 1
    ipc = out["trials"][0]["outputs"]["desc"]["items"][0]["ipc"]
    assert ipc["size_bytes"] == 2 * aligned(OUT_BYTES)
    last = out["trials"][1]["outputs"]
    assert torch.equal(decode(last["desc"], f"{worker.dir}/{last['file']}")[0].tensor, _expected(2))


@pytest.mark.gpu
def test_without_the_arena_each_output_has_its_own_allocation(worker):
    _load(worker, ipc_arena=False)
    out = _run(worker, (1, 2))
    assert len({_handle(t) for t in out["trials"]}) == 2
