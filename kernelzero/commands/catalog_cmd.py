"""`kernelzero catalog list|show API|mine DIR --out FILE|sample --n N --apis K`: the operator catalog.

list:   every operator API, one per line: name, call as written in source, family, accepted
        input ranks, parameter names (and whether it holds weights).
show:   one API's spec: ranks, dtypes, shape rule, parameter ranges, weights, aliases.
mine:   count API co-occurrence over every `forward` in the *.py files under DIR; save as JSON.
sample: draw N API sets of K operators from a co-occurrence distribution (default: the shipped one,
        which is hand-weighted by fusion family, not mined; see kernelzero/catalog/default_dist.py).
"""
from __future__ import annotations

import argparse
import json


def register(sub) -> None:
    p = sub.add_parser("catalog", help="list, show, mine or sample operator APIs",
                       description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    csub = p.add_subparsers(dest="catalog_command", metavar="ACTION")
    q = csub.add_parser("list", help="every operator API")
    q.add_argument("--family", help="only this family (gemm, conv, pool, norm, activation, ...)")
    q.add_argument("--json", action="store_true", help="one JSON document on stdout")
    q = csub.add_parser("show", help="one operator API's spec")
    q.add_argument("api", help="catalog name (e.g. conv2d) or call (e.g. nn.Conv2d, F.gelu)")
    q.add_argument("--json", action="store_true")
    q = csub.add_parser("mine", help="mine a co-occurrence distribution from a corpus")
    q.add_argument("dir", help="directory of PyTorch module files (*.py, searched recursively)")
    q.add_argument("--out", required=True, help="JSON file to write")
    q.add_argument("--json", action="store_true")
    q = csub.add_parser("sample", help="sample API sets from a co-occurrence distribution")
    q.add_argument("--n", type=int, default=10, help="how many sets")
    q.add_argument("--apis", type=int, default=2, help="operators per set (2 or 3; more on request)")
    q.add_argument("--seed", type=int, default=0)
    q.add_argument("--dist", help="distribution JSON (default: the shipped one)")
    q.add_argument("--json", action="store_true")
    for q in csub.choices.values():
        q.set_defaults(func=run)
    p.set_defaults(func=lambda args: (p.print_help(), 2)[1])


def _find(api: str):
    from kernelzero.catalog.specs import SPECS
    if api in SPECS:
        return SPECS[api]
    for s in SPECS.values():
        if api in s.spellings():
            return s
    return None


def run(args) -> int:
    """`kernelzero catalog`: one branch per sub-command, each a few lines that print or write. One
    function on purpose: the branches share the argument checks and nothing else."""
    from kernelzero.cli import UsageError
    from kernelzero.catalog.specs import FAMILIES, SPECS, spec_dict
    cmd = args.catalog_command
    if cmd == "list":
        if args.family and args.family not in FAMILIES:
            raise UsageError(f"unknown family {args.family!r}; choose one of {', '.join(FAMILIES)}")
        specs = [s for s in SPECS.values() if not args.family or s.family == args.family]
        if args.json:
            print(json.dumps([spec_dict(s) for s in specs], indent=1))
        else:
            print(f"{'name':32s} {'call':34s} {'family':11s} {'ranks':7s} params")
            for s in specs:
                ranks = ",".join(map(str, s.ranks))
                weights = " (weights)" if s.has_weights else ""
                print(f"{s.name:32s} {s.call:34s} {s.family:11s} {ranks:7s} "
                      f"{', '.join(s.params) or '-'}{weights}")
            print(f"{len(specs)} operator APIs; `kernelzero catalog show NAME` gives one's shape "
                  "rule, dtypes and parameter ranges")
        return 0
    if cmd == "show":
        spec = _find(args.api)
        if spec is None:
            raise UsageError(f"no operator API {args.api!r}; `kernelzero catalog list` shows them")
        d = spec_dict(spec)
        if args.json:
            print(json.dumps(d, indent=1))
        else:
            for k, v in d.items():
                print(f"{k:12s} {v}")
        return 0
    if cmd == "mine":
        from kernelzero.catalog.cooccurrence import mine
        try:
            dist = mine(args.dir)
        except FileNotFoundError as e:
            raise UsageError(str(e)) from None
        path = dist.save(args.out)
        top = sorted(dist.pairs.items(), key=lambda kv: -kv[1])[:10]
        if args.json:
            print(json.dumps({"out": str(path), "n_modules": dist.n_modules,
                              "apis": len(dist.unigram), "pairs": len(dist.pairs),
                              "top_pairs": dict(top)}))
        else:
            print(f"{dist.source}; {len(dist.unigram)} APIs, {len(dist.pairs)} pairs -> {path}")
            for k, v in top:
                print(f"  {v:8.1f}  {k}")
        return 0
    if cmd == "sample":
        import random

        from kernelzero.catalog.cooccurrence import Distribution, load_default
        if args.n < 1 or args.apis < 1:
            raise UsageError("--n and --apis must be >= 1")
        try:
            dist = Distribution.load(args.dist) if args.dist else load_default()
        except (OSError, ValueError, KeyError) as e:
            raise UsageError(f"cannot read distribution {args.dist}: {e}") from None
        rng = random.Random(args.seed)
        try:
            sets = [dist.sample(rng, args.apis) for _ in range(args.n)]
        except ValueError as e:
            raise UsageError(str(e)) from None
        if args.json:
            print(json.dumps({"source": dist.source, "sets": sets}))
        else:
            for s in sets:
                print(" ".join(s))
        return 0
    raise UsageError("choose an action: list, show, mine or sample")
