"""The three kinds of family module, each written into a `ModuleWriter` (writer.py).

`elementwise`: a chain of ops, with constants, a second input, broadcast parameters, residuals.
`rowwise`: a reduction, softmax or norm over a row (or, for a reduction of a 3-D input, its
middle dim), with ops before and after. `matmul`: a linear layer or a matmul by a weight the
module owns, or the product of two forward inputs, then an epilogue.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

from kernelzero.family.ops import ELEMENTWISE, MATMUL, ROWWISE, FamilyOp

if TYPE_CHECKING:
    from kernelzero.family.writer import ModuleWriter

EPS_TEXTS = ("1e-5", "1e-6", "1e-05", "1e-8", "0.001", "1e-4")


def elementwise(w: ModuleWriter) -> None:
    count = w.rng.randint(w.cfg.min_ops, w.cfg.max_ops)
    kinds = {"unary", "const", "input", "param"} | ({"residual"} if count > 1 else set())
    ops = w.pick_ops(count, ELEMENTWISE, kinds)
    while ops[0].kind == "residual":
        ops[0] = w.pick_ops(1, ELEMENTWISE, {"unary", "const"})[0]
    residual = any(op.kind == "residual" for op in ops)
    if residual:  # keep the input reachable: an alias, or a working variable other than it
        if w.var == w.x or w.rng.random() < 0.3:
            w.residual = w.fresh(w.rng.choice(("identity", "residual", "shortcut")))
            w.lines.append(f"{w.residual} = {w.x}")
        else:
            w.residual = w.x
    for i, op in enumerate(ops):
        w.elementwise_op(op)
        if i == 0 and residual and w.residual == w.x and w.rng.random() < 0.5:
            w.residual = w.fresh(w.rng.choice(("skip_val", "first", "h0")))
            w.lines.append(f"{w.residual} = {w.cur}")
            w.cur, w.cur_is_name = w.residual, True


def rowwise(w: ModuleWriter) -> None:
    count = w.rng.randint(w.cfg.min_ops, w.cfg.max_ops)
    main = w.rng.choice(ROWWISE)
    before = w.rng.randint(0, count - 1)
    for op in w.pick_ops(before, ELEMENTWISE, {"unary", "const", "input", "param"}):
        w.elementwise_op(op)
    s = w.shapes
    if main.kind == "norm":
        norm(w, main)
    else:
        last = w.rng.random() < 0.7 or s.rank != 2
        d = (w.rng.choice(("-1", "-1", str(s.rank - 1)))) if last else "1"
        keep = main.kind == "reduce" and w.rng.random() < 0.5
        kd = w.rng.choice((", keepdim=True", ", True")) if keep else ""
        if main.kind == "reduce" and not keep and w.rng.random() < 0.3:
            kd = ", keepdim=False"
        if w.axes is not None:
            d = reduced_dim(w, main, d)
        held = d.startswith("self.")  # a layer built in __init__ cannot read self.dim there
        w.phrase(main, {"d": d, "kd": kd}, allowed=lambda p: (kd != ", True" or "dim={d}" not in p)
                    and not (held and p.startswith("layer:")))
    kinds = {"unary", "const"} | (set() if main.kind == "reduce" else {"param"})
    for op in w.pick_ops(count - 1 - before, ELEMENTWISE, kinds):
        w.elementwise_op(op)


def reduced_dim(w: ModuleWriter, op: FamilyOp, d: str) -> str:
    """The dim text of a reduction or softmax: perhaps the middle dim of a 3-D input (for a
    reduction), perhaps held by the module (`self.dim`, a constructor argument)."""
    a = w.axes
    if op.kind == "reduce" and w.shapes.rank == 3 and a.random() < w.cfg.p_middle_dim:
        d = "1"
    if a.random() >= w.cfg.p_dim_arg:
        return d
    name = w.fresh(a.choice(("dim", "dim", "reduce_dim", "axis")))
    value = d
    if a.random() < 0.5:
        value = w.fresh(a.choice(("REDUCE_DIM", "DIM", "AXIS")))
        w.globals.append(f"{value} = {d}")
    w.init_params.append((name, value, "int"))
    w.init_lines.append(f"self.{name} = {name}")
    return f"self.{name}"


def norm(w: ModuleWriter, op: FamilyOp) -> None:
    """layer_norm / rms_norm over the last dim: an nn layer, the functional form, or by hand."""
    s, r = w.shapes, w.rng
    eps_text = r.choice(EPS_TEXTS)
    form = r.choice(op.phrasings)
    cls = "LayerNorm" if op.name == "layer_norm" else "RMSNorm"
    f = w.size("features", s.features)
    if form.startswith("layer:"):
        eps = "" if r.random() < 0.3 else f", eps={eps_text}"
        attr = w.fresh(r.choice(("norm", "ln" if cls == "LayerNorm" else "rms")))
        w.init_lines.append(f"self.{attr} = nn.{cls}({f}{eps})")
        w.apply(f"self.{attr}({w.cur})")
        w.steps.append((op.name, f"layer:nn.{cls}"))
        if eps:
            w.constants.append(eps_text)
            w.placements.append("layer")
        return
    w.constants.append(eps_text)
    w.placements.append("inline")
    wt = w.fresh("weight")
    w.init_lines.append(f"self.{wt} = nn.Parameter(torch.{r.choice(('ones', 'randn'))}({f}))")
    b = None
    if op.name == "layer_norm":
        b = w.fresh("bias")
        w.init_lines.append(f"self.{b} = nn.Parameter(torch.{r.choice(('zeros', 'randn'))}({f}))")
    eps = eps_text
    if r.random() < 0.5:
        w.placements[-1] = "arg"
        w.init_params.append(("eps", eps_text, "float"))
        w.init_lines.append("self.eps = eps")
        eps = "self.eps"
    if form.startswith("f"):
        shapes = [f"self.{wt}.shape"] + ([f"{w.cur}.shape[-1:]"] if w.cur_is_name else [])
        if not f.isidentifier() or f not in {n for n, _, _ in w.init_params}:
            shapes.append(f"({f},)")
        elif r.random() < 0.3:
            w.init_lines.append(f"self.normalized_shape = ({f},)")
            shapes = ["self.normalized_shape"]
        shape = r.choice(shapes)
        args = f"self.{wt}, self.{b}" if b else f"self.{wt}"
        fn = "F.layer_norm" if b else "F.rms_norm"
        w.apply(f"{fn}({w.cur}, {shape}, {args}, eps={eps})")
        w.steps.append((op.name, fn))
        return
    v = w.flush()
    if op.name == "rms_norm":
        ms = r.choice((f"{v}.pow(2).mean(-1, keepdim=True)", f"torch.mean({v} ** 2, dim=-1, keepdim=True)"))
        w.apply(f"{v} * torch.rsqrt({ms} + {eps}) * self.{wt}")
    else:
        mean, var = w.fresh("mu"), w.fresh("sigma2")
        w.lines.append(f"{mean} = {v}.mean(dim=-1, keepdim=True)")
        w.lines.append(r.choice((f"{var} = (({v} - {mean}) ** 2).mean(dim=-1, keepdim=True)",
                                    f"{var} = {v}.var(dim=-1, keepdim=True, unbiased=False)")))
        w.apply(f"({v} - {mean}) / torch.sqrt({var} + {eps}) * self.{wt} + self.{b}")
    w.steps.append((op.name, "hand-written"))


def matmul(w: ModuleWriter) -> None:
    s, r = w.shapes, w.rng
    count = r.randint(w.cfg.min_ops, w.cfg.max_ops)
    op = r.choice(MATMUL)
    if w.operands is not None and w.operands.random() < w.cfg.p_matmul_inputs:
        matmul_of_inputs(w, count)
        return
    form = r.choice([p for p in op.phrasings if s.rank == 2 or p not in ("addmm", "mm")])
    bias = op.name == "linear"
    v = w.cur
    k, n = w.size("in_features", s.k), w.size("out_features", s.n)
    if form == "layer:nn.Linear":
        attr = w.fresh(r.choice(("fc", "linear", "proj", "dense")))
        w.init_lines.append(f"self.{attr} = nn.Linear({k}, {n}{'' if bias else ', bias=False'})")
        w.apply(f"self.{attr}({v})")
    else:
        wt = w.fresh("weight")
        transposed = form in ("F.linear", "matmul_t")
        scale = r.choice((" * 0.02", " * 0.05", f" / math.sqrt({k})", ""))
        w.init_lines.append(f"self.{wt} = nn.Parameter(torch.randn({f'{n}, {k}' if transposed else f'{k}, {n}'}){scale})")
        b = w.fresh("bias") if bias else None
        if b:
            w.init_lines.append(f"self.{b} = nn.Parameter(torch.randn({n}) * 0.1)")
        if form == "F.linear":
            expr = f"F.linear({v}, self.{wt}, self.{b})" if b else f"F.linear({v}, self.{wt})"
        elif form in ("addmm", "mm"):
            expr = f"torch.addmm(self.{b}, {v}, self.{wt})" if b else f"torch.mm({v}, self.{wt})"
        else:
            t = r.choice((".t()", ".T")) if transposed else ""
            mm = r.choice((f"{v} @ self.{wt}{t}", f"torch.matmul({v}, self.{wt}{t})"))
            expr = f"{mm} + self.{b}" if b else mm
        w.apply(expr)
    w.steps.append((op.name, form))
    matmul_epilogue(w, count)


def matmul_of_inputs(w: ModuleWriter, count: int) -> None:
    """The product of two forward inputs, A (..., K) and B (K, N) or B (N, K) used transposed,
    then the epilogue: KernelBench's Level 1 matmuls, which own no weight."""
    s, o = w.shapes, w.operands
    if w.lines == [] and w.cur == w.x and o.random() < 0.6:  # KernelBench says A, B
        w.taken.discard(w.x)
        if w.var == w.x:
            w.var = "A"
        w.x = w.cur = w.fresh("A")
    b = w.fresh("B" if w.x == "A" else o.choice(("B", "w", "other", "y", "mat")))
    transposed = o.random() < 0.3
    forms = ["matmul", "@"] + (["mm"] if s.rank == 2 else [])
    form = o.choice(forms)
    right = f"{b}{o.choice(('.T', '.t()'))}" if transposed else b
    v = w.cur
    expr = {"matmul": f"torch.matmul({v}, {right})", "@": f"{v} @ {right}",
            "mm": f"torch.mm({v}, {right})"}[form]
    w.apply(expr)
    w.second_input = b
    w.second_expr = s.operand_expr(("out_features", "in_features") if transposed
                                      else ("in_features", "out_features"), w.style["sizes"],
                                      o)
    w.steps.append(("matmul", f"inputs:{form}{'_t' if transposed else ''}"))
    matmul_epilogue(w, count)


def matmul_epilogue(w: ModuleWriter, count: int) -> None:
    """The elementwise ops after a matmul; a parameter they add is per output feature (n)."""
    w.param_role, w.shapes.features = "out_features", w.shapes.n
    for ep in w.pick_ops(count - 1, ELEMENTWISE, {"unary", "const", "param"}):
        w.elementwise_op(ep)
