"""Candidates per minute through each judging pool: local, Ray, and the HTTP service.

The same batch (every sample under --samples against its task under --tasks, repeated --repeat
times with a comment appended so each copy is a distinct source that no cache can short-cut) is
judged three ways, each with a fresh evaluator and its own work directory:

- local:   `Evaluator(cfg).judge_many(batch)` in this process;
- ray:     `RayPool(cfg)` on a private local Ray cluster (or --ray-address), same config;
- service: the local pool behind `kernelzero serve`'s app (uvicorn on 127.0.0.1, in a thread),
           judged through `RewardClient` as a trainer would.

Wall time runs from the first submission to the last verdict; building a pool (starting Ray, the
server, and every judge's spare workers) is reported apart as setup_s. Service overhead = service wall / local wall - 1, in %.
All modes judge with the same EvalConfig.seed (so on the same inputs) and must reach the same
status for every candidate; disagreements are listed with each mode's reason.
For ray, the candidates and distinct tasks each actor judged are reported (`per_actor`); every
task an actor judges costs it a reference, so `duplicate_references` is reference work done twice.

Every judge (the local evaluator, each Ray actor, the service's evaluator) starts `--spares`
spare workers (RuntimeConfig.spares; by default EvalConfig's, from the judge's max_workers: --workers,
or --runs-per-gpu for a Ray GPU actor; reported as `spares_per_judge`) and is warmed up before
the clock starts. Each candidate and each new task takes one worker, so a judge whose
spares cover its share of the batch (candidates + tasks, over the actors for ray) measures
judging; one with fewer also measures process start-up (the rest start while the batch waits).

    python bench/eval_pools.py --device cpu --out runs/bench/eval_pools_cpu.json
    python bench/eval_pools.py --device cuda --backends triton --repeat 6 --out eval_pools_h200.json
"""
from __future__ import annotations

import argparse
import collections
import dataclasses
import json
import os
import platform
import socket
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernelzero.eval import EvalConfig, RuntimeConfig  # noqa: E402
from kernelzero.tasks import Candidate, find_samples, load_tasks  # noqa: E402

MODES = ("local", "ray", "service")


def build_batch(tasks_dir: Path, samples_dir: Path, repeat: int, device: str,
                backends: set[str] | None = None):
    tasks = {(t.level, t.problem_id): t for t in load_tasks(tasks_dir)}
    base = []
    for level, pid, _, path in find_samples(samples_dir):
        cand = Candidate.from_file(path)
        backend = cand.resolved_backend()
        if (level, pid) not in tasks or (device == "cpu" and backend == "cuda"):
            continue
        if backends and backend not in backends:
            continue
        base.append((tasks[(level, pid)], cand))
    if not base:
        raise SystemExit(f"no sample under {samples_dir} matches a task under {tasks_dir}")
    batch = []
    for r in range(repeat):
        for task, cand in base:
            batch.append((task, Candidate(source=cand.source + f"\n# bench copy {r}\n",
                                          name=f"{cand.name}#{r}", backend=cand.backend,
                                          sample_id=cand.sample_id)))
    return batch


def throughput_batch(repeat: int, scale: int):
    """eval_throughput's KernelBench-sized problems, the reference itself as candidate."""
    sys.path.insert(0, str(ROOT / "bench"))
    from eval_throughput import as_candidate, make_tasks

    return [(t, as_candidate(t, r)) for r in range(repeat) for t in make_tasks(scale)]


def timed_judge(pool, batch) -> tuple[float, list]:
    t0 = time.perf_counter()
    verdicts = pool.judge_many(batch)
    return time.perf_counter() - t0, verdicts


def run_local(cfg, batch, args):
    from kernelzero.eval import Evaluator

    t0 = time.perf_counter()
    with Evaluator(cfg) as ev:
        ev.warm_up()
        setup = time.perf_counter() - t0
        wall, verdicts = timed_judge(ev, batch)
    return setup, wall, verdicts, {"spares_per_judge": cfg.spare_pool_size}


def run_ray(cfg, batch, args):
    from kernelzero.eval.pools.ray_pool import RayPool, RayPoolConfig

    t0 = time.perf_counter()
    with RayPool(cfg, RayPoolConfig(address=args.ray_address,
                                    runs_per_gpu=args.runs_per_gpu)) as pool:
        pool.warm_up()
        setup = time.perf_counter() - t0
        wall, verdicts = timed_judge(pool, batch)
        health = pool.health()
        placed = list(pool.placements)[-len(batch):]
    actor_cfg = dataclasses.replace(cfg, max_workers=health["slots_per_actor"])
    return setup, wall, verdicts, {"spares_per_judge": actor_cfg.spare_pool_size,
                                   "nodes": health["nodes_alive"], "per_node": health["per_node"],
                                   "actors": health["actors"], "retried": health["retried"],
                                   "worker_lost": health["worker_lost"],
                                   **actor_spread(placed)}


