"""Where does an SFT step's time go? The same random model, rows and batch trained a few dozen
steps under each variant of the trainer's settings; steps/s and tokens/s after a warm-up.

    python bench/sft_throughput.py --preset gpu --steps 60 --variants base,log50,compile,bs128

Variants (each on top of `kernelzero.train.sft.build_sft_trainer`, as a cold start builds it):
    base      the cold start's trainer (the loss logged every step, which waits for the device)
    log50     the loss logged every 50 steps (`SFTRunConfig.logging_steps`)
    mask      log50 with the attention mask kept on right-padded batches (as before 7 Dec;
              `sft.drop_right_padding_mask` drops it, so attention takes its causal fast path)
    workers   log50, and two dataloader worker processes collating beside the GPU
    compile   log50, and the model compiled in place (`torch.compile`, dynamic shapes; the first
              steps pay the compilation)
    bsN       log50 with batches of N rows (bs128, bs256: a step then teaches on more rows)
The result (one JSON object per variant) goes to --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def step_clock():
    """A TrainerCallback that records the time of every step's end, after the device is done."""
    import torch
    from transformers import TrainerCallback

    class Clock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []

        def on_step_end(self, args, state, control, **kw):
            if torch.cuda.is_available():
                torch.cuda.synchronize()
            self.times.append(time.perf_counter())

    return Clock()


def run_variant(name: str, init: str, rows: list[dict], steps: int, batch: int, work: Path) -> dict:
    import torch

    from kernelzero.train.sft import SFTRunConfig, build_sft_trainer

    bs = int(name[2:]) if name.startswith("bs") else batch
    cfg = SFTRunConfig(max_steps=steps, batch_size=bs, max_length=2048, learning_rate=1e-3,
                       bf16=torch.cuda.is_available(), logging_steps=1 if name == "base" else 50)
    clock = step_clock()
    trainer = build_sft_trainer(init, rows, work / name, cfg, callbacks=[clock])
    if name == "mask":
        trainer.mask_hook.remove()
    if name == "workers":
        trainer.args.dataloader_num_workers = 2
    if name == "compile":
        trainer.model.compile(dynamic=True)  # in place: the saved weights keep their names
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    warm = min(10, steps // 3)
    span = clock.times[-1] - clock.times[warm - 1]
    timed = len(clock.times) - warm
    tokens = max((float(h.get("num_tokens", 0) or 0) for h in trainer.state.log_history), default=0.0)
    return {"variant": name, "batch_size": bs, "steps": len(clock.times), "wall_s": round(wall, 2),
            "steps_per_s": round(timed / span, 3), "rows_per_s": round(timed * bs / span, 1),
            "tokens_per_s_whole_run": round(tokens / wall) if tokens else None,
            "first_steps_s": round(clock.times[warm - 1] - t0, 2),
            "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if torch.cuda.is_available() else None,
            "attn_implementation": getattr(trainer.model.config, "_attn_implementation", None)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/family-train.jsonl.gz")
    ap.add_argument("--preset", default="gpu")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--variants", default="base,log50,workers,compile,bs128,bs256")
    ap.add_argument("--work", default="/tmp/sft_throughput")
    ap.add_argument("--out", default="bench/results/sft_throughput.json")
    args = ap.parse_args()

    import torch

    from kernelzero.models.scratch import build_from_corpus, is_complete
    from kernelzero.train.cold_start import corpus
    from kernelzero.train.sft import load_rows

    work = Path(args.work)
    n = args.steps * max([args.batch_size] + [int(v[2:]) for v in args.variants.split(",") if v.startswith("bs")]) + 200
    rows = load_rows(args.data)[:n]
    init = work / f"init-{args.preset}"
    if not is_complete(init):
        build_from_corpus(init, corpus(rows[:4000]), args.preset, seed=0)
    results = []
    for name in args.variants.split(","):
        try:
            r = run_variant(name, str(init), rows, args.steps, args.batch_size, work)
        except Exception as e:  # one variant failing (e.g. compile) must not lose the others
            r = {"variant": name, "error": f"{type(e).__name__}: {e}"[:500]}
        results.append(r)
        print(json.dumps(r), flush=True)
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    out = {"device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
           "torch": torch.__version__, "preset": args.preset, "rows": len(rows), "variants": results}
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(out, indent=1) + "\n")


if __name__ == "__main__":
    main()
