"""The Coder that ships inside the package: a small model trained from zero by the project's own
recipe (`bash scripts/build_shipped_coder.sh`: the op family, the teacher compiler, the evaluator,
TRL's SFT; docs/training.md gives its measured time and held-out figures). It loads offline, is
the default model of `kernelzero generate`, and the starting Coder of `train --config tiny-cpu`.

What it can do: write verified Triton kernels for modules of the op family
(kernelzero/family: elementwise chains, row reductions and norms, linear/matmul + epilogue),
written the many ways people write PyTorch. What it cannot: anything else (convolutions,
attention, pooling, ...); ask a larger model for those.
"""
from __future__ import annotations

from pathlib import Path

SHIPPED_DIR = Path(__file__).resolve().parent / "coder-cpu"
SPEC = "shipped"


class ShippedModelMissing(FileNotFoundError):
    """This copy of the package was built without the shipped Coder's weights."""


def shipped_coder() -> Path:
    """The shipped Coder's checkpoint directory (a `save_pretrained` folder)."""
    if not (SHIPPED_DIR / "config.json").exists() or not any(SHIPPED_DIR.glob("*.safetensors")):
        raise ShippedModelMissing(
            f"the shipped Coder is not in this copy of KernelZero ({SHIPPED_DIR} is empty); "
            "build it with `bash scripts/build_shipped_coder.sh` or pass --model")
    return SHIPPED_DIR
