"""Does weighing copied constants in the SFT loss make a Coder copy them better? An A/B at equal
compute: from one Coder, the same rows, order, steps and learning rate, once with the plain loss
(copy weight 1) and once with `--weight W`; then `bench/copy_probe.py`'s teacher-forced accuracy
of each on the same held-out modules, by kind of token.

    python bench/copy_weight.py --data rows.jsonl --steps 200 --weight 5 [--model PATH] [--json]

Each arm's model is kept under --work (an arm already trained is not trained again); the result
goes to bench/results/copy_weight.json.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import copy_probe  # noqa: E402  (bench/copy_probe.py)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=None, help="the Coder both arms start from (default: shipped)")
    ap.add_argument("--data", required=True, help="distilled rows (JSONL, prompt-completion)")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--weight", type=float, default=5.0)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--modules", type=int, default=200, help="held-out modules of the probe")
    ap.add_argument("--work", default="runs/copy_weight")
    ap.add_argument("--out", default="bench/results/copy_weight.json")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()

    from kernelzero.models.shipped import shipped_model
    from kernelzero.train.sft import SFTRunConfig, run_sft

    start = str(args.model or shipped_model("coder"))
    res = {"model": start, "data": args.data, "steps": args.steps, "lr": args.lr,
           "batch_size": args.batch_size, "arms": {}}
    res["arms"]["start"] = copy_probe.probe(start, args.modules, seed=123)
    for name, weight in (("plain", 1.0), (f"weight_{args.weight:g}", args.weight)):
        out = Path(args.work) / name
        if not (out / "model.safetensors").exists():
            t0 = time.time()
            cfg = SFTRunConfig(max_steps=args.steps, learning_rate=args.lr, lr_scheduler="constant",
                               batch_size=args.batch_size, max_length=2048, seed=0,
                               copy_weight=weight, log_every=max(1, args.steps // 10))
            fit = run_sft(start, args.data, out, cfg)
            (out / "fit.json").write_text(json.dumps({k: v for k, v in fit.items()
                                                     if k != "loss_curve"} | {"wall_s": time.time() - t0}))
        res["arms"][name] = copy_probe.probe(str(out), args.modules, seed=123)
        res["arms"][name]["copy_weight"] = weight
    for arm in res["arms"].values():
        arm.pop("per_module", None)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(res, indent=1))
    if args.json:
        print(json.dumps(res, indent=1))
        return
    print(f"{args.steps} steps of {args.batch_size} rows at lr {args.lr:g} from {start}; "
          f"teacher-forced accuracy on {args.modules} held-out modules:")
    print(f"{'arm':14s} " + " ".join(f"{c:>14s}" for c in copy_probe.CLASSES) + "  literals whole")
    for name, arm in res["arms"].items():
        acc = arm["token_accuracy"]
        print(f"{name:14s} " + " ".join(f"{acc[c]:14.1%}" for c in copy_probe.CLASSES)
              + f"  {arm['copied_literal_all_right']:.1%}")
    print(f"({args.out})")


if __name__ == "__main__":
    main()
