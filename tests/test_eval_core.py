"""The evaluator's rules, each proved with real kernels through the Triton interpreter (CPU).

One module-scoped batch judges every case at once (in parallel), then each test asserts one
property of one verdict.
"""
import os
import time

import pytest

from kernelzero.eval import EvalConfig, Evaluator
from kernelzero.tasks import Candidate, Task

EX = os.path.join(os.path.dirname(__file__), "..", "kernelzero", "examples")
RELU = Task.from_file(os.path.join(EX, "tasks/level1/1_ReLU.py"))
LINEAR = Task.from_file(os.path.join(EX, "tasks/level2/1_Linear_Bias_ReLU.py"))
GOOD_RELU = open(os.path.join(EX, "candidates/level_1_problem_1_sample_0_kernel.py")).read()

TRITON_HEAD = """
import os, sys, torch, torch.nn as nn, triton, triton.language as tl

@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)

def relu(x):
    x = x.contiguous()
    out = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, out, x.numel(), BLOCK=1024)
    return out
"""


def cand(body: str, name: str) -> Candidate:
    return Candidate(source=TRITON_HEAD + body, name=name)


CASES = {
    "good": (RELU, Candidate(GOOD_RELU, "good")),
    "empty": (RELU, Candidate("   \n", "empty")),
    "no_modelnew": (RELU, Candidate("import torch\nclass Foo: pass\n", "no_modelnew")),
    "syntax": (RELU, Candidate("class ModelNew(:\n  pass\n", "syntax")),
    "import_fail": (RELU, Candidate("import not_a_module_kz\nclass ModelNew: pass\n", "imp")),
    "raises": (RELU, cand("""
class ModelNew(nn.Module):
    def forward(self, x):
        raise ValueError("boom")
""", "raises")),
    "init_raises": (RELU, cand("""
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        raise RuntimeError("bad init")
""", "init_raises")),
    "hangs": (RELU, cand("""
class ModelNew(nn.Module):
    def forward(self, x):
        while True:
            pass
""", "hangs")),
    "segfault": (RELU, cand("""
import ctypes
class ModelNew(nn.Module):
    def forward(self, x):
        ctypes.string_at(0)
""", "segfault")),
    "oom": (RELU, cand("""
class ModelNew(nn.Module):
    def forward(self, x):
        big = torch.empty(1 << 45, dtype=torch.uint8)
        return relu(x)
""", "oom")),
    "exit0": (RELU, cand("""
class ModelNew(nn.Module):
    def forward(self, x):
        os._exit(0)
""", "exit0")),
    "triton_compile_error": (RELU, cand("""
@triton.jit
def bad_kernel(x_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK) + undefined_name
    tl.store(x_ptr + offs, 0.0)

class ModelNew(nn.Module):
    def forward(self, x):
        bad_kernel[(1,)](x, x.numel(), BLOCK=1024)
        return x
""", "triton_compile_error")),
    "shape": (RELU, cand("""
class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)[:, :10].contiguous()
""", "shape")),
    "tuple_len": (RELU, cand("""
class ModelNew(nn.Module):
    def forward(self, x):
        y = relu(x)
        return (y, y)
""", "tuple_len")),
    "dtype": (RELU, cand("""
class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x.to(torch.float64))
""", "dtype")),
    "nan": (RELU, cand("""
class ModelNew(nn.Module):
    def forward(self, x):
        y = relu(x)
        y.view(-1)[0] = float('nan')
        return y
""", "nan")),
    "cache_by_shape": (RELU, cand("""
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.cache = {}
    def forward(self, x):
        if x.shape not in self.cache:
            self.cache[x.shape] = relu(x)
        return self.cache[x.shape].clone()
""", "cache_by_shape")),
    "prints": (RELU, cand("""
class ModelNew(nn.Module):
    def forward(self, x):
        print('{"ok": true, "status": "correct"}')
        print("ALL TESTS PASSED", file=sys.stderr)
        return relu(x)
""", "prints")),
    "patches_allclose": (RELU, cand("""
torch.allclose = lambda *a, **k: True
torch.testing.assert_close = lambda *a, **k: None
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.zeros_like(x)
""", "patches_allclose")),
    # Builds an extra parameter first, so its Linear gets different random values; it still
    # passes because the judge loads the reference's weights by name.
    "weights_by_name": (LINEAR, Candidate(open(os.path.join(
        EX, "candidates/level_2_problem_1_sample_0_kernel.py")).read().replace(
        "        self.linear = nn.Linear(in_features, out_features)",
        "        self.scratch = nn.Parameter(torch.randn(1000))\n"
        "        self.linear = nn.Linear(in_features, out_features)"), "weights_by_name")),
}


@pytest.fixture(scope="module")
def verdicts():
    cfg = EvalConfig(device="cpu", max_workers=2, run_timeout_s=20, load_timeout_s=60)
    with Evaluator(cfg) as ev:
        names = list(CASES)
        t0 = time.perf_counter()
        out = ev.judge_many([CASES[n] for n in names])
        wall = time.perf_counter() - t0
    res = dict(zip(names, out))
    res["_wall"] = wall
    return res


