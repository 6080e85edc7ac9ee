"""The evaluator on a real GPU: CUDA (load_inline) and Triton candidates end to end, timing,
crashes that poison a CUDA context, and side streams. Run on the device: scripts/test.sh -m gpu
"""
import os

import pytest

from kernelzero.eval import EvalConfig, Evaluator, RuntimeConfig
from kernelzero.tasks import Candidate, Task

pytestmark = pytest.mark.gpu
EX = os.path.join(os.path.dirname(__file__), "..", "kernelzero", "examples")
RELU = Task.from_file(os.path.join(EX, "tasks/level1/1_ReLU.py"))

CUDA_HEAD = '''
import torch, torch.nn as nn
from torch.utils.cpp_extension import load_inline
cpp = "torch::Tensor run(torch::Tensor x);"
'''

ILLEGAL = CUDA_HEAD + r'''
cu = """
#include <torch/extension.h>
__global__ void k(float* y, long n) { long i = blockIdx.x * (long)blockDim.x + threadIdx.x; y[i * 1000000007L] = 1.f; }
torch::Tensor run(torch::Tensor x) { auto y = torch::empty_like(x); k<<<64, 256>>>(y.data_ptr<float>(), x.numel()); return y; }
"""
ext = load_inline(name="kz_illegal", cpp_sources=cpp, cuda_sources=cu, functions=["run"])
class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
'''

BAD_CUDA = CUDA_HEAD + r'''
cu = """
#include <torch/extension.h>
torch::Tensor run(torch::Tensor x) { this is not C++; }
"""
ext = load_inline(name="kz_bad", cpp_sources=cpp, cuda_sources=cu, functions=["run"])
class ModelNew(nn.Module):
    def forward(self, x):
        return ext.run(x)
'''

SIDE_STREAM = open(os.path.join(EX, "candidates/level_1_problem_1_sample_0_kernel.py")).read().replace(
    "        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)\n        return out",
    "        s = torch.cuda.Stream()\n        s.wait_stream(torch.cuda.current_stream())\n"
    "        with torch.cuda.stream(s):\n            torch.cuda._sleep(50_000_000)\n"
    "            relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)\n"
    "        {JOIN}return out")


@pytest.fixture(scope="module")
def ev():
    with Evaluator(EvalConfig(device="cuda", max_workers=4, timing_max_trials=30,
                              timing_min_trials=10, policy="strict")) as e:
        yield e


def examples():
    pairs = []
    for name in sorted(os.listdir(os.path.join(EX, "candidates"))):
        c = Candidate.from_file(os.path.join(EX, "candidates", name))
        level, pid = int(name.split("_")[1]), int(name.split("_")[3])
        task_dir = os.path.join(EX, "tasks", f"level{level}")
        task = next(Task.from_file(os.path.join(task_dir, f)) for f in os.listdir(task_dir)
                    if f.startswith(f"{pid}_"))
        pairs.append((name, task, c))
    return pairs


def test_examples_on_gpu(ev):
    pairs = examples()
    verdicts = ev.judge_many([(t, c) for _, t, c in pairs])
    expected = {"level_1_problem_1_sample_1_kernel.py": "incorrect",
                "level_1_problem_1_sample_2_kernel.py": "compile_error"}
    for (name, _, _), v in zip(pairs, verdicts):
        print(name, v.status, v.reason)
        assert v.status == expected.get(name, "correct"), (name, v.reason, v.log_tail[-1500:])
        if v.status == "correct":
            assert v.runtime_ms and v.ref_runtime_ms and v.speedup and v.speedup > 0
            assert v.env["gpu"]
    cuda = dict((n, v) for (n, _, _), v in zip(pairs, verdicts))["level_1_problem_1_sample_3_kernel.py"]
    assert cuda.backend == "cuda" and cuda.correct


def test_cuda_compile_error(ev):
    v = ev.judge(RELU, Candidate(BAD_CUDA))
    assert v.status == "compile_error", v.reason


