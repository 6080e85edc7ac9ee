"""The family generator: deterministic, valid KernelBench-format modules with honest metadata,
varied phrasings and constants, sized for the target; held-out splits by combination and text."""
from __future__ import annotations

import ast
import hashlib
import re
from collections import Counter

import pytest
import torch

from kernelzero.family import FamilyConfig, combo_key, generate, make_module, split_holdout
from kernelzero.family.ops import ELEMENTWISE
from kernelzero.tasks.task import source_hash, static_check_task


@pytest.fixture(scope="module")
def modules():
    return generate(FamilyConfig(), n=400, seed=7)


def run(source: str, device: str | None = None):
    """Run a generated module (our own code, in this process) on its own inputs."""
    ns: dict = {}
    exec(compile(source, "<family>", "exec"), ns)
    torch.manual_seed(0)
    if device == "meta":
        with torch.device("meta"):
            return ns["get_inputs"](), None
    model = ns["Model"](*ns["get_init_inputs"]())
    inputs = ns["get_inputs"]()
    return inputs, model(*inputs)


def test_same_seed_same_modules_and_module_i_independent_of_n():
    a = generate(FamilyConfig(), n=12, seed=3)
    b = generate(FamilyConfig(), n=12, seed=3)
    assert [m.source for m in a] == [m.source for m in b]
    assert generate(FamilyConfig(), n=4, seed=3, start=8)[0].source == a[8].source
    assert [m.source for m in generate(FamilyConfig(), n=12, seed=4)] != [m.source for m in a]


def test_modules_are_kernelbench_format_and_metadata_matches(modules):
    for m in modules:
        assert static_check_task(m.source) is None, m.source
        meta = m.meta
        assert meta["kind"] in ("elementwise", "rowwise", "matmul")
        assert meta["chain_length"] == len(meta["ops"]) == len(meta["phrasings"])
        assert 1 <= meta["chain_length"] <= 3
        assert meta["has_constants"] == bool(meta["constants"])
        assert len(meta["constants"]) == len(meta["placements"])
        for text in meta["constants"]:  # every constant appears in the text as drawn
            assert text.lstrip("-") in m.source
        if meta["kind"] == "rowwise":
            assert any(op in meta["ops"] for op in ("sum", "mean", "amax", "amin", "logsumexp", "softmax",
                                                      "log_softmax", "l2_normalize", "center", "sub_max",
                                                      "layer_norm", "rms_norm"))
        if meta["kind"] == "matmul":
            assert meta["ops"][0] in ("linear", "matmul")


def test_modules_run_and_keep_their_shapes(modules):
    sample = modules[::8]
    for m in sample:
        inputs, y = run(m.source)
        assert isinstance(y, torch.Tensor) and y.dtype == torch.float32
        if m.meta["kind"] == "elementwise":
            assert y.shape == inputs[0].shape
        assert torch.isfinite(y).any(), m.source


def test_phrasings_constants_and_styles_vary(modules):
    phrasings = Counter()
    for m in modules:
        for op, p in zip(m.meta["ops"], m.meta["phrasings"]):
            phrasings[(op, p)] += 1
    per_op = Counter(op for op, _ in phrasings)
    assert per_op["relu"] >= 4 and per_op["mul_const"] >= 3
    rows = Counter((op, p) for m in generate(FamilyConfig(kinds=("rowwise",)), n=300, seed=1)
                   for op, p in zip(m.meta["ops"], m.meta["phrasings"]))
    per_row_op = Counter(op for op, _ in rows)
    assert per_row_op["softmax"] >= 3 and per_row_op["layer_norm"] == 3 and per_row_op["amax"] >= 3
    placements = Counter(p for m in modules for p in m.meta["placements"])
    assert {"inline", "attr", "global", "arg"} <= set(placements)
    styles = Counter((m.meta["style"]["stepwise"], m.meta["style"]["super"]) for m in modules)
    assert len(styles) == 4
    constants = [c for m in modules for c in m.meta["constants"]]
    assert len(set(constants)) > 0.6 * len(constants)  # drawn, not a handful of typical values
    for c in constants:
        digits = re.sub(r"[^0-9]", "", c.split("e")[0]).lstrip("0")
        assert 1 <= len(digits.rstrip("0") or "0") <= 4, c
    assert any(m.meta["shapes"]["input"][-1] in (1023, 1025, 257, 17) for m in modules)


