"""The `kernelzero` command: parse arguments, hand off to one module per sub-command, render.

Each sub-command lives in `kernelzero/commands/<name>_cmd.py` with `register(subparsers)` (adds its
parser, keeps imports light) and a `run(args) -> int`. Exit codes: 0 when the command did its job
(a verdict of any status counts), 2 for usage errors, 1 when KernelZero itself broke. No traceback
is printed unless `--debug`. `KZ_DUMP_STACKS_AFTER_S=N` prints every thread's stack after N s
(for a run that seems stuck).
"""
from __future__ import annotations

import argparse
import importlib
import os
import sys

# Order is the order of `kernelzero --help`.
COMMANDS = ["eval", "tasks", "report", "serve", "generate", "bench", "train", "distill", "sft", "catalog", "propose"]
# The commands that run untrusted code in sandbox workers (warned about when no jail is possible).
JUDGING = {"eval", "tasks", "serve", "generate", "bench", "train", "distill", "propose"}


class UsageError(Exception):
    """A problem with what the user asked for (bad path, bad option): exit code 2."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="kernelzero",
        description="Verified GPU kernels from language models: judge, propose, generate, train.")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for name in COMMANDS:
        importlib.import_module(f"kernelzero.commands.{name}_cmd").register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    if os.environ.get("KZ_DUMP_STACKS_AFTER_S"):  # debugging a hang: every thread's stack, once
        import faulthandler
        faulthandler.dump_traceback_later(float(os.environ["KZ_DUMP_STACKS_AFTER_S"]), exit=False)
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    try:
        if args.command in JUDGING:
            _check_sandbox()
        return int(args.func(args) or 0)
    except UsageError as e:
        print(f"kernelzero {args.command}: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; finished results are saved", file=sys.stderr)
        return 130
    except Exception as e:  # KernelZero itself broke: one line, unless --debug
        if args.debug:
            raise
        print(f"kernelzero {args.command}: internal error: {type(e).__name__}: {e} "
              "(run with --debug for the traceback)", file=sys.stderr)
        return 1


def _check_sandbox() -> None:
    """Warn once, loudly, when workers cannot be jailed; a usage error when KZ_SANDBOX=bwrap
    asks for a jail this machine cannot make."""
    from kernelzero.eval.jail import JailError, isolation_for, warn_if_unisolated
    mode = os.environ.get("KZ_SANDBOX") or "auto"
    try:
        isolation_for(mode, "cpu")
    except (JailError, ValueError) as e:
        raise UsageError(f"KZ_SANDBOX={mode}: {e}") from None
    warn_if_unisolated(mode)


if __name__ == "__main__":
    sys.exit(main())
