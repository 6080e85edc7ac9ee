# legit: keeps its launch configuration in a scratch file in a private temporary directory of
#        its own (tempfile.mkdtemp), reads it back on each call, and removes it at exit.
# expect: correct
# policies: strict, kernelbench
# target: relu.py
import atexit
import json
import os
import shutil
import tempfile

import torch
import torch.nn as nn
import triton
import triton.language as tl

_DIR = tempfile.mkdtemp(prefix="kz_legit_scratch_")
atexit.register(shutil.rmtree, _DIR, True)
_CFG = os.path.join(_DIR, "launch.json")
with open(_CFG, "w") as f:
    json.dump({"BLOCK": 512}, f)


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        with open(_CFG) as f:
            block = json.load(f)["BLOCK"]
        x = x.contiguous()
        out = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), block),)](x, out, x.numel(), BLOCK=block)
        return out