def test_ops_and_lengths_are_honoured():
    cfg = FamilyConfig(kinds=("elementwise",), min_ops=4, max_ops=6, ops=("relu", "mul_const", "tanh", "exp"))
    for m in generate(cfg, n=40, seed=1):
        assert 4 <= m.meta["chain_length"] <= 6
        assert set(m.meta["ops"]) <= {"relu", "mul_const", "tanh", "exp"}
        for prev, op in zip(m.meta["ops"], m.meta["ops"][1:]):
            if op == "exp":  # exp only after a bounded op: no overflow near float32's limit
                assert prev == "tanh"
    with pytest.raises(ValueError):
        FamilyConfig(min_ops=3, max_ops=2)
    with pytest.raises(ValueError):
        FamilyConfig(ops=("cumsum",))
    for bad in ("abc", 1.5, -0.1, True):  # a probability read as text (`--family p_x=abc`) fails here
        with pytest.raises(ValueError, match="a probability"):
            FamilyConfig(p_kb_docstrings=bad)


def test_sizes_follow_the_target():
    for target, lo, hi in (("cpu", 1, 40_000), ("gpu", 2_000_000, 70_000_000)):
        for m in generate(FamilyConfig(target=target, kinds=("elementwise", "rowwise")), n=30, seed=2):
            inputs, _ = run(m.source, device="meta")
            assert lo <= inputs[0].numel() <= hi, (target, m.meta["shapes"])
    for m in generate(FamilyConfig(target="gpu", kinds=("matmul",)), n=10, seed=2):
        assert min(m.meta["shapes"]["k"], m.meta["shapes"]["n"]) >= 512


def test_holdout_split_by_combination_and_text(modules):
    modules = modules + modules[:40]  # texts seen twice must not reach the test set twice
    train, test = split_holdout(modules, test_frac=0.15, seed=0)
    train_combos = {combo_key(m.meta) for m in train}
    test_combos = {combo_key(m.meta) for m in test}
    assert test and not train_combos & test_combos
    assert all(m.meta["chain_length"] >= 2 for m in test)
    test_texts = [source_hash(m.source) for m in test]
    assert len(set(test_texts)) == len(test_texts)  # one module per text
    assert not {source_hash(m.source) for m in train} & set(test_texts)
    assert 0.1 * len(modules) <= len(test) <= 0.3 * len(modules)
    assert split_holdout(modules, 0.15, 0)[1] == test  # deterministic


def test_every_elementwise_op_is_drawn_and_parses():
    for op in ELEMENTWISE:
        cfg = FamilyConfig(kinds=("elementwise",), min_ops=2, max_ops=2, ops=(op.name, "tanh"))
        m = make_module(cfg, 0, 0)
        ast.parse(m.source)
        assert set(m.meta["ops"]) <= {op.name, "tanh"}


def _size_globals(source: str) -> set[str]:
    return set(re.findall(r"^(\w+) = \d+$", source, re.M))


def test_no_size_name_gives_the_kind_away():
    """A Coder trained where only row reductions call their last size `dim` reads `dim` as "reduce"
    and writes row sums for KernelBench's elementwise problems (`batch_size, dim`). Names are drawn
    across kinds, from a stream of their own: the computation, shapes and phrasings stay as drawn."""
    cfg = FamilyConfig(kinds=("elementwise", "rowwise"))
    named = generate(cfg, n=300, seed=5)
    by_kind = {k: Counter(n for m in named if m.meta["kind"] == k for n in _size_globals(m.source))
               for k in ("elementwise", "rowwise")}
    assert by_kind["elementwise"]["dim"] >= 15, by_kind
    assert by_kind["rowwise"]["features"] + by_kind["rowwise"]["hidden_size"] >= 5, by_kind
    plain = generate(FamilyConfig(kinds=cfg.kinds, p_common_names=0.0, p_input_locals=0.0), n=300, seed=5)
    assert sum("dim" in _size_globals(m.source) for m in plain if m.meta["kind"] == "elementwise") == 0
    assert [m.meta for m in plain] == [m.meta for m in named]
    assert sum(a.source != b.source for a, b in zip(plain, named)) > 100
    locals_ = [m for m in named if re.search(r"def get_inputs\(\):\n    \w+ = torch", m.source)]
    assert len(locals_) >= 40
    for a, b in zip(plain[::10], named[::10]):
        (xa, ya), (xb, yb) = run(a.source), run(b.source)
        assert [t.shape for t in xa] == [t.shape for t in xb] and torch.equal(ya, yb), b.source


