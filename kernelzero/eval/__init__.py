"""The evaluator: judge a candidate kernel against its reference module in sandboxed processes.

Public API (everything above `eval` talks to it through these names only):
    EvalConfig, Verdict, Timing, STATUSES, Evaluator
"""
from kernelzero.eval.config import EvalConfig
from kernelzero.eval.verdict import STATUSES, Timing, Verdict

__all__ = ["EvalConfig", "Verdict", "Timing", "STATUSES", "Evaluator", "ReferenceProbe"]


def __getattr__(name):  # keep `import kernelzero.eval` light; the evaluator pulls in torch
    if name in ("Evaluator", "ReferenceProbe"):
        from kernelzero.eval import evaluator
        return getattr(evaluator, name)
    raise AttributeError(name)
