"""Export a verified kernel as a PyTorch custom op that a user's own model imports.

`kernelzero export KERNEL.py --reference MODULE.py --name NAME --out PKG` (or `kernelzero
generate MODULE.py --export NAME`) writes PKG/, a package with no KernelZero dependency:
`from PKG import NAME, CLASS`. See template.py for how the op works (custom op, fake
implementation from the reference), package.py for the files, verified.py for the rule that
decides whether a kernel may be exported.
"""
from kernelzero.export.package import (Exported, ExportError, check_package, check_target,
                                       class_name, write_package)
from kernelzero.export.verified import is_verified, provenance, stored_verdicts, summary

__all__ = ["Exported", "ExportError", "check_package", "check_target", "class_name",
           "write_package", "is_verified", "provenance", "stored_verdicts", "summary"]
