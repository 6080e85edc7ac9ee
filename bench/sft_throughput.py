"""Where does an SFT step's time go? The same random model, rows and batch trained a few dozen
steps under each variant of the trainer's settings; steps/s and tokens/s after a warm-up.

    python bench/sft_throughput.py --preset gpu --steps 60 --variants log50,cudnn,blocking,compile --profile log50

Variants (each on top of `kernelzero.train.sft.build_sft_trainer`, as a cold start builds it):
    base      the cold start's trainer with the loss logged every step (each log waits for the device)
    log50     the loss logged every 50 steps (`SFTRunConfig.logging_steps`): the default now, whose
              steps read nothing back from the device (kernelzero/train/sync_free.py), copy their
              batches without waiting, and run attention without cuDNN (attention_backend.py)
    cudnn     log50 with SDPA's own choice of attention kernel (cuDNN's on Hopper, as before 8 Dec)
    blocking  log50 with each batch's copy to the device waiting for the queued kernels (as before
              8 Dec)
    trl       log50 with TRL's own SFTTrainer as it is: three reads from the device a step (its
              metrics), the NaN check on the loss (another), the attention mask kept (as before 7 Dec)
    mask      log50 with the attention mask kept on right-padded batches (no causal fast path)
    workers   log50, and two dataloader worker processes collating beside the GPU
    compile   log50, and each transformer layer compiled on its own (`SFTRunConfig.compile`:
              regional compilation, one layer's graph reused by the others; the loss head eager)
    whole     log50, and the whole model compiled in place (SFTRunConfig.compile before 8 Dec;
              dynamic shapes; the first steps pay the compilation)
    bsN       log50 with batches of N rows (bs128, bs256: a step then teaches on more rows)
--profile V records variant V's device kernels over 5 steps after the warm-up (torch.profiler):
the busiest kernels, the share of the wall time the device was busy, and the host's operators by
their own CPU time (where a step bound by the host spends it). --pyprofile V records variant V's
Python functions (cProfile) over every step after the warm-up (after --profile's 5 steps): the
trainer's own bookkeeping, the collator and the optimizer show there, where torch.profiler sees
only operators.
The result (one JSON object per variant) goes to --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def step_clock(warm: int, profile: bool, pyprofile: bool = False):
    """A TrainerCallback that notes the host time of every step's end, and waits for the device only
    at the end of step `warm` and of the run, so the clock itself adds no read-back. With
    `profile`, torch.profiler records the device's kernels over the 5 steps after `warm`."""
    import torch
    from transformers import TrainerCallback

    def sync():
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    class Clock(TrainerCallback):
        def __init__(self):
            self.times: list[float] = []
            self.prof = None
            self.profiled_s = 0.0
            self.py = None

        def on_step_begin(self, args, state, control, **kw):
            # after torch.profiler's 5 steps when both record the same variant
            if pyprofile and len(self.times) == warm + (5 if profile else 0) and self.py is None:
                import cProfile
                self.py = cProfile.Profile()
                self.py.enable()

        def on_step_end(self, args, state, control, **kw):
            step = len(self.times) + 1
            if step == warm or (self.prof and step == warm + 5):
                sync()
            self.times.append(time.perf_counter())
            if profile and step == warm:
                from torch.profiler import ProfilerActivity, profile as torch_profile
                self.prof = torch_profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA])
                self.prof.__enter__()
            elif self.prof and step == warm + 5:
                self.prof.__exit__(None, None, None)
                self.profiled_s = self.times[-1] - self.times[-6]

        def on_train_end(self, args, state, control, **kw):
            sync()
            if self.py is not None:
                self.py.disable()
            self.times[-1] = time.perf_counter()

    return Clock()


