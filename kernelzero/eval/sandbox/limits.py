"""What a sandbox worker may use (`SandboxLimits`: rlimits, the judge's watchdog limits, the
isolation asked for), and the `sandbox` block every verdict's environment reports
(`sandbox_report`: those limits, and the isolation workers really get here).

Does not cover enforcing them: the rlimits are set by the worker process itself
(worker/process.py), the watchdog and the jail by the judge's `SandboxWorker` (sandbox.py,
jail.py, worker_uids.py).
"""
from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field

from kernelzero.eval.sandbox.jail import JailError, isolation_for


def _env_flag(name: str) -> bool | None:
    value = os.environ.get(name, "").strip()
    if value not in ("", "0", "1"):
        raise ValueError(f"${name}={value!r}: use 1, 0 or leave it unset")
    return None if value == "" else value == "1"


@dataclass
class SandboxLimits:
    """Per-worker resource limits (reported in every verdict's `env.sandbox`).

    cpu_s: CPU seconds for the worker process (RLIMIT_CPU).
    file_bytes: largest file the worker may write (RLIMIT_FSIZE); outputs are written as files.
    address_space_bytes: RLIMIT_AS; None on CUDA, whose driver reserves huge virtual ranges.
    nofile: open file descriptors.
    threads: torch intra-op threads in the worker (OMP_NUM_THREADS).
    The judge also polices the worker's processes while it waits for a reply (its session, or
    every process of its own uid): more than `max_processes` processes or `max_rss_bytes` of
    resident memory kills them (RLIMIT_NPROC does not bind root, RLIMIT_AS breaks CUDA; with a
    uid of its own, RLIMIT_NPROC is set to `max_processes` too).
    isolation: `auto` (a bubblewrap jail where this machine can make one, else none, warned
        about), `bwrap` (a jail or no worker at all), `none` (no jail). Default: $KZ_SANDBOX or
        auto.
    own_uid: run each worker as a uid of its own; None: wherever it can (root), on the CPU (on
        cuda the judge could not map CUDA IPC outputs of another uid: see jail.isolation_for).
        Default: $KZ_SANDBOX_OWN_UID (`1` or `0`) or None.
    pid_namespace: give each worker a PID namespace of its own; None: on the CPU, and wherever
        workers have no uid of their own (on cuda, and for an ordinary user).
    """

    cpu_s: int = 1800
    file_bytes: int = 16 * 2**30
    address_space_bytes: int | None = None
    nofile: int = 4096
    threads: int = 1
    max_processes: int = 128          # processes in the worker's session (watchdog; fork bombs)
    max_rss_bytes: int = 64 * 2**30   # resident memory of the whole session (watchdog)
    no_network: bool = True           # new network namespace when the OS allows it (root)
    isolation: str = field(default_factory=lambda: os.environ.get("KZ_SANDBOX") or "auto")
    own_uid: bool | None = field(default_factory=lambda: _env_flag("KZ_SANDBOX_OWN_UID"))
    pid_namespace: bool | None = None

    def rlimits(self) -> dict:
        return {"RLIMIT_CORE": 0, "RLIMIT_CPU": self.cpu_s, "RLIMIT_FSIZE": self.file_bytes,
                "RLIMIT_AS": self.address_space_bytes, "RLIMIT_NOFILE": self.nofile}


def sandbox_report(limits: SandboxLimits, device: str) -> dict:
    """A verdict environment's `sandbox` block: the limits, the isolation asked for
    (`requested`) and the isolation workers get (`isolation`: bwrap or none, with why)."""
    try:
        iso = isolation_for(limits.isolation, device, limits.pid_namespace,
                            limits.own_uid).report()
    except JailError as e:
        iso = {"isolation": "unavailable", "reason": str(e)}
    return {**asdict(limits), "requested": limits.isolation, **iso}
