"""`kernelzero generate`: sample kernels for one module from a model, judge them, keep the best.

Covers: arguments, building the backend, prompt and evaluator from them, progress, the rendering
of attempts and of the chosen kernel, and writing it to a file. The loop itself is
`kernelzero.coder.attempts`.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import Counter
from pathlib import Path


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Model, prompt and judging options shared by `generate` and `bench`."""
    from kernelzero.models import SPEC_HELP

    p.add_argument("--model", default="shipped", metavar="SPEC",
                   help=f"model backend (default: %(default)s): {SPEC_HELP}")
    p.add_argument("--backend", choices=("triton", "cuda"), default="triton",
                   help="kernel language asked for (default: %(default)s)")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="where candidates run: cuda compiles, runs and times; cpu runs Triton "
                        "through the interpreter, correctness only (default: cuda when available)")
    p.add_argument("--style", choices=("kernelbench", "principles", "compact"), default=None,
                   help="prompt: KernelBench's one-shot prompt, one that also states the "
                        "optimisation principles, or the compact one of the models KernelZero "
                        "trains from zero (default: the style the model records, else kernelbench)")
    p.add_argument("--no-example", action="store_true",
                   help="leave the worked example out of the prompt (short prompts for models "
                        "with small context windows)")
    p.add_argument("--policy", choices=("strict", "kernelbench"), default="strict",
                   help="strict: the work must happen in the candidate's own kernels; "
                        "kernelbench: PyTorch ops allowed (default: %(default)s)")
    p.add_argument("--temperature", type=float, default=0.7,
                   help="sampling temperature; 0 = greedy (default: %(default)s)")
    p.add_argument("--top-p", type=float, default=0.95,
                   help="nucleus sampling mass in (0, 1] (default: %(default)s)")
    p.add_argument("--max-new-tokens", type=int, default=4096,
                   help="most tokens per completion (default: %(default)s)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (default: %(default)s)")
    p.add_argument("--workers", type=int, default=None,
                   help="candidates judged at once (default: the evaluator's)")
    p.add_argument("--json", action="store_true", help="print one JSON document on stdout")


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "generate", help="sample kernels for one module from a model and keep the fastest "
                         "correct one",
        description="Sample k candidate kernels for a PyTorch module (KernelBench format) from a "
                    "model, judge every one, optionally feed compile errors, mismatches and "
                    "timings back for more turns, and write the fastest correct kernel to a file.")
    p.add_argument("module", help="reference module file (class Model, get_inputs, "
                                  "get_init_inputs)")
    add_model_args(p)
    p.add_argument("-k", type=int, default=8, help="samples (default: %(default)s)")
    p.add_argument("--turns", type=int, default=1,
                   help="attempts per sample: turns after the first repair failed attempts "
                        "(and, on a GPU, speed up correct ones) (default: %(default)s)")
    p.add_argument("--out", default=None,
                   help="where the best kernel goes, a file or a directory (default: "
                        "MODULE_STEM_new.py here)")
    from kernelzero.commands.export_cmd import add_export_args
    add_export_args(p, name_flag="--export", required=False)
    p.set_defaults(func=run)


def build_common(args):
    """(backend, EvalConfig, PromptConfig, SamplingConfig) from the shared options.

    Raises UsageError for bad values, an unknown spec, or a backend that cannot be built."""
    from kernelzero.cli import UsageError
    from kernelzero.coder.prompts import PromptConfig, detect_gpu_facts
    from kernelzero.commands.checks import resolve_device
    from kernelzero.eval import EvalConfig
    from kernelzero.models import BackendError, BackendSpecError, SamplingConfig, load_backend

    if args.workers is not None and args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    device = resolve_device(args.device)
    try:
        sampling = SamplingConfig(temperature=args.temperature, top_p=args.top_p,
                                  max_new_tokens=args.max_new_tokens, seed=args.seed)
        eval_kw = dict(device=device, policy=args.policy,
                       compile_baseline=getattr(args, "compile_baseline", False))
        if args.workers is not None:
            eval_kw["max_workers"] = args.workers
        eval_cfg = EvalConfig(**eval_kw)
    except ValueError as e:
        raise UsageError(str(e)) from None
    gpu = detect_gpu_facts() if device == "cuda" else None
    from kernelzero.models import prompt_style_of

    style = args.style or prompt_style_of(args.model) or "kernelbench"
    prompt_cfg = PromptConfig(backend=args.backend, style=style, gpu=gpu,
                              example=not args.no_example)
    try:
        backend = load_backend(args.model)
    except (BackendSpecError, BackendError) as e:
        raise UsageError(str(e)) from None
    return backend, eval_cfg, prompt_cfg, sampling


def _progress(total: int, desc: str, quiet: bool):
    from tqdm import tqdm
    return tqdm(total=total, desc=desc, unit="cand", file=sys.stderr, disable=quiet or None,
                leave=False)


