"""Writing an exported kernel into an importable package folder, and checking that it imports.

An export named NAME into the folder PKG/ writes three files and rewrites PKG/__init__.py:

    PKG/_NAME.py            the custom op `torch.ops.PKG.NAME`, the function NAME, the nn.Module
    PKG/_NAME_kernel.py     the kernel file, verbatim (ModelNew)
    PKG/_NAME_reference.py  the reference module, verbatim (its fake implementation: shapes only)
    PKG/__init__.py         imports every export found in PKG/ (found by its _NAME_kernel.py)

so `from PKG import NAME` works with PKG's parent on sys.path. The check runs probe.py in a
fresh Python process (nothing of the kernel runs in this one).
"""
from __future__ import annotations

import json
import keyword
import os
import pprint
import re
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from string import Template

from kernelzero.export.template import OP_MODULE, PACKAGE_INIT

INIT_MARKER = "# kernelzero-export-package"
PROBE = Path(__file__).with_name("probe.py")


class ExportError(ValueError):
    """The export cannot be written as asked (a bad name, a folder that is not ours)."""


@dataclass
class Exported:
    name: str
    cls: str
    package: str
    dir: Path
    files: list[Path]
    replaced: bool                     # an export of this name was there before
    check: dict = field(default_factory=dict)  # probe.py's report (ok, outputs, error, ...)

    def to_dict(self) -> dict:
        return {"name": self.name, "class": self.cls, "package": self.package,
                "op": f"torch.ops.{self.package}.{self.name}", "dir": str(self.dir),
                "files": [str(f) for f in self.files], "replaced": self.replaced,
                "check": self.check}


def class_name(name: str) -> str:
    """The nn.Module's name: NAME in CamelCase (`fused_gelu` -> `FusedGelu`), never NAME itself."""
    cls = "".join(p[:1].upper() + p[1:] for p in name.split("_") if p)
    return cls if cls != name else cls + "Module"


def _identifier(text: str, what: str, example: str) -> str:
    if not text.isidentifier() or keyword.iskeyword(text) or text.startswith("_"):
        raise ExportError(f"{what} {text!r} must be a Python identifier not starting with '_' "
                          f"(letters, digits, underscores), e.g. {example}")
    return text


def check_target(name: str, out_dir: str | Path) -> tuple[str, Path]:
    """(package name, folder) for an export NAME into `out_dir`; ExportError when either name
    cannot be imported or the folder holds something that is not an export package."""
    _identifier(name, "the export name", "my_op")
    out = Path(out_dir).resolve()
    package = _identifier(out.name, "the package folder's name", "my_kernels")
    if out.exists() and not out.is_dir():
        raise ExportError(f"--out {out_dir} is a file; give a folder (the package to write)")
    init = out / "__init__.py"
    if init.exists() and INIT_MARKER not in init.read_text(encoding="utf-8", errors="replace"):
        raise ExportError(f"{init} was not written by `kernelzero export`; give --out a new "
                          "folder (or one that earlier exports wrote)")
    return package, out


def write_package(kernel_source: str, reference_source: str, name: str, out_dir: str | Path,
                  backend: str, verified: dict) -> Exported:
    """Write the export (see the module docstring) and return what was written."""
    package, out = check_target(name, out_dir)
    cls = class_name(name)
    out.mkdir(parents=True, exist_ok=True)
    op_file, kernel_file, ref_file = (out / f"_{name}.py", out / f"_{name}_kernel.py",
                                      out / f"_{name}_reference.py")
    replaced = kernel_file.exists()
    kernel_file.write_text(kernel_source, encoding="utf-8")
    ref_file.write_text(reference_source, encoding="utf-8")
    op_file.write_text(Template(OP_MODULE).substitute(
        name=name, cls=cls, package=package, backend=backend, kernel_module=kernel_file.stem,
        reference_module=ref_file.stem, verified=pprint.pformat(verified, sort_dicts=False)),
        encoding="utf-8")
    init = out / "__init__.py"
    init.write_text(_package_init(out), encoding="utf-8")
    return Exported(name=name, cls=cls, package=package, dir=out,
                    files=[op_file, kernel_file, ref_file, init], replaced=replaced)


def exports_in(out: Path) -> list[str]:
    """The names exported into `out`, in name order (each has its _NAME_kernel.py)."""
    names = (re.fullmatch(r"_(.+)_kernel\.py", p.name) for p in out.glob("_*_kernel.py"))
    return sorted(m[1] for m in names if m and (out / f"_{m[1]}.py").is_file())


def _package_init(out: Path) -> str:
    names = exports_in(out)
    imports = "\n".join(f"from ._{n} import {n}, {class_name(n)}" for n in names)
    public = [x for n in names for x in (n, class_name(n))]
    return Template(PACKAGE_INIT).substitute(imports=imports, names=repr(public))


def check_package(exported: Exported, timeout_s: float = 900.0) -> dict:
    """Import the package in a fresh process and compare its op's output shapes and dtypes on meta
    tensors (the fake implementation) with the reference's own on the reference's get_inputs().
    A CUDA kernel compiles on import: the timeout covers that. Never raises: the report says."""
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    try:
        r = subprocess.run([sys.executable, "-P", str(PROBE), str(exported.dir.parent),
                            exported.package, exported.name, exported.cls], capture_output=True,
                           text=True, timeout=timeout_s, env=env, cwd=str(exported.dir.parent))
    except subprocess.TimeoutExpired:
        return {"ok": False, "error": f"importing the package took over {timeout_s:g} s"}
    lines = r.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1])
    except (IndexError, json.JSONDecodeError):
        tail = " ".join((r.stderr or r.stdout).strip().splitlines()[-1:]) or f"exit {r.returncode}"
        return {"ok": False, "error": f"the check process failed: {tail}"}
    return report