def kernel_table(clock, top: int = 15) -> dict:
    """The profiled steps' device time by kernel, and the share of the wall time the device was busy
    (kernels of one stream do not overlap, so their durations add up to the busy time)."""
    averages = clock.prof.key_averages()  # built once: over thousands of kernels a step it is slow
    events = [e for e in averages if e.device_type.name == "CUDA" and e.self_device_time_total > 0]
    busy_us = sum(e.self_device_time_total for e in events)
    events.sort(key=lambda e: e.self_device_time_total, reverse=True)
    # The host's side: the operators whose own CPU time (launching included) fills a step.
    host = [e for e in averages if e.device_type.name == "CPU" and e.self_cpu_time_total > 0]
    host.sort(key=lambda e: e.self_cpu_time_total, reverse=True)
    return {"wall_s": round(clock.profiled_s, 4), "device_busy_s": round(busy_us / 1e6, 4),
            "device_busy_share": round(busy_us / 1e6 / clock.profiled_s, 3) if clock.profiled_s else None,
            "kernels_per_step": sum(e.count for e in events) // 5,
            "top": [{"kernel": e.key[:90], "ms_per_step": round(e.self_device_time_total / 5e3, 3),
                     "calls_per_step": e.count // 5} for e in events[:top]],
            "host_busy_s": round(sum(e.self_cpu_time_total for e in host) / 1e6, 4),
            "host_top": [{"op": e.key[:90], "ms_per_step": round(e.self_cpu_time_total / 5e3, 3),
                          "calls_per_step": e.count // 5} for e in host[:top]]}


def python_table(py, steps: int, top: int = 25) -> dict:
    """cProfile's functions over the timed steps: by own time and by time including callees."""
    import pstats

    stats = pstats.Stats(py).stats  # {(file, line, name): (calls, prim, tottime, cumtime, callers)}

    def rows(col: int):
        ranked = sorted(stats.items(), key=lambda kv: kv[1][col], reverse=True)[:top]
        return [{"fn": f"{Path(f).name}:{line}:{name}"[:100], "ms_per_step": round(v[col] * 1e3 / steps, 3),
                 "calls_per_step": round(v[0] / steps, 1)} for (f, line, name), v in ranked]

    return {"steps": steps, "own": rows(2), "cumulative": rows(3)}


def run_variant(name: str, init: str, rows: list[dict], steps: int, batch: int, work: Path,
                profile: bool = False, pyprofile: bool = False) -> dict:
    import torch
    from trl import SFTTrainer

    from kernelzero.train.sft import SFTRunConfig, build_sft_trainer

    bs = int(name[2:]) if name.startswith("bs") else batch
    cfg = SFTRunConfig(max_steps=steps, batch_size=bs, max_length=2048, learning_rate=1e-3,
                       bf16=torch.cuda.is_available(), logging_steps=1 if name == "base" else 50,
                       compile=name == "compile")  # per layer (sft.compile_layers)
    warm = min(10, steps // 3)
    clock = step_clock(warm, profile, pyprofile)
    trainer = build_sft_trainer(init, rows, work / name, cfg, callbacks=[clock])
    if name == "whole":
        trainer.model.compile(dynamic=True)
    if name == "cudnn":
        trainer.cudnn_attention = True
    if name == "blocking":
        trainer.accelerator.dataloader_config.non_blocking = False
    if name in ("mask", "trl"):
        trainer.data_collator = trainer.data_collator.collate  # the mask kept
    if name == "trl":
        trainer.__class__ = SFTTrainer
        trainer.args.logging_nan_inf_filter = True
    if name == "workers":
        trainer.args.dataloader_num_workers = 2
    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - t0
    span = clock.times[-1] - clock.times[warm - 1]
    timed = len(clock.times) - warm
    tokens = max((float(h.get("num_tokens", 0) or 0) for h in trainer.state.log_history), default=0.0)
    out = {"variant": name, "batch_size": bs, "steps": len(clock.times), "wall_s": round(wall, 2),
           "steps_per_s": round(timed / span, 3), "rows_per_s": round(timed * bs / span, 1),
           "tokens_per_s_whole_run": round(tokens / wall) if tokens else None,
           "first_steps_s": round(clock.times[warm - 1] - t0, 2),
           "peak_gb": round(torch.cuda.max_memory_allocated() / 1e9, 2) if torch.cuda.is_available() else None,
           "attn_implementation": getattr(trainer.model.config, "_attn_implementation", None)}
    if clock.prof is not None:
        out["profile"] = kernel_table(clock)
    if clock.py is not None:
        out["python"] = python_table(clock.py, timed - (5 if clock.prof is not None else 0))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data", default="data/family-train.jsonl.gz")
    ap.add_argument("--preset", default="gpu")
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--variants", default="base,log50,workers,compile,bs128,bs256")
    ap.add_argument("--profile", default="", help="the variant whose device kernels to record")
    ap.add_argument("--pyprofile", default="", help="the variant whose Python functions to record")
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
            r = run_variant(name, str(init), rows, args.steps, args.batch_size, work,
                            profile=name == args.profile and torch.cuda.is_available(),
                            pyprofile=name == args.pyprofile)
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
