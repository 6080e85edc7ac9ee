"""The jail on a GPU (bench/sandbox_gpu.sh runs these): a jailed worker reaches the GPU, and the
judge still maps its outputs through CUDA IPC, under each isolation a cuda judge may use.

- `pidns` (the default on cuda): bwrap with a PID namespace, the judge's uid;
- `uid`: bwrap, a uid of its own, no PID namespace (the default on the CPU as root). On an H200
  (driver 580) the judge could not map such a worker's outputs at KernelBench's sizes
  (cudaErrorMapBufferObjectFailed; 47 of 60 Level 1 problems judged `invalid_task`), though a
  small output mapped, and so did one worker judging one such task alone (XPASS): hence the
  default, and the xfail;
- `none`: no jail (the baseline).

Each is tried on a small task (a Triton ReLU, kilobytes; one worker) and on four KernelBench-sized
ones side by side (64 MiB out each; the default workers and spares).
Every output goes through IPC (ipc_min_bytes=0); the verdict must be `correct`, and the judge
must have mapped worker memory (`arena_map_s` or `decode_map_s` in its phases).
"""
from __future__ import annotations

import glob
import os
import stat

import pytest

from tests.adversarial.fixtures import LEGIT

pytestmark = pytest.mark.gpu

VARIANTS = {
    "pidns": dict(isolation="bwrap"),  # the default on cuda
    "uid": dict(isolation="bwrap", own_uid=True, pid_namespace=False),
    "none": dict(isolation="none"),
}
LARGE_TASK = """import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4096, 4096)]


def get_init_inputs():
    return []
"""


def _judge(limits_kw: dict, size: str):
    from kernelzero.eval import EvalConfig, Evaluator, RuntimeConfig
    from kernelzero.eval.sandbox.sandbox import SandboxLimits
    from kernelzero.tasks import Candidate, Task
    if size == "small":  # one worker at a time
        legit = next(f for f in LEGIT if f.name == "relu_masked_tail")
        cfg = EvalConfig(device="cuda", timing=True, correctness_trials=2, max_workers=1,
                         runtime=RuntimeConfig(transfer="ipc", ipc_min_bytes=0, spares=1))
        with Evaluator(cfg, limits=SandboxLimits(**limits_kw)) as ev:
            return [ev.judge(Task.from_file(legit.target), Candidate.from_file(legit.path))]
    # Four tasks side by side with the default workers and spares: the failure of the `uid`
    # variant was seen so (a single worker judging one such task mapped its outputs).
    pairs = [(Task.from_source(LARGE_TASK, f"large_relu_{k}"),
              Candidate(source=LARGE_TASK + "\n\nclass ModelNew(Model):\n    pass\n"))
             for k in range(4)]
    cfg = EvalConfig(device="cuda", policy="none", timing=True, correctness_trials=2,
                     runtime=RuntimeConfig(transfer="ipc", ipc_min_bytes=0))
    with Evaluator(cfg, limits=SandboxLimits(**limits_kw)) as ev:
        return ev.judge_many(pairs)


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("variant", [
    "pidns", pytest.param("uid", marks=pytest.mark.xfail(
        reason="from a worker of another uid the judge could not map KernelBench-sized outputs",
        strict=False)),
    "none"])
def test_cuda_ipc_reaches_the_judge_from_a_jailed_worker(variant, size):
    from kernelzero.eval.sandbox.jail import isolation_for
    if variant != "none" and not isolation_for("auto", "cuda").jailed:
        pytest.fail("no jail can be made on this GPU machine (bubblewrap missing?)")
    if variant == "pidns":  # what a judge on cuda gets by default
        iso = isolation_for("auto", "cuda")
        assert iso.pid_namespace and not iso.own_uid, iso
    for v in _judge(VARIANTS[variant], size):
        assert v.status == "correct", f"{variant}: {v.status}: {v.reason}\n{v.log_tail[-1500:]}"
        mapped = v.phases_s.get("arena_map_s", 0) + v.phases_s.get("decode_map_s", 0)
        assert mapped > 0, f"{variant}: no worker memory was mapped: {v.phases_s}"
        box = v.env["sandbox"]
        assert box["isolation"] == ("none" if variant == "none" else "bwrap")
        assert box["pid_namespace"] == (variant == "pidns")
        assert v.speedup is not None  # timed, with its re-checked outputs mapped too


def test_cuda_initialises_in_a_jailed_worker(tmp_path):
    """The first thing to fail if the jail hides something the driver needs: one allocation."""
    import json

    from kernelzero.eval.sandbox.sandbox import SandboxLimits, SandboxWorker
    with SandboxWorker("cuda", SandboxLimits(isolation="bwrap"), work_root=str(tmp_path)) as w:
        w.start()
        path = os.path.join(w.dir, "cuda_probe.py")
        with open(path, "w") as f:
            f.write("import json, os, torch\n"
                    "x = torch.ones(1024, device='cuda') * 2\n"
                    "json.dump({'uid': os.getuid(), 'gpu': torch.cuda.get_device_name(),"
                    " 'sum': float(x.sum())}, open('facts.json', 'w'))\n")
        reply = w.request({"op": "load", "role": "reference", "task_path": path,
                           "device": "cuda"}, 300)
        assert reply.get("ok"), f"{reply}\n{w.log_tail()}"
        facts = json.load(open(os.path.join(w.dir, "facts.json")))
    print("jailed worker:", facts, w.isolation)
    assert facts["sum"] == 2048.0


def test_gpu_device_nodes_and_tools_for_the_jail():
    """What the jail needs on this machine, in one place (bench/sandbox_gpu.sh prints it)."""
    from kernelzero.eval.sandbox.jail import device_groups, probe
    from kernelzero.eval.sandbox.worker_uids import setpriv_path
    nodes = {n: stat.filemode(os.stat(n).st_mode) for n in sorted(glob.glob("/dev/nvidia*"))}
    print("device nodes:", nodes, "groups for workers:", device_groups("cuda"))
    print("bwrap:", probe(), "setpriv:", setpriv_path(), "root:", os.geteuid() == 0)
    assert nodes and probe()[0] and setpriv_path()
