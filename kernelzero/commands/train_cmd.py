"""`kernelzero train`: the alternating Proposer–Coder loop (CA-GRPO for the Coder).

    kernelzero train --config tiny-cpu|PATH.yaml [--out runs/NAME] [--resume] [--json]

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
                   help="a preset name (tiny-cpu, single-h200) or a YAML file; see kernelzero/train/config.py")
    p.add_argument("--out", default=None, help="run directory (default: runs/<config name>)")
    p.add_argument("--resume", action="store_true",
                   help="continue the run in --out from its last complete phase")
    p.add_argument("--rounds", type=int, default=None, help="override the config's rounds")
    p.add_argument("--json", action="store_true", help="print the run summary as one JSON document")
    p.set_defaults(func=run)


def run(args) -> int:
    from kernelzero.cli import UsageError
    from kernelzero.train.config import load_config

    overrides = {"rounds": args.rounds} if args.rounds is not None else None
    try:
        cfg = load_config(args.config, overrides)
    except (FileNotFoundError, ValueError) as e:
        raise UsageError(str(e)) from None
    from kernelzero.train.loop import Loop, RunExists

    out = args.out or f"runs/{cfg.name}"
    log = (lambda msg: print(msg, file=sys.stderr)) if args.json else print
    try:
        loop = Loop(cfg, out, resume=args.resume, log=log)
    except RunExists as e:
        raise UsageError(str(e)) from None
    summary = loop.run()
    if loop.rank != 0:  # under accelerate/torchrun only the main process reports
        return 0
    if args.json:
        print(json.dumps(summary))
    else:
        print(f"done: {summary['steps']} steps over {len(summary['phases'])} phases, "
              f"{summary['verdicts']} verdicts, pool {summary['pool']}, "
              f"{summary['wall_s']:.0f} s; reports in {out}/reports")
    return 0
