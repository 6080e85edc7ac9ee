"""Checks of command-line values that several sub-commands share, each failing with a one-line
UsageError that says what is wrong and what to do: a path that must be a file, a directory that
must exist, a device that must be present."""
from __future__ import annotations

from pathlib import Path


def require_file(path: str | Path, what: str = "") -> Path:
    """`path` as a Path if it is a file; otherwise a UsageError that says what it is instead.
    `what` names its role in messages (e.g. "candidate")."""
    from kernelzero.cli import UsageError

    label, p = f"{what} " if what else "", Path(path)
    if p.is_dir():
        raise UsageError(f"{label}{path} is a directory, not a file; give a .py file")
    if not p.exists():
        raise UsageError(f"{label}{path}: no such file")
    if not p.is_file():
        raise UsageError(f"{label}{path} is not a regular file")
    return p


def require_dir(path: str | Path, what: str = "") -> Path:
    """`path` as a Path if it is a directory; otherwise a UsageError."""
    from kernelzero.cli import UsageError

    label, p = f"{what} " if what else "", Path(path)
    if p.exists() and not p.is_dir():
        raise UsageError(f"{label}{path} is a file, not a directory")
    if not p.exists():
        raise UsageError(f"{label}{path}: no such directory")
    return p


def resolve_device(requested: str | None) -> str:
    """Where to run: the device asked for, or cuda when torch sees a GPU, else cpu. A GPU asked
    for where torch sees none is the user's to fix (a usage error), never a verdict."""
    import torch

    from kernelzero.cli import UsageError

    has_gpu = torch.cuda.is_available()
    if requested == "cuda" and not has_gpu:
        why = ("this torch is a CPU-only build" if torch.version.cuda is None
               else "torch sees no CUDA device")
        raise UsageError(f"--device cuda: no GPU here ({why}, torch {torch.__version__}); "
                         "use --device cpu, or run on a machine with an NVIDIA GPU")
    return requested or ("cuda" if has_gpu else "cpu")
