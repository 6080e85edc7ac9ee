"""The worker: the program that runs inside a sandboxed process, the only place where a
reference module or a candidate runs.

- process.py: the worker process's `main`: the private reply channel, rlimits, and the loop of
  one JSON command a line;
- worker.py: `Worker`, the commands (load, build, run, time, ...);
- network.py: the worker's own empty network namespace, made before any untrusted code loads;
- trials.py: the correctness trials (the `run` command); timer.py: the timed loop (`time`),
  on the clocks and events of timing_primitives.py (captured before untrusted code loads),
  calibrated by timing_calibration.py, deciding by the rules of timing_rules.py;
- warm_up.py: the `warm` command, a spare's start-up costs paid in stages, with the CUDA
  libraries of warm_libraries.py;
- builds.py: compiled extensions reused across judgements of the same source (the judge's
  cache, and the worker's `load_inline` hook);
- library_share.py: the share of a candidate's GPU time spent in vendor libraries (profiled
  here, ruled on by the judge);
- failures.py: how a worker names what went wrong.

Starting, jailing and ending worker processes is `kernelzero.eval.sandbox`'s (which imports
this package, never the other way round); outputs go back to the judge through
`kernelzero.eval.transport`.
"""