def run(args: argparse.Namespace) -> int:
    """`kernelzero generate`: the module read, the Coder loaded, attempts judged, the best kernel
    written, in the order the user sees them."""
    from kernelzero.coder.attempts import LoopConfig, best_attempt

    module, task = _read_module(args)
    backend, eval_cfg, prompt_cfg, sampling = build_common(args)
    loop_cfg = LoopConfig(k=args.k, turns=args.turns, prompt=prompt_cfg, sampling=sampling)
    out = Path(args.out) if args.out else Path(f"{module.stem}_new.py")
    if out.is_dir():  # a folder to put it in
        out = out / f"{module.stem}_new.py"
    if not args.json:
        print(f"sampling {args.k} from {backend.spec} for {task.key} "
              f"({args.backend}, {eval_cfg.device})", file=sys.stderr)
    chains = _sample_and_judge(backend, eval_cfg, task, loop_cfg, args.json)
    if chains is None:
        return 1
    attempts = [a for c in chains for a in c.attempts]
    best = best_attempt(attempts)
    exported = _write_best(best, out, task, attempts, args)
    if args.json:
        print(json.dumps({
            "task": task.key, "task_hash": task.hash, "model": backend.spec,
            "backend": args.backend, "device": eval_cfg.device, "k": args.k,
            "turns": args.turns, "samples_returned": len(chains),
            "attempts": [a.to_dict() for a in attempts],
            "best": None if best is None else {**best.to_dict(), "verdict": best.verdict.to_dict()},
            "out": str(out) if best is not None else None, "export": exported}, default=str))
        return 0
    if not chains:
        print(f"the model returned no completions for {task.key} (a replay record without "
              f"this task?); nothing to judge")
    elif best is None:
        _print_attempts(attempts)
        _explain_none(attempts)
    return 0


def _read_module(args: argparse.Namespace):
    """The reference module as a Task, with every argument a usage error can come from checked
    before any model is loaded; returns (its path, the task)."""
    from kernelzero.cli import UsageError
    from kernelzero.commands.checks import require_file
    from kernelzero.tasks import Task
    from kernelzero.tasks.task import static_check_task

    module = require_file(args.module, "module")
    task = Task.from_file(module)
    problem = static_check_task(task.source)
    if problem:
        raise UsageError(f"{module} is not a reference module: {problem}")
    if args.k < 1 or args.turns < 1:
        raise UsageError("-k and --turns must be at least 1")
    if args.export_name:  # a bad name or folder found now, not after the sampling
        from kernelzero.export import ExportError, check_target
        try:
            check_target(args.export_name, args.export_dir)
        except ExportError as e:
            raise UsageError(str(e)) from None
    return module, task


def _sample_and_judge(backend, eval_cfg, task, loop_cfg, quiet: bool):
    """The Coder's attempt chains, judged, with a progress bar per turn; None (and the reason
    printed) when the model backend fails."""
    from kernelzero.coder.attempts import run_loop
    from kernelzero.eval import Evaluator
    from kernelzero.models.base import BackendError

    bars: dict[int, object] = {}

    def on_turn(turn: int, n: int) -> None:
        bars[turn] = _progress(n, f"judging turn {turn}", quiet)

    def on_verdict(attempt) -> None:
        bars[attempt.turn].update(1)

    try:
        with Evaluator(eval_cfg) as ev:
            chains = run_loop(backend, ev, task, loop_cfg, on_verdict=on_verdict,
                              on_turn=on_turn)
    except BackendError as e:
        print(f"kernelzero generate: the model backend failed: {e}", file=sys.stderr)
        return None
    for bar in bars.values():
        bar.close()
    return chains


def _write_best(best, out: Path, task, attempts: list, args: argparse.Namespace) -> dict | None:
    """The best attempt's kernel written to `out` (and printed, and exported with
    --export-name); returns what the export wrote, or None."""
    if best is None:
        if args.export_name and not args.json:
            print(f"nothing to export as {args.export_name}: no correct kernel", file=sys.stderr)
        return None
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(best.code, encoding="utf-8")
    if not args.json:
        _print_attempts(attempts)
        _print_best(best, out)
    if not args.export_name:
        return None
    from kernelzero.commands.export_cmd import export_kernel
    from kernelzero.tasks import Candidate
    cand = Candidate(source=best.code, name=out.stem, path=out)
    return export_kernel(cand, task, [best.verdict], args)


def _print_best(best, out: Path) -> None:
    v = best.verdict
    timing = (f", {v.runtime_ms.median_ms:.4g} ms, {v.speedup:.3g}x over eager"
              if v.runtime_ms is not None and v.speedup is not None else
              " (not timed on this device)")
    print(f"\nbest: sample {best.sample}, turn {best.turn}: correct{timing}")
    print(f"verdict: {v.reason}")
    print(f"kernel written to {out}")


def _print_attempts(attempts) -> None:
    print(f"{'sample':>6} {'turn':>4}  {'status':<14} {'speedup':>8}  reason")
    for a in sorted(attempts, key=lambda a: (a.sample, a.turn)):
        v = a.verdict
        speed = f"{v.speedup:.3g}x" if v.speedup is not None else "-"
        reason = v.reason.replace("\n", " ")
        print(f"{a.sample:>6} {a.turn:>4}  {v.status:<14} {speed:>8}  "
              f"{reason[:90] + ('...' if len(reason) > 90 else '')}")


def _explain_none(attempts) -> None:
    counts = Counter(a.verdict.status for a in attempts)
    summary = ", ".join(f"{n} {s}" for s, n in counts.most_common())
    turns = max(a.turn for a in attempts)
    print(f"\nno correct kernel: {len(attempts)} attempts over {turns} turn(s) ({summary}); "
          f"nothing was written.")
    hints = {
        "format_error": "the model's answers held no code defining `class ModelNew`: check the "
                        "model follows instructions (or use a chat/instruct model)",
        "compile_error": "the code did not compile: more repair turns (--turns) feed the errors "
                         "back",
        "incorrect": "the kernels ran but computed something else: more samples (-k) or turns",
        "rejected": "the kernels were refused by policy (a CUDA kernel on a CPU machine, or "
                    "PyTorch doing the work under --policy strict)",
        "invalid_task": "the reference module itself failed: run `kernelzero eval` on it",
    }
    for status, _ in counts.most_common():
        if status in hints:
            print(f"  - {status}: {hints[status]}")
