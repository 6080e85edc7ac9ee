"""The worker's correctness trials (trials.py), run in this process on the CPU: buffers reused by
trial number across requests, the poke trial, and the chunked checksum and mutation check."""
import pytest
import torch

from kernelzero.eval.worker import trials as trials_mod
from kernelzero.eval.schedule import make_schedule
from kernelzero.eval.worker.worker import Worker

TASK = """import torch
SEEN = []
class Model(torch.nn.Module):
    def forward(self, x, idx):
        SEEN.append((x.data_ptr(), x.clone(), idx.clone()))
        return x * 2
def get_inputs():
    return [torch.randn(64, 33), torch.randint(0, 7, (50,))]
def get_init_inputs():
    return []
"""


def _worker(tmp_path, role="candidate"):
    (tmp_path / "task.py").write_text(TASK)
    (tmp_path / "cand.py").write_text("from kz_reference import Model as ModelNew\n")
    w = Worker()
    w.out_dir = str(tmp_path)
    reply = w.load({"device": "cpu", "role": role, "task_path": str(tmp_path / "task.py"),
                    "candidate_path": str(tmp_path / "cand.py"), "init_seed": 0})
    assert reply["ok"], reply
    assert w.build({"init_seed": 0})["ok"]
    return w


def _seen(w):
    return w.ref.SEEN


def test_odd_trials_and_the_poke_trial_reuse_the_buffers_of_the_trial_before(tmp_path):
    w = _worker(tmp_path)
    sched = make_schedule(7, "h", 4, (), 10, 3, 10, poke_trial=True)
    trials = [{**t.as_dict(), "index": i} for i, t in enumerate(sched.correctness)]
    assert [bool(t.get("poke")) for t in trials] == [False, False, True, False, False]
    # one request per trial: the rule follows the trial numbers, not the requests
    replies = [w.run({"trials": [t], "reuse": True}) for t in trials]
    assert all(r["ok"] for r in replies)
    ptrs = [p for p, _, _ in _seen(w)]
    assert ptrs[1] == ptrs[0] and ptrs[2] == ptrs[1] and ptrs[3] == ptrs[2]  # 3 is odd
    assert ptrs[4] != ptrs[3]  # fresh buffers, drawn while the old ones were still held
    (_, x1, i1), (_, x2, i2) = _seen(w)[1], _seen(w)[2]
    changed = (x1 != x2).sum().item()
    assert 0 < changed <= trials_mod.POKE_ELEMENTS  # the same inputs, a few elements changed
    assert set(x2.flatten().tolist()) <= set(x1.flatten().tolist())  # values of its own
    assert set(i2.tolist()) <= set(i1.tolist())  # indices stay valid indices
    # the digest is of the values the module got
    assert replies[2]["trials"][0]["input_digest"] != replies[1]["trials"][0]["input_digest"]


def test_the_reference_draws_every_trial_afresh_and_pokes_the_same_way(tmp_path):
    (tmp_path / "c").mkdir()
    (tmp_path / "r").mkdir()
    cand, ref = _worker(tmp_path / "c"), _worker(tmp_path / "r", role="reference")
    sched = make_schedule(7, "h", 3, (), 10, 3, 10, poke_trial=True)
    trials = [{**t.as_dict(), "index": i} for i, t in enumerate(sched.correctness)]
    got_c = cand.run({"trials": trials})
    got_r = ref.run({"trials": trials})
    assert ref._base is None and cand._base is not None
    assert [t["input_digest"] for t in got_c["trials"]] == \
        [t["input_digest"] for t in got_r["trials"]]
    assert all(torch.equal(a[1], b[1]) for a, b in zip(_seen(cand), _seen(ref)))


def test_chunked_checksum_and_mutation_check_match_the_whole_tensor_ones(monkeypatch):
    x = torch.randn(1000, dtype=torch.float32)
    x[17] = float("nan")
    whole_sum = trials_mod.abs_sum(torch, x[:0].new_tensor([]))  # empty: a zero
    assert float(whole_sum) == 0.0
    monkeypatch.setattr(trials_mod, "CHUNK", 64)
    assert torch.isnan(trials_mod.abs_sum(torch, x))  # NaN propagates from its chunk
    y = torch.randn(1000)
    monkeypatch.setattr(trials_mod, "CHUNK", 1 << 24)
    whole = trials_mod.abs_sum(torch, y)
    monkeypatch.setattr(trials_mod, "CHUNK", 64)
    assert float(trials_mod.abs_sum(torch, y)) == pytest.approx(float(whole), rel=1e-12)
    same = x.clone()
    assert bool(trials_mod._same(torch, x, same))  # NaN equals NaN
    same[999] += 1
    assert not bool(trials_mod._same(torch, x, same))  # found in the last chunk
    assert trials_mod._same(torch, x, x.double()) is False


