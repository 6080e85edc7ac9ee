"""The adversarial fixtures as data: each file's header comment, parsed.

Every file in `exploits/` and `legit/` opens with `# key: value` lines:

    # threat: 2 (stale memory)          exploits only: the threat number of issue 3
    # what: ...                         what it does (may continue on `#       ` lines)
    # expect: incorrect|rejected        verdict statuses the real evaluator may give
    # check: speedup-null-on-cpu        optional extra assertions on the verdict
    # policies: strict, kernelbench     the policies the expectation holds under
    # target: relu.py                   the task in tasks/ it attacks
    # naive: fooled [cond]              how the naive evaluator fails: `fooled` (it says correct),
                                        `fooled speedup>=N` / `fooled cand_ms<X` (and its timing
                                        is fiction), `hang` (it never answers), `gpu` (needs
                                        CUDA to show), `skip: reason`; `retries=N` allows N
                                        tries where the exploit depends on allocator state
    # marks: gpu                        optional: the real verdict needs a CUDA device

Parsing only reads text; nothing here imports or runs a fixture.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent
TASKS_DIR = ROOT / "tasks"
EXPLOITS_DIR = ROOT / "exploits"
LEGIT_DIR = ROOT / "legit"
_KEYS = "threat|what|legit|expect|check|policies|target|naive|marks"
_HEADER_RE = re.compile(rf"^#\s*({_KEYS}):\s*(.*)$")


@dataclass
class Fixture:
    path: Path
    kind: str                      # exploit | legit
    target: Path
    expect: tuple[str, ...]
    policies: tuple[str, ...]
    threat: int | None = None
    what: str = ""
    naive: str = "fooled"
    checks: tuple[str, ...] = ()
    marks: tuple[str, ...] = ()
    extra: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.path.stem

    @property
    def needs_gpu(self) -> bool:
        return "gpu" in self.marks


def parse(path: Path, kind: str) -> Fixture:
    fields: dict[str, str] = {}
    last = None
    for line in path.read_text().splitlines():
        if not line.startswith("#"):
            break
        m = _HEADER_RE.match(line)
        if m:
            last = m[1]
            fields[last] = m[2].strip()
        elif last is not None:
            fields[last] += " " + line.lstrip("# ").strip()
    missing = [k for k in ("expect", "policies", "target") if k not in fields]
    if kind == "exploit" and "threat" not in fields:
        missing.append("threat")
    if missing:
        raise ValueError(f"{path}: header lacks {missing}")
    target = TASKS_DIR / fields["target"]
    if not target.is_file():
        raise ValueError(f"{path}: target {target} does not exist")
    threat = int(fields["threat"].split()[0]) if "threat" in fields else None
    return Fixture(
        path=path, kind=kind, target=target, threat=threat,
        expect=tuple(s.strip() for s in fields["expect"].split("|")),
        policies=tuple(s.strip() for s in fields["policies"].split(",")),
        what=fields.get("what", fields.get("legit", "")),
        naive=fields.get("naive", "correct" if kind == "legit" else "fooled"),
        checks=tuple(s.strip() for s in fields.get("check", "").split(",") if s.strip()),
        marks=tuple(s.strip() for s in fields.get("marks", "").split(",") if s.strip()),
    )


def load(kind: str) -> list[Fixture]:
    folder = EXPLOITS_DIR if kind == "exploit" else LEGIT_DIR
    return [parse(p, kind) for p in sorted(folder.glob("*.py"))]


EXPLOITS = load("exploit")
LEGIT = load("legit")
