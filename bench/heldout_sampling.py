"""Held-out greedy sampling time on the CPU, finished rows dropped from the batch or kept:
the cost the main job pays three times a run (kernelzero.models.fastgen, FastGenConfig.compact).

    python bench/heldout_sampling.py --config tiny-cpu --n 144 --out heldout_sampling.json

The config's held-out in-family tasks, sampled greedily by its Coder (default: the shipped one)
in its prompt style and length cap, as `kernelzero train` does before RL; alternately with and
without compaction (`--repeat` pairs), on `--threads` CPU threads. The greedy outputs of the
two must be the same row for row; the JSON has both times of every pair and their ratio.
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", default="tiny-cpu")
    ap.add_argument("--coder", default=None, help="a Coder checkpoint directory (default: the shipped one)")
    ap.add_argument("--n", type=int, default=144, help="held-out tasks sampled")
    ap.add_argument("--repeat", type=int, default=1, help="pairs (compact, whole) to time")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="heldout_sampling.json")
    args = ap.parse_args(argv)

    import torch

    from kernelzero.models import fastgen
    from kernelzero.models.shipped import shipped_model
    from kernelzero.train.config_file import load_config
    from kernelzero.train.heldout import heldout_sets, sample_tasks
    from kernelzero.train.proposer_tools import coder_backend

    torch.set_num_threads(args.threads)
    cfg = load_config(args.config)
    tasks = heldout_sets(cfg, Path(__file__).resolve().parents[1] / "kernelzero/examples/tasks")["in_family"][:args.n]
    coder = args.coder or str(shipped_model("coder"))
    init = fastgen.FastGenerator.__init__
    mode = {}

    def with_mode(self, *a, **k):  # every sampler the backend builds gets this run's setting
        init(self, *a, **k)
        self.config.compact = mode["compact"]

    fastgen.FastGenerator.__init__ = with_mode
    times: dict[str, list[float]] = {"compact": [], "whole": []}
    outs: dict[str, list] = {}
    for _ in range(args.repeat):
        for label in ("compact", "whole"):
            mode["compact"] = label == "compact"
            backend = coder_backend(cfg, coder)
            t0 = time.perf_counter()
            outs[label] = sample_tasks(cfg, backend, tasks, 1, 0.0, cfg.seed)
            times[label].append(time.perf_counter() - t0)
            print(f"{label}: {len(tasks)} greedy kernels in {times[label][-1]:.1f} s", flush=True)
    same = sum(a == b for a, b in zip(outs["compact"], outs["whole"]))
    result = {"config": args.config, "coder": coder, "tasks": len(tasks), "threads": args.threads,
              "seconds": times, "whole_over_compact": [w / c for w, c in zip(times["whole"], times["compact"])],
              "same_outputs": same, "machine": f"CPU, {torch.get_num_threads()} threads",
              "written": time.strftime("%Y-%m-%d")}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"whole / compact: {', '.join(f'{r:.2f}x' for r in result['whole_over_compact'])}; "
          f"same greedy outputs {same}/{len(tasks)}")
    return 0 if same == len(tasks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
