"""Verified distillation rows for the Coder's cold start, on a CPU machine: N op-family training
modules, the teacher compiler's kernel for each, every kernel judged by the CPU evaluator (Triton
interpreter), the correct pairs written as TRL prompt-completion rows. Resumable: verdicts are
cached beside the data (OUT/data.verdicts.jsonl) and a re-run judges only what is missing.

    python bench/family_data.py --modules 8800 --out runs/family-data --workers 2
    gzip -c runs/family-data/data.jsonl > .data/family-train.jsonl.gz   # for bench/learning_gpu.sh
"""
import argparse
import json
import os
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is imported

from kernelzero.eval import EvalConfig, Evaluator  # noqa: E402
from kernelzero.family import FamilyConfig  # noqa: E402
from kernelzero.train.cold_start import ColdStartConfig, make_data  # noqa: E402
from kernelzero.train.config_file import parse_overrides  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modules", type=int, default=8800, help="training modules to compose")
    ap.add_argument("--out", required=True, help="folder for data.jsonl and its verdict cache")
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--trials", type=int, default=2, help="correctness trials per kernel")
    ap.add_argument("--hardening", action="store_true", help="also the hardening trials")
    ap.add_argument("--seed", type=int, default=0, help="the modules' stream (streams overlap little)")
    ap.add_argument("--time-limit", type=float, default=None, metavar="S",
                    help="stop judging after about S seconds and write what was judged")
    ap.add_argument("--family", action="append", default=[], metavar="KEY=VALUE",
                    help="a FamilyConfig field (e.g. p_kb_docstrings=0.3); repeatable")
    a = ap.parse_args()
    try:  # the same KEY=VALUE reading as `kernelzero train --set`, checked before any judging
        family = parse_overrides(a.family, "--family", "p_kb_docstrings=0.3")
        FamilyConfig(**family)
    except (ValueError, TypeError) as e:
        ap.error(str(e))
    cfg = EvalConfig(device="cpu", max_workers=a.workers, correctness_trials=a.trials,
                     hardening_trials=a.hardening)
    with Evaluator(cfg) as ev:
        counts = make_data(ColdStartConfig(modules=a.modules, seed=a.seed, family=family),
                           Path(a.out), ev,
                           time_limit_s=a.time_limit)
    print(json.dumps(counts, indent=1))


if __name__ == "__main__":
    main()
