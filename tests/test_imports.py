"""The import graph of kernelzero/: layers import downward only (docs: architecture), and no
module imports one that imports it back, counting the imports inside functions too (a lazy import
hides a cycle from Python, not from the reader).

The evaluator still has the cycles issue 25's redesign removes; they are listed here, so a new
cycle fails this test, and so does a listed one that is gone (then strike it from the list).
"""
import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kernelzero"

KNOWN_EVAL_CYCLES = [
    {"kernelzero.eval.jail", "kernelzero.eval.worker_uids"},
    {"kernelzero.eval.forkserver", "kernelzero.eval.sandbox", "kernelzero.eval.worker"},
    {"kernelzero.eval.pools", "kernelzero.eval.ray_pool"},
]


def _modules() -> dict[str, Path]:
    mods = {}
    for p in PACKAGE.rglob("*.py"):
        if "examples" in p.parts:  # task and candidate files, not the package's code
            continue
        name = ".".join(p.relative_to(PACKAGE.parent).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = p
    return mods


def _graph() -> dict[str, set[str]]:
    """module -> the kernelzero modules it imports (anywhere in it). `from pkg import sub` is an
    edge to the submodule: the package is already initialised when its submodule runs."""
    mods = _modules()
    graph = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            if isinstance(node, ast.Import):
                targets = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                subs = [f"{node.module}.{a.name}" for a in node.names
                        if f"{node.module}.{a.name}" in mods]
                targets = subs if len(subs) == len(node.names) else [node.module, *subs]
            else:
                continue
            graph[m].update(t for t in targets if t in mods and t != m)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one node (Tarjan, iteratively)."""
    index, low, stack, on, out, counter = {}, {}, [], set(), [], [0]
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = counter[0]
        counter[0] += 1
        stack.append(root)
        on.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter[0]
                    counter[0] += 1
                    stack.append(child)
                    on.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == node:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def _packages(graph) -> dict[str, set[str]]:
    top = lambda m: ".".join(m.split(".")[:2])  # noqa: E731
    pk: dict[str, set[str]] = {}
    for m, targets in graph.items():
        pk.setdefault(top(m), set()).update(top(t) for t in targets if top(t) != top(m))
    for targets in list(pk.values()):
        for t in targets:
            pk.setdefault(t, set())
    return pk


def test_no_module_cycle_but_the_evaluators_known_ones():
    cycles = _cycles(_graph())
    new = [sorted(c) for c in cycles if c not in KNOWN_EVAL_CYCLES]
    gone = [sorted(c) for c in KNOWN_EVAL_CYCLES if c not in cycles]
    assert not new, f"import cycles: {new}"
    assert not gone, f"these cycles are gone, strike them from KNOWN_EVAL_CYCLES: {gone}"


def test_packages_import_downward_only():
    pk = _packages(_graph())
    assert _cycles(pk) == [], f"packages importing each other: {_cycles(pk)}"
    # the evaluator knows tasks and nothing of models, training, serving or the CLI
    assert pk["kernelzero.eval"] <= {"kernelzero.tasks"}, pk["kernelzero.eval"]
    for low in ("kernelzero.tasks", "kernelzero.catalog", "kernelzero.eval", "kernelzero.models",
                "kernelzero.coder", "kernelzero.propose", "kernelzero.serve"):
        assert "kernelzero.train" not in pk[low], f"{low} imports kernelzero.train"


def test_the_cycle_finder_finds_a_cycle():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [{"a", "b", "c"}]