def actor_spread(placed: list[dict]) -> dict:
    """Candidates and distinct tasks per Ray actor (by pid), from `RayPool.placements`. An
    actor computes the reference of each task it judges (at least once: its evaluator may evict
    and recompute it), so references beyond one per task are duplicated GPU work."""
    per = {}
    for p in placed:
        a = per.setdefault(p["pid"], {"pid": p["pid"], "node_id": p.get("node_id"),
                                      "gpu_ids": p.get("gpu_ids"), "candidates": 0, "tasks": set()})
        a["candidates"] += 1
        a["tasks"].add(p["task_hash"])
    per_actor = [{**a, "tasks": len(a["tasks"])} for a in per.values()]
    references = sum(a["tasks"] for a in per_actor)
    distinct = len({p["task_hash"] for p in placed})
    return {"per_actor": per_actor, "references": references,
            "duplicate_references": references - distinct}


def run_service(cfg, batch, args):
    import uvicorn

    from kernelzero.eval import Evaluator
    from kernelzero.serve.app import ServeConfig, create_app
    from kernelzero.serve.client import RewardClient

    t0 = time.perf_counter()
    with Evaluator(cfg) as ev:
        ev.warm_up()
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        app = create_app(ev, ServeConfig(max_queue=max(256, len(batch)), max_batch=256,
                                         max_body_bytes=64 * 2**20,
                                         dispatchers=cfg.max_workers, max_dispatch=1),
                         pool_kind="local")
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        try:
            with RewardClient(f"http://127.0.0.1:{port}", batch_size=args.service_batch,
                              concurrency=args.service_concurrency, timeout=3600) as client:
                setup = time.perf_counter() - t0
                wall, verdicts = timed_judge(client, batch)
                retries = client.retries
        finally:
            server.should_exit = True
            thread.join(10)
            sock.close()
    return setup, wall, verdicts, {"spares_per_judge": cfg.spare_pool_size,
                                   "client_retries": retries, "client_batch": args.service_batch,
                                   "client_concurrency": args.service_concurrency}


RUNNERS = {"local": run_local, "ray": run_ray, "service": run_service}


