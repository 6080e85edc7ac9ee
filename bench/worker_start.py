"""Sandbox worker start-up: a fresh `python -I` process (spawn) against a fork from the fork
server (fork), each without a jail and in one (kernelzero/eval/sandbox/jail.py), on this machine's
device. Times N workers started one after another (start to `ready`, then the `warm` command, then
closing it: a jailed worker's close kills its uid's processes), after one untimed start of each
kind (the fork server's own start is reported apart). Quote the ratios: absolute times on a busy
machine are noise.

    python bench/worker_start.py [--n 6] [--device cpu] [--sandbox none auto] [--out worker_start.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelzero.eval.sandbox.sandbox import SandboxLimits, SandboxWorker  # noqa: E402


def start_once(method: str, device: str, sandbox: str) -> float:
    t0 = time.perf_counter()
    with SandboxWorker(device, SandboxLimits(isolation=sandbox), name="bench",
                       start_method=method) as w:
        w.start()
        w.request({"op": "warm", "device": device}, 300)
        if method == "fork" and type(w.proc).__name__ != "ForkedProcess":
            raise SystemExit("the fork server could not start; fell back to spawn")
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=6)
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--out", type=Path, default=Path(tempfile.gettempdir()) / "worker_start.json")
    ap.add_argument("--sandbox", nargs="+", default=["none", "auto"],
                    choices=["none", "auto", "bwrap"], help="isolations to compare")
    args = ap.parse_args()
    res = {"device": args.device, "n": args.n}
    for sandbox in args.sandbox:
        for method in ("spawn", "fork"):
            first = start_once(method, args.device, sandbox)  # fork: starts the fork server
            times = [start_once(method, args.device, sandbox) for _ in range(args.n)]
            key = f"{method}/{sandbox}"
            res[key] = {"first_s": first, "median_s": statistics.median(times), "times_s": times}
            print(f"{key:12s}: first {first:6.2f} s, then median {statistics.median(times):6.3f} s "
                  f"over {args.n}", flush=True)
    for sandbox in args.sandbox:
        res[f"ratio_spawn_over_fork/{sandbox}"] = \
            res[f"spawn/{sandbox}"]["median_s"] / res[f"fork/{sandbox}"]["median_s"]
        print(f"spawn / fork ({sandbox}) = {res[f'ratio_spawn_over_fork/{sandbox}']:.2f}x")
    if "none" in args.sandbox:
        for sandbox in set(args.sandbox) - {"none"}:
            for method in ("spawn", "fork"):
                r = res[f"{method}/{sandbox}"]["median_s"] / res[f"{method}/none"]["median_s"]
                res[f"ratio_{sandbox}_over_none/{method}"] = r
                print(f"{method}: {sandbox} / none = {r:.2f}x")
    args.out.write_text(json.dumps(res, indent=2))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
