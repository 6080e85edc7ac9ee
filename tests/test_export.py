"""`kernelzero export` and `generate --export` on CPU: a verified Triton kernel (run through the
interpreter) becomes a package whose op works in a user's model eagerly, under torch.compile, on
meta tensors and under autograd; unverified kernels are refused; the store is read by hash."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from _coder_solutions import RELU_OK, answer, write_jsonl
from kernelzero.cli import main
from kernelzero.eval.verdict import Verdict
from kernelzero.export import is_verified, stored_verdicts, write_package
from kernelzero.store import Store
from kernelzero.tasks import Candidate, Task

ROOT = Path(__file__).resolve().parent.parent
EX = ROOT / "kernelzero" / "examples"
TASK = EX / "tasks/level1/1_ReLU.py"
GOOD = EX / "candidates/level_1_problem_1_sample_0_kernel.py"
WRONG = EX / "candidates/level_1_problem_1_sample_1_kernel.py"


@pytest.fixture(autouse=True)
def interpreter(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def cli(capsys, *argv):
    rc = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return rc, out, err


def run_user_script(where: Path, script: str) -> dict:
    """Run `script` as a user's own program beside the package; its last line is JSON."""
    path = where / "user_model.py"
    path.write_text(textwrap.dedent(script))
    r = subprocess.run([sys.executable, str(path)], cwd=where, capture_output=True, text=True,
                       timeout=900, env=dict(os.environ, TRITON_INTERPRET="1"))
    assert r.returncode == 0, r.stderr[-4000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_export_judges_stores_and_the_op_runs_in_a_model_eagerly_and_compiled(tmp_path, capsys):
    db, pkg = tmp_path / "kz.db", tmp_path / "my_kernels"
    rc, out, err = cli(capsys, "export", GOOD, "--reference", TASK, "--name", "relu",
                       "--out", pkg, "--db", db, "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["verified"] and doc["op"] == "torch.ops.my_kernels.relu" and doc["class"] == "Relu"
    assert doc["check"]["ok"], doc["check"]
    assert doc["check"]["outputs"] == [[[16, 1000], "float32"]]
    with Store(db) as store:  # judged now, stored for the next export
        assert [r["status"] for r in store.records("export")] == ["correct"]
    result = run_user_script(tmp_path, """
        import copy, json
        import torch
        from torch import nn
        from my_kernels import relu, Relu

        class MyModel(nn.Module):
            def __init__(self):
                super().__init__()
                self.lin = nn.Linear(1000, 1000)
                self.act = Relu()

            def forward(self, x):
                return self.act(self.lin(x)) * 2

        torch.manual_seed(0)
        m, x = MyModel(), torch.randn(16, 1000)
        expected = torch.relu(m.lin(x)) * 2
        r = {"eager": torch.allclose(m(x), expected), "function": torch.equal(relu(x), x.relu())}
        compiled = torch.compile(m)
        r["compiled"] = torch.allclose(compiled(x), expected)
        x7 = torch.randn(7, 1000)  # another batch size: the fake impl follows the shapes
        r["compiled_other_shape"] = torch.allclose(compiled(x7), torch.relu(m.lin(x7)) * 2)
        fn = torch.compile(lambda t: relu(t) + 1, fullgraph=True)
        r["fullgraph"] = torch.allclose(fn(x), x.relu() + 1)
        r["meta"] = list(m.act(torch.empty(3, 5, device="meta")).shape)
        xg = torch.randn(16, 1000, requires_grad=True)
        relu(xg).sum().backward()
        r["grad"] = torch.equal(xg.grad, (xg > 0).float())
        compiled(x).sum().backward()  # a model that trains through the op, compiled
        r["weight_grad"] = m.lin.weight.grad is not None
        r["copies_have_own_handles"] = copy.deepcopy(m).act._handle != m.act._handle
        torch.library.opcheck(torch.ops.my_kernels.relu.default,
                              (m.act._handle, [torch.randn(4, 10, requires_grad=True)], []))
        r["opcheck"] = True
        print(json.dumps(r))
    """)
    assert result == {"eager": True, "function": True, "compiled": True,
                      "compiled_other_shape": True, "fullgraph": True, "meta": [3, 5],
                      "grad": True, "weight_grad": True, "copies_have_own_handles": True,
                      "opcheck": True}
    # A second export of the same kernel finds its verdict in the store: nothing is judged.
    rc, out, err = cli(capsys, "export", GOOD, "--reference", TASK, "--name", "relu_again",
                       "--out", pkg, "--db", db, "--no-check")
    assert rc == 0 and "judging" not in err and "exported relu_again (correct on cpu)" in out
    init = (pkg / "__init__.py").read_text()
    assert "from ._relu import relu, Relu" in init and "from ._relu_again import" in init


def test_export_refuses_an_unverified_kernel_unless_forced(tmp_path, capsys):
    db, pkg = tmp_path / "kz.db", tmp_path / "my_kernels"
    rc, out, err = cli(capsys, "export", WRONG, "--reference", TASK, "--name", "relu",
                       "--out", pkg, "--db", db)
    assert rc == 2 and out == ""
    line = err.strip().splitlines()[-1]
    assert "is not verified" in line and "incorrect on cpu" in line and "--force" in line
    assert not pkg.exists()
    rc, out, err = cli(capsys, "export", WRONG, "--reference", TASK, "--name", "relu",
                       "--out", pkg, "--db", db, "--force", "--no-check")
    assert rc == 0 and "judging" not in err  # the stored verdict was found this time
    assert out.startswith("exported UNVERIFIED (--force) relu")
    assert "'forced': True" in (pkg / "_relu.py").read_text()


def _stored(db, task: Task, cand: Candidate, status: str, device: str, key: str) -> None:
    v = Verdict(status=status, reason=f"{status} (stored by the test)", device=device,
                task_hash=task.hash, candidate_hash=cand.hash)
    with Store(db) as store:
        store.put(key, v, run="test")


def test_the_store_is_read_by_hash_and_the_latest_verdict_per_device_decides(tmp_path, capsys):
    db = tmp_path / "kz.db"
    task, cand = Task.from_file(TASK), Candidate.from_file(GOOD)
    moved = tmp_path / "renamed_kernel.py"  # found by its text, not its name
    moved.write_text(cand.source)
    _stored(db, task, cand, "incorrect", "cpu", "a")
    args = ("export", moved, "--reference", TASK, "--name", "relu", "--out",
            tmp_path / "my_kernels", "--db", db, "--no-check")
    rc, _, err = cli(capsys, *args)
    assert rc == 2 and "incorrect on cpu" in err and "judging" not in err
    _stored(db, task, cand, "correct", "cpu", "b")  # judged again later: correct
    rc, out, err = cli(capsys, *args)
    assert rc == 0 and "judging" not in err, err
    _stored(db, task, cand, "incorrect", "cuda", "c")  # wrong on the GPU: not verified
    rc, _, err = cli(capsys, *args)
    assert rc == 2 and "correct on cpu; incorrect on cuda" in err
    # Another reference's verdicts do not count for this one.
    other = Task.from_source(task.source + "\n# another reference\n")
    assert stored_verdicts(db, other.hash, cand.hash) == []
    assert [v.status for v in stored_verdicts(db, task.hash, cand.hash)] == [
        "incorrect", "correct", "incorrect"]


def test_is_verified_rule():
    v = lambda s, d: Verdict(status=s, reason="", device=d)  # noqa: E731
    assert not is_verified([])
    assert is_verified([v("incorrect", "cpu"), v("correct", "cpu")])
    assert not is_verified([v("correct", "cpu"), v("timeout", "cpu")])
    assert not is_verified([v("correct", "cpu"), v("incorrect", "cuda")])
    assert is_verified([v("correct", "cpu"), v("correct", "cuda")])


def test_generate_export_goes_from_module_to_import_in_one_step(tmp_path, capsys, monkeypatch):
    record = write_jsonl(tmp_path / "relu.jsonl",
                         [{"task": "L1/1_ReLU", "sample": 0, "completion": answer(RELU_OK, 0)}])
    monkeypatch.chdir(tmp_path)
    rc, out, err = cli(capsys, "generate", TASK, "--model", f"replay:{record}", "-k", "1",
                       "--device", "cpu", "--export", "my_relu", "--json")
    assert rc == 0, err
    doc = json.loads(out)
    assert doc["export"]["name"] == "my_relu" and doc["export"]["check"]["ok"]
    assert doc["export"]["dir"] == str(tmp_path / "my_kernels")
    result = run_user_script(tmp_path, """
        import json, torch
        from my_kernels import my_relu
        x = torch.randn(16, 1000)
        print(json.dumps({"ok": torch.equal(torch.compile(my_relu)(x), x.relu())}))
    """)
    assert result == {"ok": True}


@pytest.mark.parametrize("name,out,needle", [
    ("class", "my_kernels", "the export name 'class' must be a Python identifier"),
    ("relu", "my-kernels", "the package folder's name 'my-kernels'"),
    ("relu", "foreign", "was not written by `kernelzero export`"),
    ("relu", "a_file", "is a file"),
])
def test_bad_names_and_folders_are_usage_errors_before_any_judging(name, out, needle, tmp_path,
                                                                   capsys):
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "__init__.py").write_text("import os\n")
    (tmp_path / "a_file").write_text("")
    rc, stdout, err = cli(capsys, "export", GOOD, "--reference", TASK, "--name", name,
                          "--out", tmp_path / out, "--db", tmp_path / "kz.db")
    assert rc == 2 and needle in err and "judging" not in err and stdout == ""
    assert (tmp_path / "foreign" / "__init__.py").read_text() == "import os\n"


# A reference with a weight, and two kernels: one keeps the weight's name (so the op's backward
# is the reference's, with the kernel's weight), one renames it (no backward).
SCALE_REFERENCE = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(n))

    def forward(self, x):
        return x * self.scale

