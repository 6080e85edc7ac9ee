"""Compiled extensions reused across judgements of the same candidate source.

Compiling a CUDA candidate (`torch.utils.cpp_extension.load_inline`) takes tens of seconds, and
the same source comes back often (RL samples repeat, a batch is judged again). The judge keeps a
cache of finished builds, one folder per candidate source hash, in its own work directory; no
worker is ever told where it is, so none can write into it:
- before a candidate's `load`, the judge copies the cached build of that source (if any) into
  the worker's private build folder (`BuildCache.load_fields`);
- in the worker, `load_inline` is wrapped (`install_load_inline_cache`, before any untrusted
  code runs): a call whose arguments hash to a build the folder already holds imports that
  build's library without compiling; any other call compiles as usual, and the wrapper records
  the library it built in the folder's manifest;
- after a load that succeeded, the judge copies the worker's manifest, the libraries it lists
  and the Triton cache into the cache, for the next judgement of that source
  (`BuildCache.keep`): regular files inside the worker's folder only, within a size limit,
  published with one rename.
A worker can only ever seed judgements of its own source. The compiler's parallelism (MAX_JOBS
of torch's ninja build) is the host's cores shared among the judgements that may compile at once.
"""
from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
import tempfile
from pathlib import Path

MANIFEST = "kz_extensions.json"
MAX_FILE_BYTES = 1 << 30
MAX_TOTAL_BYTES = 4 << 30


def compile_jobs(cfg) -> int:
    """RuntimeConfig.compile_jobs, or the host's cores shared among max_workers judgements."""
    if cfg.runtime.compile_jobs:
        return cfg.runtime.compile_jobs
    return max(1, (os.cpu_count() or 1) // max(1, cfg.max_workers))


class BuildCache:
    def __init__(self, root: Path, cfg):
        self.root, self.jobs = Path(root), compile_jobs(cfg)

    def load_fields(self, w, source_hash: str) -> dict:
        """The `load` command's build fields for worker `w`: its private build folder, seeded
        with the cached build of this source, and the compiler's parallelism."""
        private = os.path.join(w.dir, "build")
        cached = self.root / source_hash
        if cached.is_dir():
            try:
                shutil.copytree(cached, private, dirs_exist_ok=True)
            except OSError:  # only saves time: the candidate compiles afresh
                pass
        return {"build_dir": private, "compile_jobs": self.jobs}

    def keep(self, w, source_hash: str) -> bool:
        """Copy what worker `w` built into the cache, unless the source has a build there
        already; whether it was copied."""
        target = self.root / source_hash
        private = Path(w.dir) / "build"
        if target.exists() or not private.is_dir():
            return False
        files = _build_files(private)
        if not files:
            return False
        self.root.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{source_hash[:12]}-", dir=self.root))
        try:
            for rel in files:
                dst = tmp / rel
                dst.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(private / rel, dst, follow_symlinks=False)
            os.rename(tmp, target)  # published whole, or not at all (another judge was first)
            return True
        except OSError:
            shutil.rmtree(tmp, ignore_errors=True)
            return False


def _build_files(private: Path) -> list[Path]:
    """The files worth keeping of a worker's build folder, relative to it: the manifest and
    the libraries it lists, and the Triton cache. Only regular files that lie inside the folder
    (no links out of it), each and all together within the size limits."""
    root = private.resolve()
    picked: list[Path] = []
    manifest = private / MANIFEST
    if _plain_file(manifest, root):
        try:
            entries = json.loads(manifest.read_text())
            libs = [str(e["library"]) for e in entries.values()]
        except (ValueError, TypeError, KeyError, AttributeError, OSError):
            libs = []
        libs = [lib for lib in libs if _plain_file(private / lib, root)]
        if libs:
            picked += [Path(MANIFEST)] + [Path(lib) for lib in libs]
    triton = private / "triton"
    if triton.is_dir() and not triton.is_symlink():
        picked += [p.relative_to(private) for p in triton.rglob("*") if _plain_file(p, root)]
    total = sum((private / p).stat().st_size for p in picked)
    return picked if total <= MAX_TOTAL_BYTES else []


def _plain_file(p: Path, root: Path) -> bool:
    try:
        return (not p.is_symlink() and p.is_file() and p.stat().st_size <= MAX_FILE_BYTES
                and p.resolve().is_relative_to(root))
    except OSError:
        return False


# ----------------------------------------------------------------------------- worker side
def mentions(path: str, word: str) -> bool:
    """Whether a candidate's file names `word` (the wrapper is installed only where it might be
    used: importing torch's extension machinery costs a quarter of a second)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return word in f.read()
    except OSError:
        return False


def install_load_inline_cache(build_dir: str) -> None:
    """Wrap `torch.utils.cpp_extension.load_inline` (see the module docstring). Called by the
    worker's `load`, before the candidate is imported."""
    from torch.utils import cpp_extension as ext
    original = getattr(ext.load_inline, "kz_original", ext.load_inline)
    manifest_path = os.path.join(build_dir, MANIFEST)

    signature = inspect.signature(original)

    def load_inline(*args, **kwargs):
        try:
            bound = signature.bind(*args, **kwargs)
        except TypeError:
            return original(*args, **kwargs)  # let torch say what is wrong with the call
        bound.apply_defaults()
        call = bound.arguments
        name = call["name"]
        key = hashlib.sha256(repr(sorted((k, repr(v)) for k, v in call.items()))
                             .encode()).hexdigest()
        entries = _read_manifest(manifest_path)
        entry = entries.get(name) if isinstance(name, str) else None
        python_module = call.get("is_python_module") is True
        if python_module and isinstance(entry, dict) and entry.get("key") == key:
            lib = os.path.join(build_dir, entry["library"])
            if os.path.isfile(lib):
                return ext._import_module_from_library(
                    Path(lib).stem, os.path.dirname(lib), True)
        module = original(*args, **kwargs)
        lib = getattr(module, "__file__", None)
        if python_module and isinstance(name, str) and isinstance(lib, str) \
                and os.path.isfile(lib):
            rel = os.path.relpath(lib, build_dir)
            if not rel.startswith(".."):
                entries[name] = {"key": key, "library": rel}
                _write_manifest(manifest_path, entries)
        return module

    load_inline.kz_original = original
    ext.load_inline = load_inline


def _read_manifest(path: str) -> dict:
    try:
        with open(path) as f:
            data = json.load(f)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def _write_manifest(path: str, entries: dict) -> None:
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path + ".tmp", "w") as f:
            json.dump(entries, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass
