"""Does the evaluator's fp32 tolerance accept the exact answer? A probe of its comparison on
family modules whose output comes from a long dot product.

    python bench/tolerance_probe.py --n 100 --seed 0 --kinds matmul --out bench/results/tolerance_probe.json

For each composed module (GPU sizes, as `bench/teacher_check.py --target gpu` composes them) and
each input distribution the evaluator's trials draw (the task's own, and the hardening trials'
normal, scaled and heavy-tailed, drawn by the worker's own code), it computes the reference in
float32 on this CPU, as a reference worker does, and in float64, rounded to float32: the best
answer a float32 kernel can give. It then asks the evaluator's comparison (`audit_checks.
would_pass`: the same code, RMS-scaled atol, norm check) whether that exact answer passes for the
float32 reference under the `strict` and `paper` tolerances. An exact answer that fails is a
false verdict waiting for any honest kernel whose sums run in another order than the reference's
(the teacher's, a Coder's): the tolerance sits below the reference's own rounding error.
Writes one record per module and distribution, and prints the modules whose exact answer fails.

It also measures the fix docs/threats.md sketches (a float64 second opinion), on the same trials:
each matmul in the module is rerun as other kernels would run it (`splitk`: float32 sums in
another order, K in 4 parts, as an honest split-K kernel; `fp16`, `bf16`, `tf32`: operands
rounded to those formats, float32 accumulation, as the weakened-maths fixtures), and each such
answer is judged by the strict rule now (against the float32 reference) and by the second-opinion
rule `|c - r64| <= atol' + rtol |r64| + k max|r32 - r64|` (atol' scaled by r64's RMS as now; the
norm check likewise widened by k ||r32 - r64||) for k in --ks. A rule worth having passes
every `exact` and `splitk` module and fails every `fp16`, `bf16` and `tf32` one.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
from tqdm import tqdm

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from kernelzero.eval.audit_checks import would_pass  # noqa: E402
from kernelzero.eval.config import TOLERANCES  # noqa: E402
from kernelzero.eval.schedule import HARDENING_DISTS  # noqa: E402
from kernelzero.eval.worker.worker import Worker  # noqa: E402
from kernelzero.family import FamilyConfig, generate  # noqa: E402


def _inputs(ns: dict, dist: str, seed: int) -> list:
    """The task's inputs, or a hardening trial's redraw of each float input (worker.py's code)."""
    torch.manual_seed(seed)
    inputs = list(ns["get_inputs"]())
    if dist == "task":
        return inputs
    worker = SimpleNamespace(torch=torch, device="cpu")
    return [Worker._redistribute(worker, x.shape, x.dtype, dist)
            if isinstance(x, torch.Tensor) and x.is_floating_point() else x for x in inputs]


MATMULS = {torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, torch.mm, torch.Tensor.mm,
           torch.bmm, torch.addmm, torch.Tensor.addmm, torch.nn.functional.linear}
VARIANTS = ("splitk", "fp16", "bf16", "tf32")


def _rounded(x: torch.Tensor, fmt: str) -> torch.Tensor:
    """x rounded to fp16, bf16 or TF32 (10 mantissa bits, to nearest) and back to float32."""
    if fmt == "tf32":
        bits = x.contiguous().view(torch.int32)
        return ((bits + 0x1000) & ~0x1FFF).view(torch.float32)
    return x.to(torch.float16 if fmt == "fp16" else torch.bfloat16).float()


class MatmulAs(torch.overrides.TorchFunctionMode):
    """Every matmul of a forward rerun as another kernel would compute it (see VARIANTS)."""

    def __init__(self, variant: str):
        super().__init__()
        self.variant = variant

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func not in MATMULS:
            return func(*args, **kwargs)
        if func is torch.nn.functional.linear:
            x, w = args[0], args[1]
            bias = args[2] if len(args) > 2 else kwargs.get("bias")
            y = self._matmul(x, w.t())
            return y if bias is None else y + bias
        if func in (torch.addmm, torch.Tensor.addmm):  # beta * bias + alpha * (a @ b)
            bias, a, b = args[:3]
            y = self._matmul(a, b) * kwargs.get("alpha", 1)
            return y + bias * kwargs.get("beta", 1)
        return self._matmul(args[0], args[1])

    def _matmul(self, a, b):
        if self.variant != "splitk":
            return torch.matmul(_rounded(a, self.variant), _rounded(b, self.variant))
        k = a.shape[-1]
        step = -(-k // 4)
        out = None
        for i in range(0, k, step):  # four float32 partial products, summed in order
            part = torch.matmul(a[..., i:i + step], b[..., i:i + step, :])
            out = part if out is None else out + part
        return out


def second_opinion(cand, r32, r64, k: float, atol: float, rtol: float) -> bool:
    """The widened rule: c against the float64 answer, the tolerance plus k times the float32
    reference's own largest (and norm) distance to it."""
    c, r, noise = cand.double(), r64, (r32.double() - r64)
    if not bool(torch.isfinite(c).all()):
        return False
    scale = max(1.0, float(r.pow(2).mean().sqrt()))
    err = (c - r).abs()
    if bool((err > atol * scale + rtol * r.abs() + k * noise.abs().max()).any()):
        return False
    rn = float(r.norm())
    return rn == 0 or float(err.norm()) <= rtol * rn + k * float(noise.norm())


def probe(source: str, seed: int, ks=()) -> list[dict]:
    ns: dict = {}
    exec(compile(source, "<module>", "exec"), ns)
    rows = []
    for dist in ("task",) + HARDENING_DISTS:
        torch.manual_seed(seed)
        model = ns["Model"](*ns["get_init_inputs"]())
        inputs = _inputs(ns, dist, seed + 1)
        with torch.no_grad():
            ref = model(*inputs)
            answers = {}
            for variant in VARIANTS if ks else ():
                with MatmulAs(variant):
                    answers[variant] = model(*inputs)
            ref64 = model.double()(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                                     else x for x in inputs])
        exact = ref64.float()
        err = (exact - ref).abs()
        strict = TOLERANCES["strict"]["float32"]
        row = {"dist": dist, "max_abs_diff": float(err.max()), "ref_rms": float(ref.pow(2).mean().sqrt()),
               **{f"exact_passes_{name}": would_pass(exact, ref, *TOLERANCES[name]["float32"])
                  for name in ("strict", "paper")}}
        if ks:
            answers["exact"] = exact
            row["passes"] = {v: {"strict": would_pass(c, ref, *strict),
                                 **{f"k{k:g}": second_opinion(c, ref, ref64, k, *strict) for k in ks}}
                             for v, c in answers.items()}
        rows.append(row)
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=100, help="modules to compose (default 100)")
    ap.add_argument("--seed", type=int, default=0, help="the family generator's seed")
    ap.add_argument("--kinds", default="matmul", help="family kinds to keep (default matmul)")
    ap.add_argument("--compose-kinds", default="elementwise,rowwise,matmul",
                    help="kinds composed (teacher_check's default: the same stream of modules)")
    ap.add_argument("--out", default="runs/tolerance_probe.json")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--module", default=None, help="probe this module file instead of the family's, "
                    "under --seeds input seeds (e.g. bench/tasks/tanh_matmul_k4096.py)")
    ap.add_argument("--seeds", type=int, default=12, help="with --module: input seeds (default 12)")
    ap.add_argument("--ks", default="", help="second-opinion allowances to try, e.g. 1,2,4 (default: none)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)

    cfg = FamilyConfig(kinds=tuple(args.compose_kinds.split(",")), min_ops=1, max_ops=3, target="gpu",
                       p_kb_docstrings=0.3)
    keep = set(args.kinds.split(","))
    ks = [float(k) for k in args.ks.split(",") if k]
    if args.module:  # one module, each "index" an input seed
        source = Path(args.module).read_text()
        one = SimpleNamespace(source=source, name=Path(args.module).stem, meta={"ops": []})
        modules = [(s, one) for s in range(args.seeds)]
    else:
        modules = [(i, m) for i, m in enumerate(generate(cfg, args.n, seed=args.seed)) if m.meta["kind"] in keep]
    t0 = time.perf_counter()
    records = []
    for i, m in tqdm(modules, desc="modules", unit="module"):
        for row in probe(m.source, seed=i, ks=ks):
            records.append({"index": i, "name": m.name, "ops": m.meta["ops"], **row})
    failing = sorted({(r["index"], r["name"]) for r in records if not r["exact_passes_strict"]})
    summary = {
        "command": "python bench/tolerance_probe.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "torch": torch.__version__, "seconds": round(time.perf_counter() - t0, 1),
        "modules": len(modules), "trials": len(records),
        "exact_fails_strict": {"modules": len(failing), "trials": sum(not r["exact_passes_strict"] for r in records),
                               "by_dist": {d: sum(not r["exact_passes_strict"] for r in records if r["dist"] == d)
                                           for d in ("task",) + HARDENING_DISTS}},
        "exact_fails_paper": sum(not r["exact_passes_paper"] for r in records),
        "failing_modules": [f"{i}_{name}" for i, name in failing],
    }
    if ks:  # per answer and rule: the modules it passes (every trial), of all
        summary["modules_passing"] = {
            v: {rule: sum(all(r["passes"][v][rule] for r in records if r["index"] == i) for i, _ in modules)
                for rule in ["strict"] + [f"k{k:g}" for k in ks]}
            for v in ("exact",) + VARIANTS}
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"summary": summary, "records": records}, indent=1) + "\n")
    print(json.dumps(summary, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