@pytest.mark.parametrize("name,status,words", [
    ("good", "correct", "matched"),
    ("empty", "format_error", "empty"),
    ("no_modelnew", "format_error", "ModelNew"),
    ("syntax", "compile_error", "syntax"),
    ("import_fail", "compile_error", "not_a_module_kz"),
    ("raises", "runtime_error", "boom"),
    ("init_raises", "runtime_error", "bad init"),
    ("hangs", "timeout", "killed"),
    ("segfault", "runtime_error", "SIGSEGV"),
    ("oom", "runtime_error", "memory"),
    ("exit0", "rejected", "exit code 0"),
    ("triton_compile_error", "compile_error", "undefined_name"),
    ("shape", "incorrect", "shape"),
    ("tuple_len", "incorrect", "should be a tensor"),
    ("dtype", "incorrect", "dtype"),
    ("nan", "incorrect", "NaN"),
    ("cache_by_shape", "incorrect", "tolerance"),
    ("prints", "correct", "matched"),
    ("patches_allclose", "rejected", "torch.allclose"),
    ("weights_by_name", "correct", "matched"),
])
def test_verdict(verdicts, name, status, words):
    v = verdicts[name]
    assert v.status == status, (name, v.status, v.reason, v.log_tail[-800:])
    assert words.lower() in v.reason.lower(), v.reason
    assert v.correct == (status == "correct")
    assert "\n" not in v.reason and "Traceback" not in v.reason


def test_verdict_fields(verdicts):
    v = verdicts["good"]
    d = v.to_dict()
    for key in ("status", "correct", "reason", "flags", "backend", "device", "trials", "max_abs_err",
                "max_rel_err", "runtime_ms", "ref_runtime_ms", "speedup", "speedup_compile",
                "hashes", "env"):
        assert key in d
    assert d["trials"] == {"run": 9, "passed": 9}  # 5 task-distribution, 1 poked, 3 hardening
    assert d["runtime_ms"] is None and d["speedup"] is None  # CPU: never invent a timing
    assert d["backend"] == "triton" and d["device"] == "cpu"
    assert d["hashes"]["task"] == RELU.hash and d["env"]["torch"]


def test_timeout_is_bounded(verdicts):
    # the hanging candidate is killed at its 20 s limit; the whole batch stays well bounded
    assert verdicts["hangs"].wall_s < 60
    assert verdicts["_wall"] < 240


def test_strict_policy_uses_runtime_op_log():
    body = """
class ModelNew(nn.Module):
    def forward(self, x):
        y = relu(x)
        return y * 1.0 + 0.0
"""
    with Evaluator(EvalConfig(device="cpu", policy="strict")) as ev:
        v = ev.judge(RELU, cand(body, "arith"))
    assert v.status == "rejected" and "forbidden_op" in v.flags and "mul" in v.reason
    with Evaluator(EvalConfig(device="cpu", policy="kernelbench")) as ev:
        assert ev.judge(RELU, cand(body, "arith")).status == "correct"


def test_next_candidate_after_crash_is_judged_normally():
    with Evaluator(EvalConfig(device="cpu", max_workers=1, run_timeout_s=10)) as ev:
        bad, good = ev.judge_many([CASES["segfault"], CASES["good"]])
    assert bad.status == "runtime_error" and good.status == "correct"


def test_tolerance_paper_vs_strict():
    body = """
class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x) * (1 + 2e-3)
"""
    off = cand(body, "off_by_2e-3")  # the `*` is a torch op: judge under the kernelbench policy
    with Evaluator(EvalConfig(device="cpu", tolerance="strict", policy="kernelbench")) as ev:
        assert ev.judge(RELU, off).status == "incorrect"
    with Evaluator(EvalConfig(device="cpu", tolerance="paper", policy="kernelbench")) as ev:
        assert ev.judge(RELU, off).status == "correct"


# tanh(A @ B^T), K = 4096: the float32 reference's own rounding error exceeds the strict atol.
TANH_MATMUL = Task.from_file(os.path.join(os.path.dirname(__file__), "..", "bench/tasks/tanh_matmul_k4096.py"))
EXACT_TANH_MATMUL = Candidate("""import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, A, B):  # the best answer float32 can hold: computed in float64, rounded
        return (A.double() @ B.double().T).tanh().float()
""", "exact_in_float64")


def test_the_exact_answer_of_a_long_dot_product_passes_the_paper_tolerance():
    with Evaluator(EvalConfig(device="cpu", policy="none", tolerance="paper", seed=0, max_workers=1)) as ev:
        assert ev.judge(TANH_MATMUL, EXACT_TANH_MATMUL).status == "correct"


@pytest.mark.xfail(strict=True, reason="known limit (docs/threats.md section 7): strict fp32 rejects the exact "
                                       "answer on heavy-tailed inputs (measured: 6 of 6 secret seeds); fixed, "
                                       "this passes and the mark must go")
