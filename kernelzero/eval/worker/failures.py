"""How a worker names what went wrong: one readable line for a user, and the status it earns
(a compiler's complaint is `compile_error`, anything else raised is `runtime_error`)."""
from __future__ import annotations


def one_line(e: BaseException) -> str:
    msg = str(e).strip().splitlines()
    first = next((m for m in msg if m.strip()), "")
    # Build failures put the useful line (the compiler error) deep in the message.
    err = next((m.strip() for m in msg if "error" in m.lower() and m.strip() != first), "")
    text = f"{type(e).__name__}: {first}" + (f" ... {err}" if err else "")
    return text[:400]


def classify(e: BaseException, phase: str) -> str:
    name = type(e).__name__
    text = str(e)
    if isinstance(e, SyntaxError) or "CompilationError" in name:
        return "compile_error"
    # The Triton interpreter reports what the GPU compiler would reject (undefined names, bad
    # types in kernel code) as an InterpreterError wrapping the Python error.
    if name == "InterpreterError" and any(k in text for k in ("NameError", "TypeError",
                                                              "AttributeError", "CompilationError")):
        return "compile_error"
    if "Error building extension" in text or "ninja" in text.lower() and "error" in text.lower():
        return "compile_error"
    if phase == "import" and isinstance(e, (ImportError, ModuleNotFoundError)):
        return "compile_error"
    return "runtime_error"
