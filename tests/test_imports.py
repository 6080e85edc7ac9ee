"""The import graph of kernelzero/: layers import downward only (docs: architecture), and no
module imports one that imports it back, counting the imports inside functions too (a lazy import
hides a cycle from Python, not from the reader). Inside the evaluator, its subpackages import
downward too (kernelzero/eval/__init__.py draws the layers).

Every `kernelzero` module an import names exists, and so does every name it imports from one,
whether the import runs at start-up, inside a function on a GPU-only path, or in a string a
worker process runs (`python -I -c BOOT`): a move that breaks one fails here, on the CPU.
"""
import ast
import re
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "kernelzero"
REPO = PACKAGE.parent
KNOWN_EVAL_CYCLES: list[set[str]] = []  # cycles tolerated while a redesign removes them: none

# The evaluator's subpackages, lowest first; the judge's own modules (kernelzero/eval/*.py) sit
# between the sandbox and the pools. Every layer may import the types at the bottom of the judge.
EVAL_LAYERS = ["transport", "device", "worker", "sandbox", "", "pools"]
EVAL_TYPES = {"kernelzero.eval.config", "kernelzero.eval.verdict"}


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


def _eval_layer(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] != ["kernelzero", "eval"]:
        return None
    return EVAL_LAYERS.index(parts[2] if len(parts) > 2 and parts[2] in EVAL_LAYERS else "")


def test_evaluator_subpackages_import_downward():
    upward = []
    for m, targets in _graph().items():
        here = _eval_layer(m)
        if here is None:
            continue
        for t in targets:
            there = _eval_layer(t)
            if there is not None and there > here and t not in EVAL_TYPES | {"kernelzero.eval"}:
                upward.append(f"{m} -> {t}")
    assert not upward, f"upward imports inside kernelzero.eval: {upward}"


# `from kernelzero.x import a, b` and `import kernelzero.x` inside strings (code a worker runs).
_IMPORT_TEXT = re.compile(r"\bfrom\s+(kernelzero[\w.]*)\s+import\s+([\w, ]+)"
                          r"|\bimport\s+(kernelzero[\w.]*)")


def _defined_names(path: Path) -> set[str]:
    """Names a module binds at its top level (also inside top-level if/try blocks), and those of
    its `__all__` (a module `__getattr__` may give them lazily)."""
    names: set[str] = set()
    todo = list(ast.parse(path.read_text()).body)
    while todo:
        node = todo.pop()
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                names.update(n.id for n in ast.walk(t) if isinstance(n, ast.Name))
            if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets) and \
                    isinstance(node.value, (ast.List, ast.Tuple)):
                names.update(e.value for e in node.value.elts if isinstance(e, ast.Constant))
        elif isinstance(node, (ast.If, ast.Try, ast.With)):
            todo += node.body + getattr(node, "orelse", []) + getattr(node, "finalbody", [])
            for h in getattr(node, "handlers", []):
                todo += h.body
    return names


def _imports_of(path: Path):
    """(line, module, names) for every kernelzero import in a file: statements anywhere in it,
    and import lines inside its string constants."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "kernelzero":
                    yield node.lineno, a.name, []
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module and \
                node.module.split(".")[0] == "kernelzero":
            yield node.lineno, node.module, [a.name for a in node.names]
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            for m in _IMPORT_TEXT.finditer(node.value):
                if m.group(1):
                    names = [n.strip() for n in m.group(2).split(",") if n.strip()]
                    yield node.lineno, m.group(1), names
                else:
                    yield node.lineno, m.group(3), []


def _unresolved(files) -> list[str]:
    mods = _modules()
    bad = []
    for path in files:
        where = path.relative_to(REPO) if path.is_relative_to(REPO) else path.name
        for line, module, names in sorted(_imports_of(path)):
            if module not in mods:
                bad.append(f"{where}:{line}: no module {module}")
                continue
            defined = None
            for name in names:
                if f"{module}.{name}" in mods or name == "*":
                    continue
                defined = _defined_names(mods[module]) if defined is None else defined
                if name not in defined:
                    bad.append(f"{where}:{line}: {module} has no {name}")
    return bad


def _python_files() -> list[Path]:
    files = [p for p in PACKAGE.rglob("*.py") if "examples" not in p.parts]
    for folder in ("tests", "bench", "scripts"):
        files += list((REPO / folder).rglob("*.py"))
    return sorted(p for p in files if p.resolve() != Path(__file__).resolve())  # not its fixtures


def test_every_kernelzero_import_resolves():
    assert _python_files()
    bad = _unresolved(_python_files())
    assert not bad, "imports that name no module or no name:\n" + "\n".join(bad)


def test_the_import_check_finds_a_broken_lazy_import(tmp_path):
    f = tmp_path / "lazy.py"
    f.write_text("def on_gpu():\n    from kernelzero.eval.no_such_module import thing\n"
                 "    from kernelzero.eval.verdict import NoSuchName, Verdict\n"
                 "BOOT = 'import sys; from kernelzero.eval.gone import main; main()'\n")
    bad = _unresolved([f])
    assert [b.split(": ", 1)[1] for b in bad] == [
        "no module kernelzero.eval.no_such_module", "kernelzero.eval.verdict has no NoSuchName",
        "no module kernelzero.eval.gone"], bad
