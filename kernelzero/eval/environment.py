"""The environment block of a verdict, and the keys that make cached results comparable.

A verdict is only comparable with another judged under the same torch, triton, GPU, tolerance,
policy and timing method; `env_key` hashes exactly those fields so the store never mixes them.
"""
from __future__ import annotations

import hashlib
import importlib.metadata
import json
import platform
import sys

# How `worker.time` measures (bump when that changes: stored timings from another method are not
# comparable). v2: events on the timing stream behind the L2 flush, after-stream work checked.
# v3: the same, after a warm-up of at least `timing_warmup_ms` (GPU clocks up before timing),
# with the GPU spinning before each start event while the host launches the call.
# v4: the warm-up follows the timed calls' input pattern, and the spin grows once a call's
# launch outlasts it. v5: each call's inputs are drawn right after the last call's events, at its
# addresses (no copy, no synchronize before the flush); the flush counts toward the launch lead.
# v6: calls queued back to back; a device-wide synchronize (the after-stream check) only after
# randomly chosen calls; launch cover checked by querying each call's start event. v7: work after
# the call counts only beyond 0.06 ms of gap over the calibrated latency (was 0.03 ms: honest
# sub-millisecond kernels under host load read 0.03-0.04 ms late on the H200, 12-18% slow).
TIMING_METHOD = "events-pipelined-v7"


def probe_gpu() -> tuple[str | None, int | None]:
    """The GPU's name and memory in bytes, asked of a throwaway process so the judge never
    initialises CUDA itself; (None, None) when it cannot tell."""
    import subprocess
    code = ("import torch; p = torch.cuda.get_device_properties(0); "
            "print(p.total_memory); print(torch.cuda.get_device_name())")
    try:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        lines = out.stdout.strip().splitlines()
        if out.returncode != 0 or len(lines) < 2:
            return None, None
        return lines[-1], int(lines[-2])
    except (OSError, subprocess.TimeoutExpired, ValueError):
        return None, None


def _version(pkg: str) -> str | None:
    try:
        return importlib.metadata.version(pkg)
    except importlib.metadata.PackageNotFoundError:
        return None


def environment(cfg, limits, gpu_name: str | None) -> dict:
    """`sandbox` holds the workers' limits and their isolation (`sandbox.isolation`: `bwrap`, or
    `none` where code under judgement could reach the user's files and the store)."""
    import torch

    from kernelzero.eval.sandbox.limits import sandbox_report
    return {
        "torch": torch.__version__, "triton": _version("triton"), "python": sys.version.split()[0],
        "platform": platform.platform(terse=True), "device": cfg.device,
        "gpu": gpu_name if cfg.device == "cuda" else None,
        "policy": cfg.policy, "tolerance": cfg.tolerance,
        "timing_method": TIMING_METHOD if cfg.device == "cuda" else None,
        "sandbox": sandbox_report(limits, cfg.device),
    }


def env_key(env: dict) -> str:
    fields = {k: env.get(k) for k in ("torch", "triton", "device", "gpu", "policy", "tolerance",
                                      "timing_method")}
    return hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:12]


def ref_timing_key(task_hash: str, env: dict, cfg) -> str:
    parts = [task_hash, env.get("gpu"), env.get("torch"), TIMING_METHOD, cfg.timing_warmup,
             cfg.timing_warmup_ms, cfg.timing_min_trials, cfg.timing_max_trials,
             cfg.timing_rel_spread, cfg.compile_baseline]
    return "ref:" + hashlib.sha256(json.dumps(parts).encode()).hexdigest()[:20]
