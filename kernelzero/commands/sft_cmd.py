"""`kernelzero sft`: fine-tune a model on distilled kernels (TRL SFTTrainer, completion-only loss).

    kernelzero sft --model PATH --data DATA.jsonl --out CKPT [--lora] [--epochs 2] [--max-steps N]
"""
from __future__ import annotations

import argparse
import json
import sys


def register(sub) -> None:
    p = sub.add_parser("sft", help="fine-tune on distilled kernels (completion-only loss, LoRA optional)",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", required=True, help="local checkpoint directory")
    p.add_argument("--data", required=True, help="JSONL written by `kernelzero distill`")
    p.add_argument("--out", required=True, help="where the fine-tuned model (or adapter) goes")
    p.add_argument("--epochs", type=float, default=2.0)
    p.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: run the epochs)")
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--batch-size", type=int, default=4)
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--max-length", type=int, default=8192)
    p.add_argument("--lora", action="store_true", help="train a LoRA adapter (peft)")
    p.add_argument("--lora-r", type=int, default=16)
    p.add_argument("--bf16", action="store_true")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--copy-weight", type=float, default=1.0,
                   help="weigh the constants a completion copies from its prompt this many times "
                        "in the loss (kernelzero/train/copy_loss.py; 1: the plain loss)")
    p.add_argument("--time-limit-s", type=float, default=0.0,
                   help="stop after this many seconds of training and save what was trained (0: no limit)")
    p.add_argument("--schedule-by-time", action="store_true",
                   help="with --time-limit-s: the learning rate decays over that time, reaching 0 as "
                        "it ends, instead of over the planned steps (--max-steps then only caps them)")
    p.add_argument("--length-batches", action="store_true",
                   help="batch rows of similar length together (less padding; kernelzero/train/length_batches.py)")
    p.add_argument("--logging-steps", type=int, default=1,
                   help="record the loss every N steps (each record waits for the device to finish "
                        "its step)")
    p.add_argument("--log-every", type=int, default=100,
                   help="a progress line (step, loss, tok/s) on stderr every N steps (0: none)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=run)


def run(args) -> int:
    from kernelzero.cli import UsageError
    from kernelzero.commands.checks import require_dir, require_file
    from kernelzero.train.sft import SFTRunConfig, run_sft

    require_dir(args.model, "--model")
    require_file(args.data, "--data")
    try:
        cfg = SFTRunConfig(epochs=args.epochs, max_steps=args.max_steps, learning_rate=args.lr,
                           batch_size=args.batch_size, grad_accum=args.grad_accum,
                           max_length=args.max_length, lora=args.lora, lora_r=args.lora_r,
                           bf16=args.bf16, seed=args.seed, copy_weight=args.copy_weight,
                           time_limit_s=args.time_limit_s, schedule_by_time=args.schedule_by_time,
                           length_batches=args.length_batches, logging_steps=args.logging_steps,
                           log_every=args.log_every)
        out = run_sft(args.model, args.data, args.out, cfg,
                      log=lambda line: print(line, file=sys.stderr, flush=True))
    except ValueError as e:
        raise UsageError(str(e)) from None
    print(json.dumps(out) if args.json else
          f"trained {out['steps']} steps on {out['rows']} rows (loss {out['train_loss']:.3f}) -> {out['out']}"
          + (f" (stopped by --time-limit-s {args.time_limit_s:g} of {out['planned_steps']} planned steps)"
             if out["stopped_by_time_limit"] and not out["schedule_by_time"] else ""))
    return 0
