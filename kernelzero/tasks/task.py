"""Tasks and candidates as files: KernelBench layouts, names and content hashes.

A `Task` is a reference module source (`Model`, `get_inputs`, `get_init_inputs`) plus where it
came from. A `Candidate` is a `ModelNew` source. Neither is ever imported here: this module only
reads text. Running code is the evaluator's job, in a sandboxed process.

Layouts understood:
- tasks: `level{L}/{id}_{Name}.py` under a root, or any directory of `*.py` files;
- samples: `level_{L}_problem_{id}_sample_{s}_kernel.py` (KernelBench's run layout).
"""
from __future__ import annotations

import ast
import hashlib
import re
import threading
from dataclasses import dataclass, field
from pathlib import Path

TASK_FILE_RE = re.compile(r"^(?P<id>\d+)_(?P<name>.+)\.py$")
LEVEL_DIR_RE = re.compile(r"^level_?(?P<level>\d+)$")
SAMPLE_FILE_RE = re.compile(
    r"^level_(?P<level>\d+)_problem_(?P<id>\d+)_sample_(?P<sample>\d+)_kernel\.py$")


_PARSE_LOCK = threading.Lock()


def parse_python(source: str) -> ast.Module:
    """`ast.parse`, serialised: CPython 3.11.7 and older raise `SystemError: AST constructor
    recursion depth mismatch` when several threads build ASTs at once (the judge is threaded)."""
    with _PARSE_LOCK:
        return ast.parse(source)


def canonical_source(source: str) -> str:
    """The module as `ast.unparse` writes it, without docstrings and comments: one spelling of
    whitespace, quotes and numbers, so a small model reads `x*0.50  # scale` and `x * 0.5` as the
    same text. A source that does not parse is returned stripped, unchanged."""
    try:
        tree = parse_python(source)
    except (SyntaxError, ValueError):
        return source.strip() + "\n"
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                and body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            node.body = body[1:] or [ast.Pass()]
    with _PARSE_LOCK:
        return ast.unparse(tree).strip() + "\n"


def syntax_error_text(e: SyntaxError) -> str:
    """A SyntaxError as `message (line N)`; the line is left out when Python gives none (null
    bytes in the source, for one)."""
    return f"{e.msg} (line {e.lineno})" if e.lineno else str(e.msg)


def source_hash(source: str) -> str:
    """Content hash of a source file: sha256 of its text with line endings normalised."""
    text = source.replace("\r\n", "\n").strip() + "\n"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


@dataclass
class Task:
    source: str
    name: str
    level: int | None = None
    problem_id: int | None = None
    path: Path | None = None
    meta: dict = field(default_factory=dict)

    @property
    def hash(self) -> str:
        return source_hash(self.source)

    @property
    def key(self) -> str:
        """Human-readable identity: `L2/17_Conv2d_ReLU` or the file stem."""
        if self.level is not None and self.problem_id is not None:
            return f"L{self.level}/{self.problem_id}_{self.name}"
        return self.name

    @classmethod
    def from_file(cls, path: str | Path) -> "Task":
        path = Path(path)
        source = path.read_text(encoding="utf-8", errors="replace")
        level = problem_id = None
        name = path.stem
        m = TASK_FILE_RE.match(path.name)
        if m:
            problem_id, name = int(m["id"]), m["name"]
        lm = LEVEL_DIR_RE.match(path.parent.name)
        if lm:
            level = int(lm["level"])
        return cls(source=source, name=name, level=level, problem_id=problem_id, path=path)

    @classmethod
    def from_source(cls, source: str, name: str = "task") -> "Task":
        return cls(source=source, name=name)


@dataclass
class Candidate:
    source: str
    name: str = "candidate"
    backend: str = "auto"   # auto | triton | cuda
    sample_id: int | None = None
    path: Path | None = None

    @property
    def hash(self) -> str:
        return source_hash(self.source)

    def resolved_backend(self) -> str:
        return detect_backend(self.source) if self.backend == "auto" else self.backend

    @classmethod
    def from_file(cls, path: str | Path, backend: str = "auto") -> "Candidate":
        path = Path(path)
        sample = None
        m = SAMPLE_FILE_RE.match(path.name)
        if m:
            sample = int(m["sample"])
        return cls(source=path.read_text(encoding="utf-8", errors="replace"), name=path.stem,
                   backend=backend, sample_id=sample, path=path)


def detect_backend(source: str) -> str:
    """Which kernel language a candidate uses, judged from its text."""
    if re.search(r"\bload_inline\b|cpp_extension|__global__", source):
        return "cuda"
    if re.search(r"@\s*triton\.jit|\bimport triton\b|from triton\b", source):
        return "triton"
    return "none"


def load_tasks(root: str | Path, levels: list[int] | None = None) -> list[Task]:
    """Every task under `root`: a single file, a `level{L}` tree, or a flat directory."""
    root = Path(root)
    if root.is_file():
        return [Task.from_file(root)]
    if not root.is_dir():
        raise FileNotFoundError(f"no task file or directory at {root}")
    files = sorted(p for p in root.rglob("*.py") if not p.name.startswith("_"))
    tasks = [Task.from_file(p) for p in files]
    if levels:
        tasks = [t for t in tasks if t.level in levels]
    return sorted(tasks, key=lambda t: (t.level or 0, t.problem_id or 0, t.name))


def find_samples(samples_dir: str | Path) -> list[tuple[int, int, int, Path]]:
    """(level, problem_id, sample_id, path) for every KernelBench-named sample file."""
    out = []
    for p in sorted(Path(samples_dir).rglob("*.py")):
        m = SAMPLE_FILE_RE.match(p.name)
        if m:
            out.append((int(m["level"]), int(m["id"]), int(m["sample"]), p))
    return out


def static_check_task(source: str) -> str | None:
    """A reason the text cannot be a reference module, or None. Does not run anything."""
    try:
        tree = parse_python(source)
    except SyntaxError as e:
        return f"reference does not parse: {syntax_error_text(e)}"
    names = {n.name for n in tree.body if isinstance(n, (ast.ClassDef, ast.FunctionDef))}
    names |= {t.id for n in tree.body if isinstance(n, ast.Assign)
              for t in n.targets if isinstance(t, ast.Name)}
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if n not in names]
    if missing:
        return "reference lacks " + ", ".join(f"`{m}`" for m in missing)
    return None


def static_check_candidate(source: str) -> tuple[str, str] | None:
    """(status, reason) when the text cannot be a candidate, or None. Does not run anything."""
    if not source.strip():
        return "format_error", "the candidate is empty: no code was found"
    try:
        tree = parse_python(source)
    except SyntaxError as e:
        return "compile_error", f"Python syntax error: {syntax_error_text(e)}"
    if not any(isinstance(n, ast.ClassDef) and n.name == "ModelNew" for n in ast.walk(tree)):
        return "format_error", "the candidate defines no `ModelNew` class"
    return None