MUTATES = """import torch
class Model(torch.nn.Module):
    def forward(self, x, idx):
        if x.numel() > 100:  # two values swapped in place: the same sums, not the same input
            a, b = x[3, 5].item(), x[7, 9].item()
            x[3, 5], x[7, 9] = b, a
        return x * 2
def get_inputs():
    return [torch.randn(64, 33), torch.randint(0, 7, (50,))]
def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("copy_max", [1 << 30, 100])
def test_mutations_are_seen_with_a_pristine_copy_or_with_checksums(tmp_path, monkeypatch,
                                                                   copy_max):
    monkeypatch.setattr(trials_mod, "COPY_MAX_BYTES", copy_max)
    (tmp_path / "task.py").write_text(MUTATES)
    w = Worker()
    w.out_dir = str(tmp_path)
    assert w.load({"device": "cpu", "role": "reference", "task_path": str(tmp_path / "task.py"),
                   "init_seed": 0})["ok"]
    assert w.build({"init_seed": 0})["ok"]
    reply = w.run({"trials": [{"seed": 1}, {"seed": 2, "index": 1}]})
    assert reply["ok"] and [t["mutated"] for t in reply["trials"]] == [[0], [0]]


def test_large_inputs_are_never_held_twice(tmp_path, monkeypatch):
    monkeypatch.setattr(trials_mod, "COPY_MAX_BYTES", 100)
    w = _worker(tmp_path)
    clones = []
    real_clone = torch.Tensor.clone
    monkeypatch.setattr(torch.Tensor, "clone", lambda t, *a, **k: (
        clones.append(t.numel()), real_clone(t, *a, **k))[1])
    first = w._base
    assert w.run({"trials": [{"seed": 1, "index": 0}], "reuse": True})["ok"]
    kept = w._base
    assert kept is not first and kept is not None
    assert w.run({"trials": [{"seed": 2, "index": 1}], "reuse": True})["ok"]
    assert w._base is not kept  # dropped before the draw, not written into
    pristine = [n for n in clones if n == 64 * 33]
    assert len(pristine) == 2  # the task's own (SEEN), one a trial: no pristine copies


@pytest.mark.parametrize("index", [0, 1, 2])
def test_large_inputs_of_the_last_trial_are_dropped_before_any_new_draw(tmp_path, monkeypatch,
                                                                         index):
    """A fresh draw (even index) replaces the kept buffers, a reused one (odd) writes into them:
    either way, inputs too large to hold twice are let go before the new ones are drawn (on an
    H200, a task whose inputs take 63 GiB was out of memory at its third trial)."""
    monkeypatch.setattr(trials_mod, "COPY_MAX_BYTES", 100)
    w = _worker(tmp_path)
    assert w.run({"trials": [{"seed": 1, "index": 0}], "reuse": True})["ok"]
    assert w._base is not None
    held_at_draw = []
    real_make = w.make_inputs
    monkeypatch.setattr(w, "make_inputs", lambda *a: (held_at_draw.append(w._base), real_make(*a))[1])
    assert w.run({"trials": [{"seed": 2, "index": index}], "reuse": True})["ok"]
    assert held_at_draw == [None]


@pytest.mark.parametrize("dist", ["normal", "scaled", "heavy"])
def test_a_hardening_draw_lets_the_task_s_own_draw_go_first(tmp_path, monkeypatch, dist):
    """A hardening trial draws the task's inputs for their shapes, then other values of the same
    shape: the first must be gone before the second is made (on an H200 a task with 63 GiB of
    inputs peaked at 126 GiB there: the loop over the inputs kept the original alive)."""
    import weakref
    w = _worker(tmp_path, role="reference")
    drawn = []
    real_get = w.ref.get_inputs

    def get_inputs():
        xs = real_get()
        drawn.extend(weakref.ref(x) for x in xs)
        return xs
    monkeypatch.setattr(w.ref, "get_inputs", get_inputs)
    alive_at_redraw = []
    real_redistribute = w._redistribute
    monkeypatch.setattr(w, "_redistribute", lambda *a: (
        alive_at_redraw.append(drawn[0]() is not None), real_redistribute(*a))[1])
    inputs = w.make_inputs(3, dist)
    assert alive_at_redraw == [False]  # only x is floating point: one redraw, after x was freed
    assert inputs[0].shape == (64, 33) and inputs[1] is not None


def test_a_poke_writes_each_position_once_so_every_process_gets_the_same_inputs():
    """With a repeated destination, CUDA's index_put_ stores any one of the values: the reference's
    and the candidate's inputs then differed and an honest kernel was rejected as tampering (a
    300-element input on the H200). Destinations are distinct, the first draw wins, and inputs
    large enough for distinct draws are poked where they always were."""
    for seed in range(50):
        dst, src = trials_mod.poke_positions(torch, 5, torch.Generator().manual_seed(seed))
        assert len(dst) == len(set(dst)) == len(src) and 1 <= len(dst) <= trials_mod.POKE_ELEMENTS
    x = torch.arange(5.0)
    trials_mod.poke(torch, [x], 3)
    dst, src = trials_mod.poke_positions(torch, 5, torch.Generator().manual_seed(3))
    want = torch.arange(5.0)
    want[dst] = want[src]
    assert torch.equal(x, want)
    at = torch.randint(4000, (2, trials_mod.POKE_ELEMENTS), generator=torch.Generator().manual_seed(1))
    assert trials_mod.poke_positions(torch, 4000, torch.Generator().manual_seed(1)) == tuple(at.tolist())