def get_inputs():
    return [torch.randn(4, 32)]

def get_init_inputs():
    return [32]
"""

SCALE_KERNEL = """
import torch
import torch.nn as nn
import triton
import triton.language as tl

@triton.jit
def scale_kernel(x_ptr, s_ptr, out_ptr, numel, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < numel
    x = tl.load(x_ptr + offs, mask=mask)
    s = tl.load(s_ptr + offs % n, mask=mask)
    tl.store(out_ptr + offs, x * s, mask=mask)

class ModelNew(nn.Module):
    def __init__(self, n):
        super().__init__()
        self.WEIGHT = nn.Parameter(torch.randn(n))

    def forward(self, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        scale_kernel[(triton.cdiv(x.numel(), 128),)](x, self.WEIGHT, out, x.numel(),
                                                     self.WEIGHT.numel(), BLOCK=128)
        return out
"""


def test_weights_backward_and_shape_changing_outputs(tmp_path):
    """A kernel with a weight trains through the reference's backward; a reduction's output
    shapes follow its inputs' under torch.compile (dynamic) and on meta tensors."""
    pkg = tmp_path / "scaled"
    for name, weight in (("scale", "scale"), ("gain", "gain")):
        write_package(SCALE_KERNEL.replace("WEIGHT", weight), SCALE_REFERENCE, name, pkg,
                      "triton", {"test": True})
    write_package((EX / "candidates/level_1_problem_4_sample_0_kernel.py").read_text(),
                  (EX / "tasks/level1/4_Sum_reduction.py").read_text(), "colsum", pkg, "triton",
                  {"test": True})
    result = run_user_script(tmp_path, """
        import json, torch
        from scaled import Scale, Gain, scale, colsum

        r = {}
        fn = torch.compile(lambda t: colsum(t) * 2, fullgraph=True, dynamic=True)
        x3 = torch.randn(2, 5, 3)
        r["reduction_values"] = torch.allclose(fn(x3), x3.sum(1, keepdim=True) * 2, atol=1e-5)
        r["reduction_shapes"] = [list(fn(torch.randn(4, 7, 3)).shape),
                                 list(colsum(torch.empty(6, 9, 4, device="meta")).shape)]
        layer, x = Scale(32), torch.randn(4, 32, requires_grad=True)
        y = layer(x)
        r["forward"] = torch.allclose(y, x * layer.kernel.scale)
        y.pow(2).sum().backward()
        expect_x = (2 * y * layer.kernel.scale).detach()
        expect_s = (2 * y * x).sum(0).detach()
        r["grad_x"] = torch.allclose(x.grad, expect_x, atol=1e-5)
        r["grad_weight"] = torch.allclose(layer.kernel.scale.grad, expect_s, atol=1e-5)
        r["has_backward"] = [Scale(32).has_backward, Gain(32).has_backward]
        layer.kernel.scale.grad = None
        torch.compile(layer)(x).sum().backward()  # compiled, training
        r["compiled_grad_weight"] = torch.allclose(layer.kernel.scale.grad,
                                                   x.detach().sum(0), atol=1e-5)
        gain = Gain(32)
        with torch.no_grad():
            r["no_backward_forward"] = torch.allclose(torch.compile(gain)(x),
                                                      x * gain.kernel.gain)
        r["no_backward_meta"] = list(gain(torch.empty(9, 32, device="meta")).shape)
        try:
            gain(x).sum().backward()
            r["no_backward_raises"] = "no error"
        except RuntimeError as e:
            r["no_backward_raises"] = "torch.no_grad()" in str(e)
        try:
            scale(x)
            r["function_refuses_weights"] = "no error"
        except TypeError as e:
            r["function_refuses_weights"] = "Scale(*init_inputs)" in str(e)
        print(json.dumps(r))
    """)
    assert result == {"reduction_values": True, "reduction_shapes": [[4, 1, 3], [6, 1, 4]],
                      "forward": True, "grad_x": True, "grad_weight": True,
                      "has_backward": [True, False], "compiled_grad_weight": True,
                      "no_backward_forward": True, "no_backward_meta": [9, 32],
                      "no_backward_raises": True, "function_refuses_weights": True}
