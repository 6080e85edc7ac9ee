"""`kernelzero export` on a GPU: a CUDA (load_inline) kernel and a compiled Triton kernel with
weights, judged on the GPU, exported, and run in a user's model eagerly, under torch.compile, on
meta tensors and under autograd. Run on the device: scripts/test.sh -m gpu tests/test_export_gpu.py
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from kernelzero.cli import main

pytestmark = pytest.mark.gpu
EX = Path(__file__).resolve().parent.parent / "kernelzero" / "examples"


def export(tmp_path, capsys, kernel: str, reference: str, name: str) -> dict:
    rc = main(["export", str(EX / "candidates" / kernel), "--reference",
               str(EX / "tasks" / reference), "--name", name, "--out",
               str(tmp_path / "gpu_kernels"), "--db", str(tmp_path / "kz.db"), "--device",
               "cuda", "--json"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["verified"] and doc["check"]["ok"], doc
    return doc


def run_user_script(where: Path, script: str) -> dict:
    path = where / "user_model.py"
    path.write_text(textwrap.dedent(script))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}  # real Triton
    r = subprocess.run([sys.executable, str(path)], cwd=where, capture_output=True, text=True,
                       timeout=900, env=env)
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_a_cuda_kernel_exported_runs_eagerly_compiled_and_under_autograd(tmp_path, capsys):
    doc = export(tmp_path, capsys, "level_1_problem_1_sample_3_kernel.py", "level1/1_ReLU.py",
                 "cuda_relu")
    assert doc["verdict"].startswith("correct on cuda")
    result = run_user_script(tmp_path, """
        import json, torch
        from torch import nn
        from gpu_kernels import cuda_relu, CudaRelu

        class MyModel(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(1000, 1000)
                self.act = CudaRelu()

            def forward(self, x):
                return self.act(self.lin(x)) * 2

        torch.manual_seed(0)
        m, x = MyModel().cuda(), torch.randn(16, 1000, device="cuda")
        expected = torch.relu(m.lin(x)) * 2
        r = {"eager": torch.allclose(m(x), expected)}
        compiled = torch.compile(m)
        r["compiled"] = torch.allclose(compiled(x), expected)
        x7 = torch.randn(7, 1000, device="cuda")
        r["compiled_other_shape"] = torch.allclose(compiled(x7), torch.relu(m.lin(x7)) * 2)
        fn = torch.compile(lambda t: cuda_relu(t) + 1, fullgraph=True)
        r["fullgraph"] = torch.allclose(fn(x), x.relu() + 1)
        r["meta"] = list(m.act(torch.empty(3, 5, device="meta")).shape)
        compiled(x).sum().backward()
        r["weight_grad"] = m.lin.weight.grad is not None
        torch.library.opcheck(torch.ops.gpu_kernels.cuda_relu.default,
                              (m.act._handle, [torch.randn(4, 10, device="cuda",
                                                           requires_grad=True)], []))
        r["opcheck"] = True
        print(json.dumps(r))
    """)
    assert result == {"eager": True, "compiled": True, "compiled_other_shape": True,
                      "fullgraph": True, "meta": [3, 5], "weight_grad": True, "opcheck": True}


def test_a_triton_kernel_with_weights_exported_matches_the_reference_and_its_gradients(
        tmp_path, capsys):
    export(tmp_path, capsys, "level_2_problem_1_sample_0_kernel.py",
           "level2/1_Linear_Bias_ReLU.py", "linear_relu")
    result = run_user_script(tmp_path, """
        import json, torch
        from torch import nn
        from gpu_kernels import LinearRelu

        torch.manual_seed(0)
        layer = LinearRelu(64, 48).cuda()
        reference = nn.Sequential(nn.Linear(64, 48), nn.ReLU()).cuda()
        reference[0].load_state_dict(layer.kernel.linear.state_dict())
        x = torch.randn(32, 64, device="cuda", requires_grad=True)
        xr = x.detach().clone().requires_grad_()
        r = {"has_backward": layer.has_backward}
        y, yr = layer(x), reference(xr)
        r["forward"] = torch.allclose(y, yr, atol=1e-2, rtol=1e-2)
        y.square().sum().backward()
        yr.square().sum().backward()
        r["grad_x"] = torch.allclose(x.grad, xr.grad, atol=1e-2, rtol=1e-2)
        r["grad_w"] = torch.allclose(layer.kernel.linear.weight.grad, reference[0].weight.grad,
                                     atol=1e-2, rtol=1e-2)
        with torch.no_grad():
            x5 = torch.randn(5, 64, device="cuda")
            r["compiled"] = torch.allclose(torch.compile(layer)(x5), reference(x5),
                                           atol=1e-2, rtol=1e-2)
        print(json.dumps(r))
    """)
    assert result == {"has_backward": True, "forward": True, "grad_x": True, "grad_w": True,
                      "compiled": True}
