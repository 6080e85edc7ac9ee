"""A deliberately NAIVE evaluator, used only by tests/test_adversarial.py to show that each exploit
in tests/adversarial/exploits fools it. Never use it to judge anything.

It is a strawman assembled from habits seen in real kernel-evaluation harnesses, each of which one
or more exploits abuses:

- reference and candidate are exec'd into ONE shared namespace in ONE process (the candidate can
  redefine `get_inputs`, shape constants, reach the reference's `Model`, walk frames and `gc`);
- the inputs come from a published seed (42) and are NOT cloned: the same tensors go to the
  reference and then to the candidate, reference first (stale memory, prediction, tampering);
- the reference is timed (and its outputs freed) before the candidate runs in the same process;
- timing is `time.perf_counter` around each call, with no synchronisation and the same inputs
  every call (caches, threads, timer patches);
- the candidate's output is read once, after its timing loop, through `.detach().cpu().float()`
  (lazy outputs, instance-method overrides, wrong dtypes);
- comparison: `torch.equal` fast path, then `torch.allclose` at KernelBench's 1e-2, then a
  NaN-blind, broadcasting max-error fallback; `zip` over tuple outputs (short tuples);
- after the candidate ran, the harness lazily imports `cProfile` to check that custom code ran,
  with the working directory first on `sys.path` (module shadowing);
- protocol with the parent: the FIRST `NAIVE-RESULT {json}` line on stdout is believed; a child
  that printed none and exited 0 is counted as passed (fake lines, `sys.exit(0)`, `os._exit(0)`);
- no resource limits beyond the parent's wall-clock timeout.

`run_naive(task_path, candidate_path)` runs the child
(`python -m tests.adversarial.naive TASK CAND`) in a fresh working directory and returns what
the naive parent concluded; `run_naive_many` judges several well-behaved pairs in one child.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

MARK = "NAIVE-RESULT "
SEED = 42  # published, as KernelBench's is
ATOL = RTOL = 1e-2
TIMED_CALLS = 10
REPO = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------------------- child
def _prep(t):
    return t.detach().cpu().float()


def _close(outs, exps) -> tuple[bool, str]:
    import torch

    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    exps = exps if isinstance(exps, (tuple, list)) else (exps,)
    for o, e in zip(outs, exps):  # stops at the shorter of the two
        o, e = _prep(o), _prep(e)
        if torch.equal(o, e):
            continue
        if torch.allclose(o, e, atol=ATOL, rtol=RTOL):
            continue
        err = (o - e).abs().max().item()  # broadcasts; NaN compares False below
        if not err > ATOL + RTOL * e.abs().max().item():
            continue
        return False, f"max abs error {err:.3g}"
    return True, "outputs match"


def _custom_code_ran(model, inputs) -> bool:
    import cProfile  # lazy: imported only once a candidate needs profiling

    prof = cProfile.Profile()
    prof.enable()
    model(*inputs)
    prof.disable()
    return any("triton" in str(getattr(s.code, "co_filename", s.code)) for s in prof.getstats())


def judge_in_process(task_path: str, cand_path: str) -> dict:
    import torch

    ns: dict = {"__name__": "kz_naive_shared"}
    exec(compile(Path(task_path).read_text(), task_path, "exec"), ns)
    exec(compile(Path(cand_path).read_text(), cand_path, "exec"), ns)
    torch.manual_seed(SEED)
    init = ns["get_init_inputs"]()
    torch.manual_seed(SEED)
    model = ns["Model"](*init)
    torch.manual_seed(SEED)
    new = ns["ModelNew"](*init)
    torch.manual_seed(SEED)
    inputs = ns["get_inputs"]()
    device = os.environ.get("KZ_NAIVE_DEVICE", "cpu")
    if device != "cpu":
        model, new = model.to(device), new.to(device)
        inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        ref_times = []
        for _ in range(TIMED_CALLS):
            t0 = time.perf_counter()
            expected = model(*inputs)
            ref_times.append(time.perf_counter() - t0)
        try:
            out = new(*inputs)
            new_times = []
            for _ in range(TIMED_CALLS):
                t0 = time.perf_counter()
                new(*inputs)
                new_times.append(time.perf_counter() - t0)
            ran = _custom_code_ran(new, inputs)
        except Exception as e:  # noqa: BLE001 - the naive habit being demonstrated
            return {"correct": False, "speedup": None, "reason": f"candidate raised {e!r}"}
        ok, why = _close(out, expected)
    ref_t, new_t = sorted(ref_times)[TIMED_CALLS // 2], sorted(new_times)[TIMED_CALLS // 2]
    return {"correct": ok, "reason": why, "kernel_ran": ran, "ref_ms": ref_t * 1e3,
            "cand_ms": new_t * 1e3, "speedup": (ref_t / new_t) if new_t > 0 else float("inf")}


def main(argv: list[str]) -> int:
    """`TASK CAND [TASK CAND ...]`: one result line per pair, each pair in a fresh namespace."""
    for task, cand in zip(argv[0::2], argv[1::2]):
        result = judge_in_process(task, cand)
        print(MARK + json.dumps(result), flush=True)
    return 0


# ---------------------------------------------------------------------------------------- parent
def run_naive_many(pairs: list[tuple[Path, Path]], timeout_s: float = 120.0) -> list[dict]:
    """Judge well-behaved pairs (the legit fixtures) in ONE naive child: one start-up for all.

    Only for candidates that cannot disturb each other; each still gets a fresh namespace.
    """
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
           "KZ_NAIVE_DEVICE": "cpu", "TRITON_INTERPRET": "1"}
    args = [str(Path(p).resolve()) for pair in pairs for p in pair]
    with tempfile.TemporaryDirectory(prefix="kz_naive_") as cwd:
        p = subprocess.run([sys.executable, "-m", "tests.adversarial.naive", *args], cwd=cwd,
                           env=env, capture_output=True, text=True, timeout=timeout_s)
    results = [json.loads(line[len(MARK):]) for line in p.stdout.splitlines()
               if line.startswith(MARK)]
    if len(results) != len(pairs):
        raise RuntimeError(f"naive batch gave {len(results)} results for {len(pairs)} pairs: "
                           f"{p.stderr[-2000:]}")
    return [{**r, "status": "ok"} for r in results]


def run_naive(task_path: str | Path, cand_path: str | Path, timeout_s: float = 60.0,
              device: str = "cpu") -> dict:
    """What the naive parent concludes. Adds `status`: ok | crashed | hang, and `wall_s`.

    device: `cpu` runs Triton through the interpreter; `cuda` moves modules and inputs to the GPU
    (and, naively, still times with perf_counter and no synchronisation).
    """
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
           "KZ_NAIVE_DEVICE": device}
    if device == "cpu":
        env["TRITON_INTERPRET"] = "1"
    else:
        env.pop("TRITON_INTERPRET", None)
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kz_naive_") as cwd:
        try:
            # start_new_session so that a timeout can kill whatever the candidate forked.
            p = subprocess.Popen([sys.executable, "-m", "tests.adversarial.naive",
                                  str(Path(task_path).resolve()), str(Path(cand_path).resolve())],
                                 cwd=cwd, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 start_new_session=True)
            try:
                stdout, stderr = p.communicate(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                _kill_group(p)
                return {"status": "hang", "correct": None, "speedup": None,
                        "reason": f"no answer within {timeout_s} s", "wall_s": timeout_s}
        finally:
            _kill_group(p)
    wall = time.monotonic() - t0
    for line in stdout.splitlines():
        if line.startswith(MARK):
            res = json.loads(line[len(MARK):])
            return {**res, "status": "ok", "wall_s": wall}
    if p.returncode == 0:
        return {"status": "ok", "correct": True, "speedup": None, "wall_s": wall,
                "reason": "exited 0 without a result line: counted as passed"}
    return {"status": "crashed", "correct": False, "speedup": None, "wall_s": wall,
            "reason": f"exit status {p.returncode}: {stderr[-500:]}"}


def _kill_group(p: subprocess.Popen) -> None:
    import signal

    try:
        os.killpg(p.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        p.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
