"""The models that ship inside the package: a Coder and a Proposer trained from zero by the
project's own recipes (`bash scripts/build_shipped_models.sh`: the op family, the teacher
compiler, the evaluator, TRL's SFT; docs/training.md gives their measured times and figures).
They load offline. The Coder is the default model of `kernelzero generate` and the starting Coder
of `train --config tiny-cpu`, whose Proposer is the shipped one.

What the Coder can do: write verified Triton kernels for modules of the op family
(kernelzero/family: elementwise chains, row reductions and norms, linear/matmul + epilogue),
written the many ways people write PyTorch. What it cannot: anything else (convolutions,
attention, pooling, ...); ask a larger model for those.
"""
from __future__ import annotations

from pathlib import Path

WEIGHTS = Path(__file__).resolve().parent / "weights"
ROLES = {"coder": "coder-cpu", "proposer": "proposer-cpu"}


class ShippedModelMissing(FileNotFoundError):
    """This copy of the package was built without that shipped model's weights."""


def shipped_model(role: str = "coder") -> Path:
    """The shipped model's checkpoint directory (a `save_pretrained` folder)."""
    if role not in ROLES:
        raise ValueError(f"no shipped model for role {role!r}; roles: {', '.join(ROLES)}")
    path = WEIGHTS / ROLES[role]
    if not (path / "config.json").exists() or not any(path.glob("*.safetensors")):
        raise ShippedModelMissing(
            f"the shipped {role} is not in this copy of KernelZero ({path} is empty); build it with "
            "`bash scripts/build_shipped_models.sh` or name a model")
    return path
