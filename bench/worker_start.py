"""Sandbox worker start-up: a fresh `python -I` process (spawn) against a fork from the fork
server (fork), on this machine's device. Times N workers started one after another (start to
`ready`, then the `warm` command), after one untimed start of each kind (the fork server's own
start is reported apart). Quote the ratio: absolute times on a busy machine are noise.

    python bench/worker_start.py [--n 6] [--device cpu] [--out worker_start.json]
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

from kernelzero.eval.sandbox import SandboxLimits, SandboxWorker  # noqa: E402


def start_once(method: str, device: str) -> float:
    t0 = time.perf_counter()
    with SandboxWorker(device, SandboxLimits(), name="bench", start_method=method) as w:
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
    args = ap.parse_args()
    res = {"device": args.device, "n": args.n}
    for method in ("spawn", "fork"):
        first = start_once(method, args.device)  # fork: includes starting the fork server
        times = [start_once(method, args.device) for _ in range(args.n)]
        res[method] = {"first_s": first, "median_s": statistics.median(times), "times_s": times}
        print(f"{method:5s}: first {first:6.2f} s, then median {statistics.median(times):6.3f} s "
              f"over {args.n}", flush=True)
    res["ratio_spawn_over_fork"] = res["spawn"]["median_s"] / res["fork"]["median_s"]
    print(f"spawn / fork = {res['ratio_spawn_over_fork']:.1f}x")
    args.out.write_text(json.dumps(res, indent=2))
    print(f"results: {args.out}")


if __name__ == "__main__":
    main()