def spread_line(r: dict) -> str:
    actors = ", ".join(f"pid {a['pid']} gpu {','.join(a['gpu_ids'] or []) or '-'}: "
                       f"{a['candidates']} cands / {a['tasks']} tasks" for a in r["per_actor"])
    return (f"references {r['references']} ({r['duplicate_references']} duplicated) "
            f"over {len(r['per_actor'])} actors [{actors}]")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--tasks", type=Path, default=ROOT / "kernelzero" / "examples" / "tasks")
    p.add_argument("--samples", type=Path, default=ROOT / "kernelzero" / "examples" / "candidates")
    p.add_argument("--repeat", type=int, default=2, help="copies of the sample set in the batch")
    p.add_argument("--workers", type=int, default=4, help="EvalConfig.max_workers (local, service)")
    p.add_argument("--spares", type=int, default=None,
                   help="RuntimeConfig.spares of every judge: each local evaluator, each Ray actor, "
                        "the service's (default: EvalConfig's, from --workers)")
    p.add_argument("--runs-per-gpu", type=int, default=None,
                   help="candidates one Ray GPU actor judges at once (default: --workers)")
    p.add_argument("--ray-address", default=None, help="join this Ray cluster (default: private)")
    p.add_argument("--service-batch", type=int, default=16, help="pairs per HTTP request")
    p.add_argument("--service-concurrency", type=int, default=4, help="requests in flight")
    p.add_argument("--problems", choices=("samples", "throughput"), default="samples",
                   help="samples: --samples against --tasks; throughput: the GPU-heavy problems "
                        "of bench/eval_throughput.py (reference as candidate, policy none)")
    p.add_argument("--size-scale", type=int, default=1, help="with --problems throughput")
    p.add_argument("--backends", default="",
                   help="only samples in these languages, e.g. 'triton' or 'triton,cuda' "
                        "(default: all)")
    p.add_argument("--seed", type=int, default=20261129,
                   help="EvalConfig.seed for every mode, so all judge on the same inputs")
    p.add_argument("--modes", default=",".join(MODES), help="comma-separated subset of " +
                   ",".join(MODES))
    p.add_argument("--out", type=Path, required=True, help="where the JSON results go")
    args = p.parse_args(argv)
    modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    if not modes or any(m not in MODES for m in modes):
        p.error(f"--modes: choose from {MODES}")

    backends = {b.strip() for b in args.backends.split(",") if b.strip()} or None
    if args.problems == "throughput":
        batch = throughput_batch(args.repeat, args.size_scale)
    else:
        batch = build_batch(args.tasks, args.samples, args.repeat, args.device, backends)
    work = Path(tempfile.mkdtemp(prefix="kz-bench-pools-"))
    results: dict = {}
    verdicts_by_mode: dict = {}
    env = None
    for mode in modes:
        cfg = EvalConfig(device=args.device, max_workers=args.workers, seed=args.seed,
                         runtime=RuntimeConfig(spares=args.spares),
                         work_dir=str(work / mode),  # fresh build caches per mode
                         policy="none" if args.problems == "throughput" else "strict")
        print(f"[{mode}] judging {len(batch)} candidates ...", file=sys.stderr, flush=True)
        try:
            setup, wall, verdicts, extra = RUNNERS[mode](cfg, batch, args)
        except ImportError as e:  # Ray or FastAPI/uvicorn missing on this machine
            results[mode] = {"skipped": str(e)}
            print(f"[{mode}] skipped: {e}", file=sys.stderr)
            continue
        verdicts_by_mode[mode] = verdicts
        env = env or next((v.env for v in verdicts if v.env), None)
        statuses = collections.Counter(v.status for v in verdicts)
        results[mode] = {"setup_s": setup, "wall_s": wall,
                         "candidates_per_min": 60.0 * len(batch) / wall,
                         "statuses": dict(statuses), **extra}
        print(f"[{mode}] {wall:.2f} s, {results[mode]['candidates_per_min']:.1f} candidates/min "
              f"(setup {setup:.2f} s) {dict(statuses)}", file=sys.stderr, flush=True)
        if "per_actor" in extra:
            print(f"[{mode}] {spread_line(extra)}", file=sys.stderr, flush=True)

    disagreements = []
    if len(verdicts_by_mode) > 1:
        for i, (_, cand) in enumerate(batch):
            seen = {m: vs[i].status for m, vs in verdicts_by_mode.items()}
            if len(set(seen.values())) > 1:
                disagreements.append({"candidate": cand.name, **seen, "reasons": {
                    m: vs[i].reason for m, vs in verdicts_by_mode.items()}})
    summary = {
        "bench": "eval_pools",
        "machine": {"host": platform.node(), "cpus": os.cpu_count(),
                    "python": sys.version.split()[0],
                    "gpu": (env or {}).get("gpu"), "torch": (env or {}).get("torch"),
                    "triton": (env or {}).get("triton")},
        "device": args.device,
        "batch": {"candidates": len(batch), "repeat": args.repeat, "workers": args.workers,
                  "problems": args.problems, "size_scale": args.size_scale,
                  "seed": args.seed, "backends": sorted(backends) if backends else "all",
                  "spares": args.spares,  # None: EvalConfig's default
                  "tasks": len({t.hash for t, _ in batch})},
        "modes": results,
        "disagreements": disagreements,
    }
    local, service = results.get("local", {}), results.get("service", {})
    if "wall_s" in local and "wall_s" in service:
        summary["service_overhead_pct"] = 100.0 * (service["wall_s"] / local["wall_s"] - 1.0)
    if "wall_s" in local and "wall_s" in results.get("ray", {}):
        summary["ray_speed_vs_local"] = local["wall_s"] / results["ray"]["wall_s"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2, default=str))
    for mode, r in results.items():
        line = r.get("skipped") or (f"{r['candidates_per_min']:8.1f} candidates/min  "
                                    f"wall {r['wall_s']:7.2f} s  setup {r['setup_s']:6.2f} s")
        print(f"{mode:8s} {line}")
        if "per_actor" in r:
            print(f"         {spread_line(r)}")
    if "service_overhead_pct" in summary:
        print(f"service overhead: {summary['service_overhead_pct']:+.1f}%")
    if disagreements:
        print(f"!! {len(disagreements)} candidates got different statuses across modes")
    print(f"wrote {args.out}")
    return 1 if disagreements else 0


if __name__ == "__main__":
    sys.exit(main())
