"""`kernelzero train`: the alternating Proposer–Coder loop (CA-GRPO for the Coder).

    kernelzero train --config tiny-cpu|PATH.yaml [--out runs/NAME] [--resume] [--json]
                     [--pool local|ray [--ray-address ADDR] | --reward-url URL]

Judging: the config's `reward` section (local pool, Ray cluster, or a reward service), which
--pool / --reward-url override.

Several processes: `accelerate launch --config_file kernelzero/train/accelerate/ddp.yaml -m
kernelzero train --config ...` (see docs/training.md).
"""
from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    p = sub.add_parser("train", help="train the Coder and the Proposer in alternation (CA-GRPO)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config", required=True,
                   help="a preset name (tiny-cpu, plumbing-cpu, coder-cpu, single-h200, ...) or a YAML file; see kernelzero/train/config.py")
    p.add_argument("--out", default=None, help="run directory (default: runs/<config name>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its last complete phase")
    p.add_argument("--rounds", type=int, default=None, help="override the config's rounds")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override one config value, e.g. --set cold_start.data=data.jsonl or "
                        "--set coder.learning_rate=1e-5 (VALUE is read as YAML; repeatable)")
    g = p.add_argument_group("judging (override the config's reward section)")
    g.add_argument("--pool", choices=("local", "ray"), default=None,
                   help="judge in this machine's sandboxed workers, or across a Ray cluster "
                        "(one judge per GPU)")
    g.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="Ray cluster to join with --pool ray: 'auto', HOST:PORT, or unset for a "
                        "private local cluster")
    g.add_argument("--reward-url", default=None, metavar="URL",
                   help="judge on a reward service (`kernelzero serve`) at this base URL; "
                        "token from $KERNELZERO_REWARD_TOKEN")
    p.add_argument("--json", action="store_true", help="print the run summary as one JSON document")
    p.set_defaults(func=run)


def _reward_overrides(args) -> dict | None:
    """The reward section's keys the flags set. --pool and --reward-url each name where to judge,
    so each clears what the other would have set in the config file."""
    from kernelzero.cli import UsageError

    if args.reward_url and (args.pool or args.ray_address):
        raise UsageError("--reward-url judges on the service (its own --pool decides where); "
                         "drop --pool / --ray-address")
    if args.ray_address and args.pool != "ray":
        raise UsageError("--ray-address needs --pool ray")
    if args.reward_url:
        return {"url": args.reward_url, "pool": "local", "ray_address": None}
    if args.pool:
        return {"pool": args.pool, "ray_address": args.ray_address, "url": None}
    return None


def run(args) -> int:
    from kernelzero.cli import UsageError
    from kernelzero.train.config_file import load_config, parse_overrides

    try:
        overrides = parse_overrides(args.set)
    except ValueError as e:
        raise UsageError(str(e)) from None
    if args.rounds is not None:
        overrides.setdefault("rounds", args.rounds)  # an explicit --set rounds=N wins, as before
    reward = _reward_overrides(args)
    if reward:
        overrides["reward"] = reward
    try:
        cfg = load_config(args.config, overrides)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    from kernelzero.serve.client import RewardServiceError  # the error type only (no httpx)
    from kernelzero.train.judging import PoolUnavailable
    from kernelzero.train.loop import Loop, RunExists

    out = args.out or f"runs/{cfg.name}"
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    try:
        loop = Loop(cfg, out, resume=args.resume, log=log)
    except RunExists as e:
        raise UsageError(str(e)) from None
    try:
        summary = loop.run()
    except (PoolUnavailable, FileNotFoundError) as e:  # a service, a checkpoint or data not there
        raise UsageError(str(e)) from None
    except RewardServiceError as e:  # failed for good mid-run, after the client's retries
        print(f"kernelzero train: the reward service failed: {e} (verdicts reached so far are "
              f"kept; fix the service and run again with --resume)", file=sys.stderr)
        return 1
    if loop.rank != 0:  # under accelerate/torchrun only the main process reports
        return 0
    if args.json:
        print(json.dumps(summary))
    else:
        from kernelzero.report import render_heldout, render_heldout_change
        print("held-out greedy pass@1 (95% CI):")
        print(render_heldout(summary.get("heldout") or []), end="")
        print(render_heldout_change(summary.get("heldout_change")), end="")
        print(f"done: {summary['steps']} steps over {len(summary['phases'])} phases, "
              f"{summary['verdicts']} verdicts, pool {summary['pool']}, "
              f"{summary['wall_s']:.0f} s; reports in {out}/reports")
    return 0
