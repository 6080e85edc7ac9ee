"""Check an exported package in a fresh process; print one JSON report as the last line.

    python -P probe.py PARENT_DIR PACKAGE NAME CLASS

Imports PACKAGE from PARENT_DIR (the op registers, the kernel file's top level runs: a CUDA
kernel compiles), builds CLASS() as the kernel was verified, and calls it on meta copies of the
reference's get_inputs(): the op's fake implementation then gives the output shapes and dtypes,
which must equal the reference's own on the same meta inputs. The kernel itself is not run (that
needs the device it was written for; the evaluator judged it). Standalone: imports torch and the
package only, not KernelZero.
"""
import importlib
import json
import sys


def _describe(out) -> list:
    outs = list(out) if isinstance(out, (tuple, list)) else [out]
    return [[list(o.shape), str(o.dtype).removeprefix("torch.")] if hasattr(o, "shape")
            else type(o).__name__ for o in outs]


def probe(parent: str, package: str, name: str, cls: str) -> dict:
    sys.path.insert(0, parent)
    try:
        pkg = importlib.import_module(package)
    except BaseException as e:  # the kernel's top level can raise anything
        return {"ok": False, "stage": "import", "error": f"{type(e).__name__}: {e}"}
    import torch

    op_module = importlib.import_module(f"{package}._{name}")
    reference = op_module._reference
    inputs = list(reference.get_inputs())
    if not inputs or not all(isinstance(x, torch.Tensor) for x in inputs):
        return {"ok": False, "stage": "inputs", "error": "the reference's forward must take "
                "tensors only (get_inputs() gives " + ", ".join(type(x).__name__ for x in inputs)
                + "); a custom op's inputs here are a list of tensors"}
    meta = [torch.empty_like(x, device="meta") for x in inputs]
    try:
        with torch.device("meta"):
            expected = reference.Model(*reference.get_init_inputs())(*meta)
    except Exception as e:
        return {"ok": False, "stage": "reference", "error": "the reference does not run on meta "
                f"tensors ({type(e).__name__}: {e}), so the op has no fake implementation: it "
                "works eagerly, not under torch.compile"}
    if not all(isinstance(o, torch.Tensor) for o in
               (expected if isinstance(expected, (tuple, list)) else [expected])):
        return {"ok": False, "stage": "reference", "error": "the reference returns non-tensors "
                f"({_describe(expected)}); the op returns tensors only"}
    try:
        got = getattr(pkg, cls)()(*meta)
    except Exception as e:
        return {"ok": False, "stage": "op", "error": f"{type(e).__name__}: {e}"}
    ok = _describe(got) == _describe(expected)
    return {"ok": ok, "stage": "done", "outputs": _describe(got),
            **({} if ok else {"error": f"the op's meta outputs {_describe(got)} differ from the "
                              f"reference's {_describe(expected)}"})}


if __name__ == "__main__":
    print(json.dumps(probe(*sys.argv[1:5])), flush=True)
