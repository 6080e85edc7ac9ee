"""Device memory at KernelBench's sizes, on a GPU (issue 24): a task whose inputs take about half
the card gives the same verdict beside other judgements as alone; a task too large to keep is
streamed and still judged correctly; a compiled CUDA candidate is reused by source."""
import time

import pytest

torch = pytest.importorskip("torch")

from kernelzero.eval import EvalConfig, Evaluator, RuntimeConfig  # noqa: E402
from kernelzero.tasks import Candidate, Task  # noqa: E402

pytestmark = pytest.mark.gpu

SMALL = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * {k}
def get_inputs():
    return [torch.randn(4096, 4096)]
def get_init_inputs():
    return []
"""

HALF = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return x.sum(dim=1)
def get_inputs():
    return [torch.randn({rows}, 4096)]
def get_init_inputs():
    return []
"""

WIDE = """import torch
class Model(torch.nn.Module):
    def forward(self, x):
        return torch.tanh(x)
def get_inputs():
    return [torch.randn({rows}, 4096)]
def get_init_inputs():
    return []
"""


def identity(task: Task) -> Candidate:
    return Candidate(task.source + "\n\nclass ModelNew(Model):\n    pass\n", f"{task.name}_id")


def _cuda():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    return torch.cuda.mem_get_info()


def test_a_task_of_half_the_card_gives_the_same_verdict_beside_others_as_alone():
    free, total = _cuda()
    rows = int(0.45 * total) // (4096 * 4)
    half = Task.from_source(HALF.format(rows=rows), "half_card")
    others = [Task.from_source(SMALL.format(k=k), f"small_{k}") for k in range(1, 5)]
    cfg = EvalConfig(device="cuda", policy="none", max_workers=4)
    with Evaluator(cfg) as ev:
        beside = ev.judge_many([(half, identity(half))] + [(t, identity(t)) for t in others])
    with Evaluator(cfg) as ev:
        alone = ev.judge(half, identity(half))
    assert alone.status == "correct", alone.reason
    assert beside[0].status == alone.status, beside[0].reason
    assert all(v.status == "correct" for v in beside[1:]), [v.reason for v in beside[1:]]
    # its footprint was known before it ran: inputs of about 45% of the card
    assert beside[0].memory["footprint"]["input_bytes"] == rows * 4096 * 4


def test_a_task_too_large_to_keep_is_streamed_and_judged_correctly():
    _cuda()
    wide = Task.from_source(WIDE.format(rows=1 << 18), "wide")  # 4 GiB in, 4 GiB out a call
    cfg = EvalConfig(device="cuda", policy="none", max_workers=2,
                     runtime=RuntimeConfig(reference_store_mb=8192))
    with Evaluator(cfg) as ev:
        v = ev.judge(wide, identity(wide))
    assert v.status == "correct", v.reason
    assert v.memory["streamed"] is True


CUDA_CANDIDATE = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

src = """
#include <torch/extension.h>
__global__ void scale_kernel(const float* x, float* y, float k, int64_t n) {
    int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0 ? x[i] * k : 0.0f;
}
torch::Tensor relu_scale(torch::Tensor x, double k) {
    auto y = torch::empty_like(x);
    int64_t n = x.numel();
    scale_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), (float)k, n);
    return y;
}
"""
ext = load_inline("kz_relu_scale_{tag}", "torch::Tensor relu_scale(torch::Tensor x, double k);",
                  cuda_sources=src, functions=["relu_scale"])


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_scale(x.contiguous(), 1.0)
'''


def test_a_compiled_cuda_candidate_is_reused_by_source():
    _cuda()
    task = Task.from_source(SMALL.format(k=1), "relu")
    cand = Candidate(CUDA_CANDIDATE.replace("{tag}", str(time.time_ns())), "cuda_relu")
    cfg = EvalConfig(device="cuda", policy="none", max_workers=1)
    with Evaluator(cfg) as ev:
        cold = ev.judge(task, cand)
        warm = ev.judge(task, cand)
    assert cold.status == warm.status == "correct", (cold.reason, warm.reason)
    print(f"load: cold {cold.phases_s['load_s']:.1f} s, warm {warm.phases_s['load_s']:.1f} s")
    assert warm.phases_s["load_s"] < 3.0
    assert warm.phases_s["load_s"] < cold.phases_s["load_s"] / 3
