"""The evaluator: judge a candidate kernel against its reference module in sandboxed processes.

Public API (everything above `eval` talks to it through these names only):
    EvalConfig, RuntimeConfig, Verdict, Timing, STATUSES, Evaluator

Layout. The judge is the modules here: evaluator.py (the pipeline), batch.py, judgement.py,
held_candidate.py, reference.py (with streamed_reference.py), trial_results.py,
time_command.py, reference_cache.py, schedule.py, compare.py, rulings.py, plausibility.py,
policy.py, audit.py (with audit_wrapper.py and audit_checks.py), environment.py, with the types
every part uses (config.py, verdict.py).
Below them, one concept per subpackage:
    sandbox/    starting, jailing and ending worker processes (the judge's side)
    worker/     the program inside a worker process: load, trials, timing, builds
    transport/  outputs from a worker to the judge, checked, without pickle
    device/     memory footprints, admission and reserve; the GPU lock
    pools/      where judging runs: this process (the Evaluator) or Ray actors
Imports go downward: pools -> the judge -> sandbox -> worker -> device, transport (and any of
them -> config, verdict).
"""
from kernelzero.eval.config import EvalConfig, RuntimeConfig
from kernelzero.eval.verdict import STATUSES, Timing, Verdict

__all__ = ["EvalConfig", "RuntimeConfig", "Verdict", "Timing", "STATUSES", "Evaluator", "ReferenceProbe"]


def __getattr__(name):  # keep `import kernelzero.eval` light; the evaluator pulls in torch
    if name in ("Evaluator", "ReferenceProbe"):
        from kernelzero.eval import evaluator
        return getattr(evaluator, name)
    raise AttributeError(name)
