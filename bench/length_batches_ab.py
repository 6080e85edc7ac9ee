"""Do length-grouped batches (kernelzero/train/length_batches.py) change what an SFT step
teaches? An A/B at equal steps: one random model of a preset, the same rows, steps, learning rate
and seed, trained once with random batches and once with length-grouped ones; for each, the
held-out loss after, the padding share of its batches, and its rows per second.

    python bench/length_batches_ab.py --rows 8000 --steps 300 [--preset cpu] [--json]

Each arm's model is kept under --work (an arm already trained is not trained again); the result
goes to bench/results/length_batches_ab.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def padding_share(init: str, rows: list[dict], batch_size: int, grouped: bool, work: Path) -> float:
    """Padded tokens over all tokens of one epoch's batches."""
    from kernelzero.train.sft import SFTRunConfig, build_sft_trainer
    from kernelzero.train.sync_free import real_tokens
    cfg = SFTRunConfig(max_steps=1, batch_size=batch_size, max_length=2048, length_batches=grouped)
    loader = build_sft_trainer(init, rows, work / "probe", cfg).get_train_dataloader()
    real = total = 0
    for batch in loader:
        real, total = real + real_tokens(batch), total + batch["input_ids"].numel()
    return 1 - real / total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/family-train.jsonl.gz")
    ap.add_argument("--rows", type=int, default=8000, help="the first N rows of --data")
    ap.add_argument("--preset", default="cpu")
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--work", default="runs/length_batches_ab")
    ap.add_argument("--out", default="bench/results/length_batches_ab.json")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    import platform

    import torch

    from kernelzero.models.scratch import build_from_corpus, is_complete
    from kernelzero.train.cold_start import corpus
    from kernelzero.train.sft import SFTRunConfig, load_rows, run_sft

    work = Path(args.work)
    rows = load_rows(args.data)[:args.rows]
    init = work / "init"
    if not is_complete(init):
        build_from_corpus(init, corpus(rows[:4000]), args.preset, seed=args.seed)
    result = {"command": "python bench/length_batches_ab.py " + " ".join(sys.argv[1:]),
              "machine": f"{platform.node()} ({torch.get_num_threads()} threads, "
                         f"{torch.cuda.get_device_name() if torch.cuda.is_available() else 'CPU'})",
              "date": time.strftime("%Y-%m-%d"), "rows": len(rows), "preset": args.preset,
              "steps": args.steps, "batch_size": args.batch_size, "lr": args.lr, "arms": {}}
    for name, grouped in (("random", False), ("length", True)):
        arm = work / name
        done = arm / "figures.json"
        if not done.exists():
            cfg = SFTRunConfig(max_steps=args.steps, batch_size=args.batch_size, learning_rate=args.lr,
                               lr_scheduler="cosine", warmup_ratio=0.03, weight_decay=0.01,
                               max_length=2048, eval_fraction=0.02, seed=args.seed, log_every=50,
                               length_batches=grouped, bf16=torch.cuda.is_available())
            res = run_sft(str(init), rows, arm / "model", cfg)
            res["padding_share"] = padding_share(str(init), rows, args.batch_size, grouped, arm)
            arm.mkdir(parents=True, exist_ok=True)
            done.write_text(json.dumps(res) + "\n")
        res = json.loads(done.read_text())
        result["arms"][name] = {k: res[k] for k in ("eval_loss_before", "eval_loss_after", "wall_s",
                                                    "tokens_per_s", "padding_share", "train_loss")}
        result["arms"][name]["rows_per_s"] = args.steps * args.batch_size / res["wall_s"]
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    if args.json:
        print(json.dumps(result))
        return
    for name, a in result["arms"].items():
        print(f"{name:>7}: held-out loss {a['eval_loss_before']:.3f} -> {a['eval_loss_after']:.4f}, "
              f"padding {a['padding_share']:.0%}, {a['rows_per_s']:.1f} rows/s")


if __name__ == "__main__":
    main()
