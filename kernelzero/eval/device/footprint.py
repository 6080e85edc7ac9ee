"""How much device memory judging one task takes, known before anything of it is allocated.

A task's figures (`Footprint`) come from its reference module run under FakeTensorMode in the
sandboxed worker (`measure`, at `load`, before any device memory is touched): shapes and dtypes
only, no memory, no kernels. The model is built under the same mode (so the real one, built on
the CPU, is not touched), `get_inputs` gives the inputs' bytes, and one forward call gives the
outputs' bytes and the peak of what the call allocates (live fake storages, counted as they are
made and freed). Where the fake run fails (a forward that reads values), the forward's peak is
estimated from the inputs and outputs; once the reference has really run, its measured peak
replaces the estimate (`with_measured`).

From those figures, what each process holds at its peak while one trial runs (trials.py):
- a worker: its model's weights; the trial's inputs, their pristine copy (the mutation check;
  none for inputs over COPY_MAX_BYTES) and what the forward allocates (its outputs
  among it); a candidate's new inputs are written into the previous trial's buffers, so at a
  draw it holds two sets (small inputs only), never more than the pristine copy's worth; plus
  the outputs it shares (`slots` of them, copies for a candidate, in place for a large
  reference output);
- the judge: its copies of the outputs of the trials one request returns, and the comparison's
  scratch (bounded: compare.py compares large tensors in chunks);
- the reference outputs the judge keeps for a task (every trial's; a task whose outputs would
  take more than `RuntimeConfig.reference_store_mb` is streamed instead, one trial at a time from a
  reference worker of the candidate's own: evaluator.py).
"""
from __future__ import annotations

import contextlib
import random
import signal
import threading
import weakref
from dataclasses import asdict, dataclass

GiB = 2 ** 30
# Inputs larger than this are never held twice: no pristine copy, no second set of buffers (the
# worker's trials keep to it: worker/trials.py run_trials; the figures below count on it).
COPY_MAX_BYTES = 1 << 30
MEASURE_LIMIT_S = 20.0  # wall time the fake run may take before it gives up


@dataclass
class Footprint:
    """One call of a task's module, in bytes. `forward_bytes`: what the forward allocates at its
    peak beyond its inputs (its outputs included); `measured`: from a real run, not estimated."""

    input_bytes: int = 0
    output_bytes: int = 0
    weight_bytes: int = 0
    forward_bytes: int = 0
    measured: bool = False
    known: bool = False   # false: nothing could be learned (every figure 0)

    @classmethod
    def from_dict(cls, d) -> "Footprint":
        if not isinstance(d, dict):
            return cls()
        try:
            return cls(**{k: int(d.get(k, 0) or 0) for k in
                          ("input_bytes", "output_bytes", "weight_bytes", "forward_bytes")},
                       measured=bool(d.get("measured")), known=bool(d.get("known")))
        except (TypeError, ValueError):
            return cls()

    def to_dict(self) -> dict:
        return asdict(self)

    def with_measured(self, forward_peak_bytes: int | None, output_bytes: int | None) -> "Footprint":
        """The figures once the module ran: `forward_peak_bytes` is trials.py's (inputs plus
        the forward's peak allocations), `output_bytes` the outputs' real size."""
        f = Footprint(**self.to_dict())
        if output_bytes:
            f.output_bytes, f.known = int(output_bytes), True
        if forward_peak_bytes:
            f.forward_bytes = max(int(forward_peak_bytes) - f.input_bytes, f.output_bytes)
            f.measured = f.known = True
        return f

    @property
    def forward(self) -> int:
        """The forward's allocations: measured or fake-counted, else its outputs plus one
        scratch tensor the size of the larger of inputs and outputs."""
        return self.forward_bytes or self.output_bytes + max(self.input_bytes, self.output_bytes)

    def worker_bytes(self, slots: int, copies: bool = True) -> int:
        """A worker's peak while it runs trials, `slots` of whose outputs it holds shared
        (`copies`: as copies, a candidate; a reference shares large outputs in place). Inputs
        over COPY_MAX_BYTES are held once (no pristine copy, no second set of buffers)."""
        i = self.input_bytes
        # inputs and their pristine copy (or, at a draw, the old buffers and the new inputs)
        inputs = 2 * i if i <= COPY_MAX_BYTES else i
        held = max(0, slots if copies else slots - 1) * self.output_bytes
        return self.weight_bytes + inputs + self.forward + held

    def judge_bytes(self, slots: int, chunk_bytes: int) -> int:
        """The judge's copies of `slots` outputs and the comparison's scratch."""
        return slots * self.output_bytes + 4 * min(self.output_bytes, chunk_bytes)

    def stored_bytes(self, trials: int) -> int:
        """The reference outputs the judge keeps for a task of `trials` trials."""
        return trials * self.output_bytes

    def describe(self) -> str:
        return (f"inputs {gib(self.input_bytes)}, outputs {gib(self.output_bytes)}, weights "
                f"{gib(self.weight_bytes)}, forward {gib(self.forward)}"
                + ("" if self.measured else " (estimated)"))