def test_kernelbench_forms_are_drawn_from_streams_of_their_own():
    """KernelBench's Level 1 matmuls multiply two forward inputs (`torch.matmul(A, B)`, `A @ B.T`)
    and its reductions take their dim from the constructor (`self.dim`, sometimes dim 1 of a 3-D
    input). The family draws these forms from streams of their own: with them off, every module is
    the one drawn before; with them on, the modules that took another form compute what they say."""
    on = generate(FamilyConfig(kinds=("matmul", "rowwise")), n=240, seed=9)
    off = generate(FamilyConfig(kinds=("matmul", "rowwise"), p_matmul_inputs=0.0, p_middle_dim=0.0,
                                p_dim_arg=0.0), n=240, seed=9)
    two_input = [m for m in on if m.meta["phrasings"][0].startswith("inputs:")]
    held_dim = [m for m in on if re.search(r"self\.(dim|axis|reduce_dim)\b", m.source)]
    middle = [m for m in on if m.meta["kind"] == "rowwise" and re.search(r"\b1\b", m.source)
              and len(m.meta["shapes"]["input"]) == 3]
    assert len(two_input) >= 25 and len(held_dim) >= 12 and len(middle) >= 5
    assert not any(m.meta["phrasings"][0].startswith("inputs:") for m in off)
    # with the forms and the common names off, the modules drawn before the forms existed (69d7d5c)
    before = generate(FamilyConfig(kinds=("matmul", "rowwise"), p_matmul_inputs=0.0, p_middle_dim=0.0,
                                   p_dim_arg=0.0, p_common_names=0.0, p_ctor_defaults=0.0,
                                   p_kb_docstrings=0.0), n=240, seed=9)
    digest = hashlib.sha256("\n".join(m.source for m in before).encode()).hexdigest()[:16]
    assert digest == "15485f0327d6f5e3"
    changed = {id(m) for m in two_input + held_dim}
    same = [(a, b) for a, b in zip(on, off) if id(a) not in changed and "dim=1" not in a.source]
    assert len(same) >= 100 and all(a.source == b.source for a, b in same)
    for m in two_input[:12]:
        inputs, y = run(m.source)
        a, b = inputs
        n, k = m.meta["shapes"]["n"], m.meta["shapes"]["k"]
        assert a.shape[-1] == k and sorted(b.shape) == sorted((k, n)) and y.shape == (*a.shape[:-1], n)
        if m.meta["chain_length"] == 1:
            transposed = m.meta["phrasings"][0].endswith("_t")
            assert torch.allclose(y, a @ (b.T if transposed else b), atol=1e-4), m.source
    for m in held_dim[:12]:  # the module holds its dim: a constructor argument, from get_init_inputs
        ns: dict = {}
        exec(compile(m.source, "<family>", "exec"), ns)
        assert any(isinstance(v, int) and not isinstance(v, bool) for v in ns["get_init_inputs"]())
        run(m.source)


def test_kernelbench_signatures_and_docstrings_come_from_a_stream_of_their_own():
    """KernelBench gives constructor parameters defaults and passes fewer values than parameters
    (`def __init__(self, dim: int = 1)` with `get_init_inputs` returning `[]`), and writes
    Args/Returns docstrings. With these forms off every module is the one drawn before (digest of
    the generator before them); with them on, the modules still build and run, an omitted value
    takes its default, and the teacher reads them."""
    from kernelzero.teacher import compile_module

    off = generate(FamilyConfig(p_ctor_defaults=0.0, p_kb_docstrings=0.0), n=300, seed=4)
    on = generate(FamilyConfig(p_ctor_defaults=1.0, p_kb_docstrings=1.0), n=300, seed=4)
    digest = hashlib.sha256("\n".join(m.source for m in off).encode()).hexdigest()[:16]
    assert digest == "ffb3a757032f3b32"  # the generator before these forms (0566fb0)
    short = []
    for m in on:
        init = ast.parse(m.source).body
        cls = next(n for n in init if isinstance(n, ast.ClassDef))
        assert ast.get_docstring(cls).startswith("Simple model that performs"), m.source
        ctor = next(n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__")
        ns: dict = {}
        exec(compile(m.source, "<family>", "exec"), ns)
        if len(ns["get_init_inputs"]()) < len(ctor.args.args) - 1:
            short.append(m)
    assert len(short) >= 20
    # the teacher reads an omitted value as its default: its kernels for such modules are correct
    from kernelzero.eval import EvalConfig, Evaluator
    from kernelzero.tasks import Candidate, Task

    pairs = [(Task.from_source(m.source, f"short_{i}"), Candidate(compile_module(m.source).kernel_source))
             for i, m in enumerate([m for m in short if compile_module(m.source).ok][:6])]
    with Evaluator(EvalConfig(device="cpu", max_workers=2)) as ev:
        verdicts = ev.judge_many(pairs)
    assert len(pairs) == 6 and all(v.correct for v in verdicts), [v.reason for v in verdicts]
    refused = [m.name for m in on[:120] if not compile_module(m.source).ok]
    assert len(refused) <= 2, refused
