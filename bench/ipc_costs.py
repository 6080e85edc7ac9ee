"""What moving one output from a worker to the judge costs on this GPU, piece by piece.

A child process (the worker's role) allocates outputs of a given size and shares them through CUDA
IPC (`kernelzero.eval.transport.cuda_ipc.share`); this process (the judge's role) opens and copies
them (`open_shared`), one handle per output, or all outputs cut from one shared allocation. Also
times a fresh `cudaMalloc` of that size and a device-to-device copy, for scale.

    python bench/ipc_costs.py --mb 256 --n 5 --out ipc_costs.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time


def child(mb: int, n: int) -> None:
    import torch
    from kernelzero.eval.transport.cuda_ipc import share
    numel = mb * 2**20 // 4
    keep, descs = [], []
    t0 = time.perf_counter()
    for _ in range(n):  # one allocation per output, as the worker does today
        t = torch.randn(numel, device="cuda")
        keep.append(t)
        descs.append(share(t))
    torch.cuda.synchronize()
    own_ms = (time.perf_counter() - t0) * 1e3
    slab = torch.randn(n * numel, device="cuda")  # n outputs cut from one allocation
    t0 = time.perf_counter()
    one = share(slab)
    torch.cuda.synchronize()
    slab_ms = (time.perf_counter() - t0) * 1e3
    print(json.dumps({"descs": descs, "slab": one, "alloc_share_ms": own_ms, "slab_share_ms": slab_ms}),
          flush=True)
    sys.stdin.readline()  # alive until the judge has copied everything


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--n", type=int, default=5)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", default=None)
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.child:
        return child(a.mb, a.n)
    import torch
    from kernelzero.eval.transport.cuda_ipc import open_shared
    torch.zeros(1, device="cuda")
    numel = a.mb * 2**20 // 4
    rows = []
    for r in range(a.repeat):
        p = subprocess.Popen([sys.executable, __file__, "--child", "--mb", str(a.mb), "--n", str(a.n)],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        info = json.loads(p.stdout.readline())
        per = []
        for d in info["descs"]:  # one open + copy + close per output
            t0 = time.perf_counter()
            x = open_shared(d, [numel], torch.float32)
            torch.cuda.synchronize()
            per.append((time.perf_counter() - t0) * 1e3)
            del x
        t0 = time.perf_counter()  # one open, n views copied, one close
        s = info["slab"]
        whole = open_shared(s, [a.n * numel], torch.float32)
        parts = [whole[i * numel:(i + 1) * numel] for i in range(a.n)]
        torch.cuda.synchronize()
        slab_ms = (time.perf_counter() - t0) * 1e3
        del whole, parts
        p.stdin.write("\n")
        p.stdin.flush()
        p.wait()
        t0 = time.perf_counter()
        y = torch.empty(numel * (r + 2), device="cuda")  # a size the allocator has not cached
        torch.cuda.synchronize()
        malloc_ms = (time.perf_counter() - t0) * 1e3
        z = torch.empty(numel, device="cuda")
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        z.copy_(y[:numel])
        torch.cuda.synchronize()
        copy_ms = (time.perf_counter() - t0) * 1e3
        del y, z
        torch.cuda.empty_cache()
        rows.append({"open_copy_each_ms": per, "open_copy_slab_ms": slab_ms,
                     "child_alloc_share_ms": info["alloc_share_ms"],
                     "child_slab_share_ms": info["slab_share_ms"],
                     "malloc_ms": malloc_ms, "copy_ms": copy_ms})
        print(f"run {r + 1}: {a.n} outputs of {a.mb} MB: open+copy each "
              f"{statistics.median(per):.2f} ms (first {per[0]:.2f}), all from one allocation "
              f"{slab_ms:.2f} ms; child alloc+share {info['alloc_share_ms']:.1f} ms; "
              f"cudaMalloc {malloc_ms:.2f} ms; D2D copy {copy_ms:.3f} ms")
    if a.out:
        with open(a.out, "w") as f:
            json.dump({"mb": a.mb, "n": a.n, "gpu": torch.cuda.get_device_name(), "runs": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
