"""Held-out greedy sampling time on the CPU, with one of the sampler's speed-ups on and off:
the cost the main job pays three times a run (kernelzero.models.fastgen).

    python bench/heldout_sampling.py --config tiny-cpu --n 144 --compare grouped --out heldout_sampling.json

`--compare` names the FastGenConfig switch: `compact` (finished rows dropped from the batch) or
`grouped` (`grouped_decode`: a key-value group's query heads attend as one head's positions).
The config's held-out in-family tasks, sampled greedily by its Coder (default: the shipped one)
in its prompt style and length cap, as `kernelzero train` does before RL; alternately with the
switch on and off (`--repeat` pairs), on `--threads` CPU threads. The greedy outputs of the two
must be the same row for row; the JSON has both times of every pair and their ratio.
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
    ap.add_argument("--compare", choices=("compact", "grouped"), default="compact",
                    help="the switch turned on and off (default: compact)")
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
    switch = {"compact": "compact", "grouped": "grouped_decode"}[args.compare]
    mode = {}

    def with_mode(self, *a, **k):  # every sampler the backend builds gets this run's setting
        init(self, *a, **k)
        setattr(self.config, switch, mode["on"])

    fastgen.FastGenerator.__init__ = with_mode
    times: dict[str, list[float]] = {"on": [], "off": []}
    outs: dict[str, list] = {}
    for _ in range(args.repeat):
        for label in ("on", "off"):
            mode["on"] = label == "on"
            backend = coder_backend(cfg, coder)
            t0 = time.perf_counter()
            outs[label] = sample_tasks(cfg, backend, tasks, 1, 0.0, cfg.seed)
            times[label].append(time.perf_counter() - t0)
            print(f"{switch} {label}: {len(tasks)} greedy kernels in {times[label][-1]:.1f} s", flush=True)
    same = sum(a == b for a, b in zip(outs["on"], outs["off"]))
    result = {"config": args.config, "coder": coder, "switch": switch, "tasks": len(tasks),
              "threads": args.threads, "seconds": times,
              "off_over_on": [w / c for w, c in zip(times["off"], times["on"])],
              "same_outputs": same, "machine": f"CPU, {torch.get_num_threads()} threads",
              "written": time.strftime("%Y-%m-%d")}
    Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    print(f"{switch} off / on: {', '.join(f'{r:.2f}x' for r in result['off_over_on'])}; "
          f"same greedy outputs {same}/{len(tasks)}")
    return 0 if same == len(tasks) else 1


if __name__ == "__main__":
    raise SystemExit(main())
