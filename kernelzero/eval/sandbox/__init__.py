"""The sandbox, seen from the judge: starting a worker process, confining it, and ending it.

- sandbox.py: `SandboxWorker`, one fresh `python -I` process for one reference or candidate
  (scrubbed environment, private directory, rlimits), started and ended with all it started;
- channel.py: its request/reply channel (deadlines, its processes policed, why it died);
- limits.py: `SandboxLimits`, what a worker may use and the isolation asked for, and the
  `sandbox` block a verdict reports;
- forkserver.py: workers forked from a zygote that has imported torch already;
- spares.py: workers started ahead of need, so start-up leaves the critical path;
- jail.py: the bubblewrap jail (what a worker sees of the filesystem and of other processes);
- worker_uids.py: a uid of its own for each jailed worker where the judge runs as root;
- process_tree.py: a worker's processes read from /proc (limits policed, waited until gone).

What runs inside the process is the `kernelzero.eval.worker` package; this one imports it
(to start it) and is never imported by it.
"""
