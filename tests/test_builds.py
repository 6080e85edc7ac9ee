"""Compiled extensions reused by candidate source (builds.py): the worker's `load_inline` wrapper
skips the compiler for a build its folder already holds, and the judge's cache copies builds in
and out of workers' private folders, never handing a worker its own path."""
import os
import types
from pathlib import Path

import pytest
from torch.utils import cpp_extension

from kernelzero.eval import EvalConfig, RuntimeConfig
from kernelzero.eval.worker.builds import (MANIFEST, BuildCache, _build_files, compile_jobs,
                                           install_load_inline_cache)


@pytest.fixture
def fake_torch_build(monkeypatch, tmp_path):
    """A `load_inline` that 'compiles' into TORCH_EXTENSIONS_DIR/name/name.so, counting calls."""
    calls = {"compiled": 0, "imported": []}

    def load_inline(name, cpp_sources, cuda_sources=None, functions=None, extra_cflags=None,
                    is_python_module=True, **kw):
        calls["compiled"] += 1
        lib = Path(os.environ["TORCH_EXTENSIONS_DIR"]) / name / f"{name}.so"
        lib.parent.mkdir(parents=True, exist_ok=True)
        lib.write_bytes(b"ELF" + str(cpp_sources).encode())
        return types.SimpleNamespace(__file__=str(lib), how="compiled")

    def import_lib(module_name, path, is_python_module):
        calls["imported"].append((module_name, path))
        return types.SimpleNamespace(__file__=os.path.join(path, module_name + ".so"),
                                     how="imported")

    monkeypatch.setattr(cpp_extension, "load_inline", load_inline)
    monkeypatch.setattr(cpp_extension, "_import_module_from_library", import_lib)
    return calls


def _worker_dir(tmp_path, name):
    d = tmp_path / name
    d.mkdir()
    return types.SimpleNamespace(dir=str(d))


def test_a_source_built_once_is_imported_not_compiled_in_the_next_worker(
        tmp_path, monkeypatch, fake_torch_build):
    cache = BuildCache(tmp_path / "cache", EvalConfig(max_workers=4))
    first = _worker_dir(tmp_path, "w1")
    fields = cache.load_fields(first, "abc")
    assert fields["build_dir"] == os.path.join(first.dir, "build")
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", os.path.join(fields["build_dir"], "torch_extensions"))
    install_load_inline_cache(fields["build_dir"])
    triton = Path(fields["build_dir"]) / "triton" / "k1"
    triton.mkdir(parents=True)
    (triton / "kernel.cubin").write_bytes(b"cubin")
    m = cpp_extension.load_inline("ext", "int f();", functions=["f"])
    assert m.how == "compiled" and fake_torch_build["compiled"] == 1
    assert cache.keep(first, "abc") and not cache.keep(first, "abc")  # published once
    assert not (tmp_path / "cache" / "abc" / "torch_extensions" / "ext" / "ext.o").exists()

    second = _worker_dir(tmp_path, "w2")
    fields = cache.load_fields(second, "abc")
    assert (Path(fields["build_dir"]) / "triton" / "k1" / "kernel.cubin").exists()
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", os.path.join(fields["build_dir"], "torch_extensions"))
    install_load_inline_cache(fields["build_dir"])
    m = cpp_extension.load_inline("ext", "int f();", functions=["f"])
    assert m.how == "imported" and fake_torch_build["compiled"] == 1
    assert fake_torch_build["imported"][0][1].startswith(second.dir)  # its own copy
    # other arguments: another build, compiled
    m = cpp_extension.load_inline("ext", "int f();", functions=["f"], extra_cflags=["-O3"])
    assert m.how == "compiled" and fake_torch_build["compiled"] == 2


def test_keep_takes_only_plain_files_inside_the_worker_folder(tmp_path):
    cache = BuildCache(tmp_path / "cache", EvalConfig())
    w = _worker_dir(tmp_path, "w")
    build = Path(w.dir) / "build"
    (build / "torch_extensions" / "ext").mkdir(parents=True)
    secret = tmp_path / "secret.txt"
    secret.write_text("not yours")
    (build / "torch_extensions" / "ext" / "ext.so").symlink_to(secret)
    (build / MANIFEST).write_text('{"ext": {"key": "k", "library": "torch_extensions/ext/ext.so"}}')
    assert not cache.keep(w, "h1")  # the only library is a link out of the folder
    (build / MANIFEST).write_text('{"ext": {"key": "k", "library": "../../secret.txt"}}')
    assert not cache.keep(w, "h1") and _build_files(build) == []
    real = build / "torch_extensions" / "ext" / "real.so"
    real.write_bytes(b"ELF")
    (build / "torch_extensions" / "ext" / "ext.so").unlink()
    (build / "torch_extensions" / "ext" / "ext.so").symlink_to(real)  # a link, even inside
    (build / MANIFEST).write_text('{"ext": {"key": "k", "library": "torch_extensions/ext/ext.so"}}')
    assert _build_files(build) == []
    (build / MANIFEST).write_text("not json")
    assert not cache.keep(w, "h1") and not (tmp_path / "cache" / "h1").exists()


def test_compile_jobs_share_the_host_among_the_judgements():
    cores = os.cpu_count() or 1
    assert compile_jobs(EvalConfig(max_workers=1)) == cores
    assert compile_jobs(EvalConfig(max_workers=cores * 2)) == 1
    assert compile_jobs(EvalConfig(runtime=RuntimeConfig(compile_jobs=3))) == 3