def gib(n: int | float) -> str:
    return f"{n / GiB:.1f} GiB" if n >= GiB / 10 else f"{n / 2**20:.0f} MiB"


def tensor_bytes(torch, obj, depth: int = 0) -> int:
    """Bytes of the tensors in an output (nested tuples/lists, as tensorio encodes them)."""
    if isinstance(obj, torch.Tensor):
        return obj.numel() * obj.element_size()
    if isinstance(obj, (tuple, list)) and depth < 4:
        return sum(tensor_bytes(torch, x, depth + 1) for x in obj)
    return 0


def measure(torch, module) -> Footprint:
    """The figures of a reference module (`Model`, `get_inputs`, `get_init_inputs`), under
    FakeTensorMode on the CPU (sizes do not depend on the device). Python's and NumPy's random
    states are left as they were, and torch's generator is not drawn from (fake tensors take no
    values). Whatever fails leaves the figures it could not learn at 0."""
    from torch._subclasses.fake_tensor import FakeTensorMode
    state, np_state = random.getstate(), _numpy_state()
    f = Footprint()
    try:
        with _time_limit(MEASURE_LIMIT_S), FakeTensorMode(allow_non_fake_inputs=True), \
                torch.device("cpu"):
            inputs = list(module.get_inputs())
            f.input_bytes = sum(tensor_bytes(torch, x) for x in inputs)
            f.known = True
            model = module.Model(*module.get_init_inputs())
            if isinstance(model, torch.nn.Module):
                f.weight_bytes = sum(t.numel() * t.element_size()
                                     for t in [*model.parameters(), *model.buffers()])
            counter = _LiveBytes(torch)
            with torch.no_grad(), counter:
                out = model(*inputs)
            f.output_bytes = tensor_bytes(torch, out)
            f.forward_bytes = max(counter.peak, f.output_bytes)
    except BaseException:  # noqa: BLE001 - an estimate: the trials report real errors
        pass
    finally:
        random.setstate(state)
        if np_state is not None:
            import numpy
            numpy.random.set_state(np_state)
    return f


class _OverTime(Exception):
    pass


@contextlib.contextmanager
def _time_limit(seconds: float):
    """Raise _OverTime in the block after `seconds` of wall time (a module whose forward sleeps
    or spins: its measure gives up, the trials' own limits apply). Main thread only; elsewhere
    no limit."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def over(signum, frame):
        raise _OverTime()
    previous = signal.signal(signal.SIGALRM, over)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


class _LiveBytes:
    """A dispatch mode counting the bytes of the storages the ops under it create, while they
    live (weak references to the storages: a view keeps its storage alive), and their peak."""

    def __new__(cls, torch):
        from torch.utils._python_dispatch import TorchDispatchMode
        from torch.utils._pytree import tree_flatten

        class LiveBytes(TorchDispatchMode):
            def __init__(self):
                super().__init__()
                self.live = self.peak = 0
                self._seen: dict = {}

            def _count(self, t) -> None:
                s = t.untyped_storage()
                key = s._cdata
                if key in self._seen:
                    return
                n = int(s.nbytes())
                self._seen[key] = n
                self.live += n
                self.peak = max(self.peak, self.live)
                weakref.finalize(s, self._gone, key)

            def _gone(self, key) -> None:
                self.live -= self._seen.pop(key, 0)

            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                out = func(*args, **(kwargs or {}))
                for t in tree_flatten(out)[0]:
                    if isinstance(t, torch.Tensor):
                        self._count(t)
                return out

        return LiveBytes()


def warm_fake_mode(torch) -> None:
    """FakeTensorMode's first use costs 0.3-1.1 s (lazy set-up): paid while a spare warms."""
    class _Tiny:
        Model = torch.nn.ReLU

        @staticmethod
        def get_inputs():
            return [torch.empty(2)]

        @staticmethod
        def get_init_inputs():
            return []
    measure(torch, _Tiny)


def _numpy_state():
    import sys
    numpy = sys.modules.get("numpy")
    return numpy.random.get_state() if numpy is not None else None
