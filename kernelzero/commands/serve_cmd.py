"""`kernelzero serve`: run the reward service (HTTP) in front of a local or Ray judging pool.

Covers: options, building the pool and the app, the token from an environment variable, and
running uvicorn until Ctrl-C. The routes and limits are in kernelzero/serve/app.py.
"""
from __future__ import annotations

import argparse
import ipaddress

DEFAULT_TOKEN_ENV = "KERNELZERO_SERVE_TOKEN"


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "serve", help="serve the evaluator over HTTP (reward service for trainers, verl)",
        description="Serve the evaluator over HTTP: POST /v1/judge takes a JSON array of "
                    "{reference, candidate, backend?, name?} and returns verdicts in order; "
                    "GET /health reports the queue; the schema is at /openapi.json.")
    p.add_argument("--host", default="127.0.0.1",
                   help="address to listen on (default: %(default)s; other hosts need a token)")
    p.add_argument("--port", type=int, default=8000, help="TCP port (default: %(default)s)")
    p.add_argument("--pool", choices=("local", "ray"), default="local",
                   help="judge in this machine's sandboxed workers, or on a Ray cluster "
                        "(default: %(default)s)")
    p.add_argument("--ray-address", default=None, metavar="ADDR",
                   help="Ray cluster to join with --pool ray: 'auto' (started by `ray start` "
                        "here), HOST:PORT, or unset for a private local cluster")
    p.add_argument("--device", choices=("cpu", "cuda"), default=None,
                   help="judge on the CPU (Triton interpreter, no timing) or on GPUs "
                        "(default: cpu, or the --eval-config's)")
    p.add_argument("--workers", type=int, default=4, metavar="N",
                   help="candidate workers of the local evaluator (default: %(default)s)")
    p.add_argument("--policy", choices=("strict", "kernelbench", "none"), default=None,
                   help="what a candidate may call (default: strict, or the --eval-config's)")
    p.add_argument("--tolerance", choices=("strict", "paper"), default=None,
                   help="numerical tolerance (default: strict, or the --eval-config's)")
    p.add_argument("--eval-config", default=None, metavar="CONFIG",
                   help="judge with the `eval` section of this training config (a preset name or "
                        "YAML file, as for `kernelzero train --config`), so the service judges "
                        "exactly as the run expects; --device/--workers/--policy/--tolerance "
                        "override it")
    p.add_argument("--max-queue", type=int, default=256, metavar="N",
                   help="candidates waiting or being judged before new requests get 429 "
                        "(default: %(default)s)")
    p.add_argument("--max-batch", type=int, default=128, metavar="N",
                   help="items in one request before 413 (default: %(default)s)")
    p.add_argument("--max-body-mb", type=float, default=8.0, metavar="MB",
                   help="request body size limit in MiB before 413 (default: %(default)s)")
    p.add_argument("--token-env", default=DEFAULT_TOKEN_ENV, metavar="VAR",
                   help="environment variable holding the bearer token clients must send; "
                        "unset or empty: no auth (default: %(default)s)")
    p.add_argument("--log-level", default="info",
                   choices=("critical", "error", "warning", "info", "debug"),
                   help="uvicorn log level (default: %(default)s)")
    p.set_defaults(func=run)


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _dispatch(args) -> dict:
    """Local: one candidate per call, as many at once as the evaluator has workers (so a slow
    candidate holds up only its own slot). Ray: a few threads, big batches spread by the cluster."""
    if args.pool == "local":
        return {"dispatchers": args.workers, "max_dispatch": 1}
    return {"dispatchers": 4, "max_dispatch": 64}


def _eval_fields(args) -> dict:
    """EvalConfig fields: the --eval-config training config's `eval` section (loaded as `kernelzero
    train` loads it), then the flags given on the command line."""
    fields: dict = {}
    if args.eval_config:
        from kernelzero.train.config_file import load_config
        try:
            fields = dict(load_config(args.eval_config).eval)
        except (OSError, ValueError, TypeError) as e:
            raise ValueError(f"--eval-config {args.eval_config}: {e}") from None
    fields["device"] = args.device or fields.get("device", "cpu")
    fields["max_workers"] = args.workers
    for name in ("policy", "tolerance"):
        if getattr(args, name) is not None:
            fields[name] = getattr(args, name)
    return fields


def run(args: argparse.Namespace) -> int:
    import os
    import sys

    from kernelzero.cli import UsageError
    from kernelzero.commands.checks import resolve_device

    if args.workers < 1:
        raise UsageError(f"--workers must be at least 1, got {args.workers}")
    token = os.environ.get(args.token_env) or None
    if not 0 < args.port < 65536:
        raise UsageError(f"--port must be in 1..65535, got {args.port}")
    if not _is_loopback(args.host) and not token:
        raise UsageError(f"serving on {args.host} without a token would let anyone on the network "
                         f"run code here: set {args.token_env} (or use --host 127.0.0.1)")
    try:
        import uvicorn

        from kernelzero.serve.app import ServeConfig, create_app
    except ImportError as e:
        raise UsageError(f"the reward service needs FastAPI and uvicorn: pip install "
                         f"'kernelzero[serve]' ({e})") from e
    from kernelzero.eval import EvalConfig
    from kernelzero.eval.pools import make_pool, warm_up_in_background

    try:
        serve_cfg = ServeConfig(max_queue=args.max_queue, max_batch=args.max_batch,
                                max_body_bytes=int(args.max_body_mb * 2**20),
                                token=token, **_dispatch(args))
        eval_cfg = EvalConfig(**_eval_fields(args))
    except (ValueError, TypeError) as e:
        raise UsageError(f"judging settings: {e}") from e
    if eval_cfg.device == "cuda" and args.pool == "local":  # a Ray pool's GPUs are elsewhere
        resolve_device("cuda")
    if args.pool == "local" and args.ray_address:
        raise UsageError("--ray-address needs --pool ray")
    try:
        pool = make_pool(args.pool, eval_cfg, ray_address=args.ray_address)
    except ImportError as e:
        raise UsageError(str(e)) from e
    warm_up_in_background(pool)
    print(f"kernelzero serve: {args.pool} pool on {eval_cfg.device} (policy {eval_cfg.policy}, "
          f"tolerance {eval_cfg.tolerance}), http://{args.host}:{args.port} "
          f"(auth: {'bearer token from $' + args.token_env if token else 'none'}; "
          f"schema at /openapi.json)", file=sys.stderr)
    try:
        uvicorn.run(create_app(pool, serve_cfg, pool_kind=args.pool), host=args.host,
                    port=args.port, log_level=args.log_level)
    finally:
        if hasattr(pool, "close"):
            pool.close()
    return 0
