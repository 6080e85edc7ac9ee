"""The `kernelzero` command: parse arguments, hand off to one module per sub-command, render.

Each sub-command lives in `kernelzero/commands/<name>_cmd.py` with `register(subparsers)` (adds its
parser, keeps imports light) and a `run(args) -> int`. Exit codes: 0 when the command did its job
(a verdict of any status counts), 2 for usage errors, 1 when KernelZero itself broke, 130 on
Ctrl-C. An error is one line on stderr saying what is wrong and what to do; with `--json` it is
one JSON object on stdout instead, `{"error": ..., "kind": "usage" | "internal" | "interrupted"}`,
and nothing else is printed there. No traceback is printed unless `--debug`.

Third-party libraries are quietened here, once, before any of them is imported: no Hugging Face
progress bars, no FutureWarning / DeprecationWarning raised inside transformers, TRL and their
kin (advice to their callers, not to a KernelZero user); other warnings stay visible, and
`--debug` (or KZ_VERBOSE=1) keeps everything. `KZ_DUMP_STACKS_AFTER_S=N` prints every thread's
stack after N s (for a run that seems stuck).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import warnings

# Order is the order of `kernelzero --help`.
COMMANDS = ["eval", "tasks", "report", "serve", "generate", "export", "bench", "train", "distill",
            "sft", "catalog", "propose"]
# The commands that run untrusted code in sandbox workers (warned about when no jail is possible).
JUDGING = {"eval", "tasks", "serve", "generate", "export", "bench", "train", "distill", "propose"}

# Libraries whose deprecation notices address their callers' code, not a KernelZero user.
_QUIET_MODULES = r"(transformers|trl|accelerate|peft|datasets|huggingface_hub|tokenizers)(\.|$)"
# Optional dependencies: the extra that installs each (pyproject.toml).
_EXTRA_OF = {"triton": "triton", "trl": "train", "transformers": "train", "accelerate": "train",
             "datasets": "train", "matplotlib": "report", "peft": "lora",
             "tensorboard": "tensorboard", "fastapi": "serve", "uvicorn": "serve",
             "httpx": "serve", "ray": "ray", "vllm": "vllm"}
# Paths a user names; an error on one of them is the user's to fix (exit 2), not a crash.
_PATH_ERRORS = (FileNotFoundError, IsADirectoryError, NotADirectoryError, PermissionError,
                FileExistsError)


class UsageError(Exception):
    """A problem with what the user asked for (bad path, bad option): exit code 2."""


class _Parser(argparse.ArgumentParser):
    """argparse whose errors are a UsageError (one line, or JSON with --json), not its usage
    block and exit."""

    def error(self, message: str):
        raise UsageError(f"{self.prog}: {message}; see `{self.prog} --help`")


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="kernelzero",
        description="Verified GPU kernels from language models: judge, propose, generate, train.")
    parser.add_argument("--debug", action="store_true", help="show full tracebacks on errors")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", parser_class=_Parser)
    for name in COMMANDS:
        importlib.import_module(f"kernelzero.commands.{name}_cmd").register(sub)
    return parser


def quiet_libraries() -> None:
    """Progress bars and deprecation chatter of third-party libraries off (see the docstring).
    Environment variables, so that they hold in processes this one starts (accelerate's ranks)."""
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")  # also transformers' own bars
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    for category in (FutureWarning, DeprecationWarning):
        warnings.filterwarnings("ignore", category=category, module=_QUIET_MODULES)


def _fail(command: str | None, message: str, kind: str, as_json: bool) -> None:
    message = " ".join(str(message).split())  # one line, whatever the exception held
    if as_json:
        print(json.dumps({"error": message, "kind": kind}), flush=True)
    else:
        print(f"kernelzero {command}: {message}" if command else message, file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    debug = "--debug" in argv or os.environ.get("KZ_VERBOSE") == "1"
    if not debug:
        quiet_libraries()
    if os.environ.get("KZ_DUMP_STACKS_AFTER_S"):  # debugging a hang: every thread's stack, once
        import faulthandler
        faulthandler.dump_traceback_later(float(os.environ["KZ_DUMP_STACKS_AFTER_S"]), exit=False)
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except UsageError as e:  # its message names the (sub-)command
        _fail(None, e, "usage", "--json" in argv)
        return 2
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    as_json = bool(getattr(args, "json", False))
    try:
        if args.command in JUDGING:
            _check_sandbox()
        return int(args.func(args) or 0)
    except UsageError as e:
        _fail(args.command, e, "usage", as_json)
        return 2
    except KeyboardInterrupt:
        _fail(args.command, "interrupted; finished results are saved", "interrupted", as_json)
        return 130
    except BrokenPipeError:  # the reader went away (`kernelzero catalog list | head`)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except Exception as e:  # KernelZero itself broke: one line, unless --debug
        if args.debug:
            raise
        missing = isinstance(e, ModuleNotFoundError) and (e.name or "").split(".")[0]
        if missing in _EXTRA_OF:
            _fail(args.command, f"this needs {missing}, which is not installed: pip install "
                                f"'kernelzero[{_EXTRA_OF[missing]}]'", "usage", as_json)
            return 2
        if isinstance(e, _PATH_ERRORS) and e.filename:  # a path the user gave, or where to write
            _fail(args.command, f"{e.strerror or type(e).__name__}: {e.filename}", "usage",
                  as_json)
            return 2
        _fail(args.command, f"internal error: {type(e).__name__}: {e} (run with --debug for "
                            "the traceback)", "internal", as_json)
        return 1


def _check_sandbox() -> None:
    """Warn once, loudly, when workers cannot be jailed; a usage error when KZ_SANDBOX=bwrap
    asks for a jail this machine cannot make."""
    from kernelzero.eval.sandbox.jail import JailError, isolation_for, warn_if_unisolated
    mode = os.environ.get("KZ_SANDBOX") or "auto"
    try:
        isolation_for(mode, "cpu")
    except (JailError, ValueError) as e:
        raise UsageError(f"KZ_SANDBOX={mode}: {e}") from None
    from kernelzero.eval.sandbox.sandbox import SandboxLimits
    try:
        SandboxLimits()  # KZ_SANDBOX_OWN_UID is read here
    except ValueError as e:
        raise UsageError(str(e)) from None
    warn_if_unisolated(mode)


if __name__ == "__main__":
    sys.exit(main())