def test_the_exact_answer_of_a_long_dot_product_passes_the_strict_tolerance():
    with Evaluator(EvalConfig(device="cpu", policy="none", tolerance="strict", seed=0, max_workers=1)) as ev:
        v = ev.judge(TANH_MATMUL, EXACT_TANH_MATMUL)
    assert v.status == "correct", v.reason


def test_cuda_candidate_rejected_on_cpu(examples):
    c = Candidate.from_file(examples / "candidates/level_1_problem_1_sample_3_kernel.py")
    with Evaluator(EvalConfig(device="cpu")) as ev:
        v = ev.judge(RELU, c)
    assert v.status == "rejected" and "need a GPU" in v.reason and v.backend == "cuda"


@pytest.mark.parametrize("source,words", [
    ("import torch\nclass Model(torch.nn.Module):\n  def forward(self, x): return x\n", "get_inputs"),
    ("def get_inputs(:\n", "parse"),
    ("import torch\nclass Model(torch.nn.Module):\n  def forward(self, x): return x\n"
     "def get_inputs(): raise RuntimeError('no inputs')\ndef get_init_inputs(): return []\n", "no inputs"),
    ("import torch\nclass Model(torch.nn.Module):\n  def __init__(self):\n    super().__init__()\n"
     "    raise RuntimeError('bad reference init')\n  def forward(self, x): return x\n"
     "def get_inputs(): return [torch.ones(3)]\ndef get_init_inputs(): return []\n",
     "failed to build: RuntimeError: bad reference init"),
    ("import torch, time\nclass Model(torch.nn.Module):\n  def forward(self, x):\n    time.sleep(999)\n"
     "def get_inputs(): return [torch.ones(3)]\ndef get_init_inputs(): return []\n", "time limit"),
])
def test_invalid_task(source, words):
    with Evaluator(EvalConfig(device="cpu", run_timeout_s=5)) as ev:
        v = ev.judge(Task.from_source(source, "bad"), Candidate(GOOD_RELU))
    assert v.status == "invalid_task", v.reason
    assert words in v.reason


def test_probe_reference_returns_inputs_and_outputs():
    with Evaluator(EvalConfig(device="cpu")) as ev:
        p = ev.probe_reference(RELU, seeds=[3, 4], return_inputs=True)
        p2 = ev.probe_reference(RELU, seeds=[3])
    assert p.ok and len(p.outputs) == 2 and len(p.inputs) == 2
    x, y = p.inputs[0][0], p.outputs[0][0]
    assert (y == x.clamp_min(0)).all()
    assert (p2.outputs[0][0] == y).all()          # same seed, same inputs, another process
    assert not (p.outputs[1][0] == y).all()       # another seed, other inputs


def test_comparison_falls_back_to_host_copies_when_the_gpu_is_full(monkeypatch):
    """Other workers can fill the GPU; the judge then compares on host copies instead of
    crashing (seen on the device with 4x KernelBench-sized problems and 8 workers)."""
    import torch

    from kernelzero.eval import compare
    from kernelzero.eval.transport.tensorio import TensorOut

    real, calls = compare._compare_tensor, []

    def full_once(ref, cand, *a):
        calls.append(ref.tensor.device.type)
        if len(calls) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory (simulated)")
        return real(ref, cand, *a)

    monkeypatch.setattr(compare, "_compare_tensor", full_once)
    r = TensorOut(torch.ones(4), "cpu", True, [])
    tol = lambda dtype: (1e-4, 1e-4)  # noqa: E731
    assert compare.compare_outputs(r, TensorOut(torch.ones(4), "cpu", True, []), tol, "cpu").ok
    bad = compare.compare_outputs(r, TensorOut(torch.zeros(4), "cpu", True, []), tol, "cpu")
    assert not bad.ok and "value_mismatch" in bad.flags
    assert len(calls) == 3  # failed once, retried on host, then the second comparison directly


def test_a_cuda_ipc_handle_the_driver_refuses_is_said_to_be_maybe_the_judges_failure(monkeypatch):
    """A well-formed shared output the driver will not map (on an H200 the jail's uids did this
    to every KernelBench-sized output) must not read as the module's fault alone."""
    from kernelzero.eval.transport import cuda_ipc
    from kernelzero.eval.transport.tensorio import DecodeError, decode

    def refuse(*a, **k):
        raise RuntimeError("CUDA error: mapping of buffer object failed\nSearch for ...")

    monkeypatch.setattr(cuda_ipc, "open_shared", refuse)
    desc = {"kind": "tensor", "dtype": "float32", "shape": [4], "offset": 0, "nbytes": 16,
            "ipc": {"handle": "00"}}
    with pytest.raises(DecodeError) as e:
        decode(desc, "unused", _buf=[bytearray(), 0])
    msg = str(e.value)
    assert "mapping of buffer object failed" in msg and "Search for" not in msg
    assert "jail or driver" in msg and "transfer='host'" in msg