def test_illegal_address_then_next_is_fine(ev):
    bad, good = ev.judge_many([(RELU, Candidate(ILLEGAL)), (RELU, Candidate.from_file(
        os.path.join(EX, "candidates/level_1_problem_1_sample_0_kernel.py")))])
    assert bad.status == "runtime_error", bad.reason
    assert good.status == "correct", good.reason


def test_unjoined_side_stream_is_caught(ev):
    v = ev.judge(RELU, Candidate(SIDE_STREAM.replace("{JOIN}", "")))
    assert v.status == "incorrect", v.reason


def test_joined_side_stream_is_accepted(ev):
    join = "torch.cuda.current_stream().wait_stream(s)\n        "
    v = ev.judge(RELU, Candidate(SIDE_STREAM.replace("{JOIN}", join)))
    assert v.status == "correct", v.reason
    assert v.runtime_ms.median_ms > 10  # the 50M-cycle sleep on the side stream was timed


@pytest.mark.parametrize("transfer", ["host", "ipc"])
def test_both_output_transfers(transfer):
    good = Candidate.from_file(os.path.join(EX, "candidates/level_1_problem_1_sample_0_kernel.py"))
    wrong = Candidate.from_file(os.path.join(EX, "candidates/level_1_problem_1_sample_1_kernel.py"))
    racy = Candidate(SIDE_STREAM.replace("{JOIN}", ""))
    with Evaluator(EvalConfig(device="cuda", timing_max_trials=20,
                              runtime=RuntimeConfig(transfer=transfer))) as e:
        g, w, r = e.judge_many([(RELU, good), (RELU, wrong), (RELU, racy)])
    assert g.status == "correct" and g.speedup, g.reason
    assert w.status == "incorrect", w.reason
    assert r.status == "incorrect", r.reason


# A C++ extension that calls cuBLAS directly: past the dispatcher, so the op log cannot see it;
# the kernel profile can (strict: rejected as library_compute).
CUBLAS_DIRECT = r'''
import torch, torch.nn as nn
from torch.utils.cpp_extension import load_inline
cpp = "torch::Tensor mm(torch::Tensor a, torch::Tensor b);"
cu = """
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>
torch::Tensor mm(torch::Tensor a, torch::Tensor b) {
  auto m = a.size(0), k = a.size(1), n = b.size(1);
  auto c = torch::empty({m, n}, a.options());
  float one = 1.f, zero = 0.f;
  // row-major C = A B  is  column-major C^T = B^T A^T
  cublasSgemm(at::cuda::getCurrentCUDABlasHandle(), CUBLAS_OP_N, CUBLAS_OP_N, n, m, k, &one,
              b.data_ptr<float>(), n, a.data_ptr<float>(), k, &zero, c.data_ptr<float>(), n);
  return c;
}
"""
ext = load_inline(name="kz_cublas_direct", cpp_sources=cpp, cuda_sources=cu, functions=["mm"],
                  extra_ldflags=["-lcublas"])
class ModelNew(nn.Module):
    def forward(self, A, B):
        return ext.mm(A.contiguous(), B.contiguous())
'''


def test_direct_cublas_call_is_seen_by_the_kernel_profile():
    with Evaluator(EvalConfig(device="cuda", max_workers=2, timing=False, policy="strict",
                              max_library_share=0.5)) as ev:
        _check_library_share(ev)


def _check_library_share(ev):
    matmul = Task.from_file(os.path.join(EX, "tasks/level1/3_Matmul.py"))
    v = ev.judge(matmul, Candidate(CUBLAS_DIRECT))
    assert v.status == "rejected" and "library_compute" in v.flags, (v.status, v.reason, v.log_tail)
    assert v.library_share is not None and v.library_share > 0.5
    own = ev.judge(RELU, Candidate.from_file(os.path.join(EX, "candidates",
                                                         "level_1_problem_1_sample_0_kernel.py")))
    assert own.status == "correct" and own.library_share == 0.0, (own.status, own.library_share)
