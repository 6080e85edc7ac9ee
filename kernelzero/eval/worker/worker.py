"""Worker: the commands of a sandboxed worker process, the only place where a reference module
or a candidate runs. The process around it (its start, the reply channel, the command loop) is
process.py, which also says what a reply can and cannot be trusted for.

Commands: `load` (import the module file, build the model under a seed; a reference's
footprint: footprint.py), `reserve` (device memory for the trials, once the judge admitted them:
reserve.py), `arena` (allocate and share the memory its CUDA outputs are copied into:
cuda_ipc.Arena), `build` (the model to the device), `run` (fresh inputs per seed, forward, write
outputs: trials.py), `time` (CUDA-event timing with fresh inputs every call: timer.py), `exit`.
Commands may ask for `trim`: the caching allocator's unused blocks go back to the driver once the
command is done (a large task's judgement runs a reference and a candidate side by side).
"""
from __future__ import annotations

import importlib.util
import os
import sys
import traceback

# Imported before any untrusted code runs: a candidate cannot swap what times it or profiles it.
from kernelzero.eval.worker.builds import install_load_inline_cache, mentions
from kernelzero.eval.worker.failures import classify, one_line
from kernelzero.eval.worker.library_share import KernelProfile
from kernelzero.eval.device.footprint import measure
from kernelzero.eval.device.reserve import hand_to_allocator
from kernelzero.eval.worker.network import network_isolated
from kernelzero.eval.worker.timer import time_calls
from kernelzero.eval.worker.timing_primitives import capture_primitives, l2_reset_function
from kernelzero.eval.worker.trials import run_trials
from kernelzero.eval.worker.warm_up import warm as warm_up


def _failure(e: BaseException, phase: str) -> dict:
    if isinstance(e, SystemExit):
        return {"ok": False, "status": "rejected", "phase": phase, "flags": ["harness_exit"],
                "reason": f"the module called sys.exit({e.code}) while loading"}
    return {"ok": False, "status": classify(e, phase), "phase": phase,
            "reason": one_line(e), "detail": traceback.format_exc()[-2000:]}


def _import_file(path: str, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # Triton and dataclasses look modules up by name
    spec.loader.exec_module(mod)
    return mod


class Worker:
    def __init__(self):
        import torch

        # `use_deterministic_algorithms`, which every candidate's correctness run calls (memory
        # poisoning), imports torch._inductor.config and with it Dynamo and sympy: seconds of
        # CPU. Here it happens before any module is given to this worker (spares start ahead).
        import torch._inductor.config  # noqa: F401
        self.torch = torch
        self.primitives = capture_primitives(torch)
        self.device = "cpu"
        self.ref = None        # the reference module (for get_inputs / get_init_inputs)
        self.cand = None       # the candidate module (ModelNew)
        self.role = "reference"
        self.model = None      # the nn.Module under test (Model or ModelNew)
        self.out_dir = os.getcwd()
        self.transfer = "host"  # or "ipc": CUDA outputs shared with the judge, not copied
        self._constructed = None  # the init seed `construct` last built the model under
        self._loaded: list[str] = []  # the reference weights the candidate took
        self._keep: list = []   # tensors shared through IPC, alive until the next command
        self._share_pool = None  # where shared copies are allocated (load's `ipc_pool`): made
        self._pool_wanted = False  # at the first share, which runs with the judge's GPU lock held
        self._ipc_min_bytes = 0  # smaller outputs go through host memory (load's `ipc_min_bytes`)
        self._arena = None  # the allocation shared outputs are copied into (cuda_ipc.Arena):
        self._arena_wanted = False  # from the `arena` command, or made at the first share
        self._arena_slots = 0  # (load's `ipc_arena`) with room for this many outputs like it
        self._base = None  # the first trial's input buffers, which later trials write into
        self._in_place_bytes = 0  # a reference's outputs this large are shared, not copied

    # ------------------------------------------------------------------ inputs
    def make_inputs(self, seed: int, dist: str = "task"):
        """Inputs from the reference's own `get_inputs`, seeded, created directly on the device.
        A re-drawn input replaces its original before it is made (one input's worth of memory
        less at a draw: KernelBench's inputs reach 16 GiB)."""
        torch = self.torch
        torch.manual_seed(seed)
        with torch.device(self.device):
            out = list(self.ref.get_inputs())
        # By index, holding no other reference: `for i, x in enumerate(out)` would keep the
        # original alive through the redraw (enumerate keeps its last item), so a task whose
        # inputs take half the GPU would hold them twice and run out of memory.
        for i in range(len(out)):
            if isinstance(out[i], torch.Tensor):
                out[i] = out[i].to(self.device)
                if dist != "task" and out[i].is_floating_point():
                    shape, dtype = out[i].shape, out[i].dtype
                    out[i] = None
                    out[i] = self._redistribute(shape, dtype, dist)
        return out

    def _redistribute(self, shape, dtype, dist: str):
        """Other value distributions of the same shape and dtype (hardening trials), computed in
        place: one float32 tensor of the shape (and chunk-sized scratch) at a time."""
        torch = self.torch
        g = torch.randn(shape, device=self.device, dtype=torch.float32)
        if dist == "scaled":
            g.mul_(8.0).add_(3.0)
        elif dist == "heavy":
            flat, chunk = g.view(-1), 1 << 24
            for i in range(0, flat.numel(), chunk):
                part = flat[i:i + chunk]
                part.div_(torch.rand(part.shape, device=self.device).clamp_min_(0.05))
        elif dist != "normal":
            raise ValueError(f"unknown input distribution {dist!r}")
        return g.to(dtype)

    def digest_parts(self, inputs) -> list:
        """Each input tensor's checksum (the sum of |x| in float64) times its position, as 0-d
        tensors still on the device: read later, in one transfer with the mutation check (their
        sum is the trial's `input_digest`). Summed in chunks: no scratch the size of an input."""
        from kernelzero.eval.worker.trials import abs_sum
        return [abs_sum(self.torch, x.detach()) * (i + 1) for i, x in enumerate(inputs)
                if isinstance(x, self.torch.Tensor) and x.numel()]

    # ------------------------------------------------------------------ commands
    def warm(self, cmd: dict) -> dict:
        """Start-up costs paid before any untrusted code arrives (warm_up.py: `warm`)."""
        return warm_up(self, cmd)

    def load(self, cmd: dict) -> dict:
        """Import the reference (and the candidate): this is where CUDA extensions compile. With
        `init_seed`, also construct the model on the CPU (`construct`).

        Runs while other workers may be timing, so it touches the GPU as little as it can: the
        model's weights reach the GPU in `build`, which the judge runs with the GPU held.
        """
        self.device = cmd["device"]
        build_dir = cmd.get("build_dir")
        if build_dir:  # private to this worker, seeded by the judge with a cached build (builds.py)
            for var, sub in (("TORCH_EXTENSIONS_DIR", "torch_extensions"),
                             ("TRITON_CACHE_DIR", "triton")):
                os.environ[var] = os.path.join(build_dir, sub)
        if cmd.get("compile_jobs"):  # torch's ninja builds (builds.compile_jobs)
            os.environ["MAX_JOBS"] = str(int(cmd["compile_jobs"]))
        self.transfer = cmd.get("transfer", "host")
        self._pool_wanted = self.transfer == "ipc" and bool(cmd.get("ipc_pool"))
        self._ipc_min_bytes = int(cmd.get("ipc_min_bytes", 0))
        self._arena_wanted = self.transfer == "ipc" and bool(cmd.get("ipc_arena"))
        self.role = cmd["role"]
        try:
            self.ref = _import_file(cmd["task_path"], "kz_reference")
            if self.role == "candidate":
                if build_dir and mentions(cmd["candidate_path"], "cpp_extension"):
                    install_load_inline_cache(build_dir)
                self.cand = _import_file(cmd["candidate_path"], "kz_candidate")
                if not hasattr(self.cand, "ModelNew"):
                    return {"ok": False, "status": "format_error",
                            "reason": "the candidate defines no `ModelNew` class"}
        except BaseException as e:  # noqa: BLE001 - every failure becomes a reply
            return _failure(e, "import")
        info = self.construct(int(cmd["init_seed"])) if "init_seed" in cmd else {"ok": True}
        if info["ok"] and cmd.get("footprint") and self.role == "reference":
            info["footprint"] = measure(self.torch, self.ref).to_dict()
        return info

    def reserve(self, cmd: dict) -> dict:
        """Device memory for the trials, taken from the driver now, outside the judge's GPU lock
        and once the judge admitted the judgement (reserve.py): `bytes`, at most what is free
        less a GiB. Returns the bytes reserved (0 off cuda or without a CUDA context yet)."""
        if not self._cuda_ready():
            return {"ok": True, "reserved_bytes": 0}
        torch = self.torch
        try:
            room = torch.cuda.mem_get_info()[0] - 2**30
            return {"ok": True, "reserved_bytes": hand_to_allocator(
                torch, min(int(cmd.get("bytes", 0)), room))}
        except Exception:  # noqa: BLE001 - only saves time; a broken context shows in build
            return {"ok": True, "reserved_bytes": 0}

    def _cuda_ready(self) -> bool:
        """On cuda with the context already made (a warmed spare): making one is GPU work."""
        return self.device == "cuda" and self.torch.cuda.is_initialized()

    def construct(self, seed: int) -> dict:
        """The model under the init seed, on the CPU (candidates get the reference's weights).

        Part of `load`, outside the judge's GPU lock: a large layer's weight initialisation is
        CPU work (0.2-0.3 s for a 4096x4096 Linear, twice for a candidate), which would
        otherwise hold the GPU (shared) from every timing waiting for it."""
        torch = self.torch
        try:
            torch.manual_seed(seed)
            init = list(self.ref.get_init_inputs())
            torch.manual_seed(seed)
            if self.role == "reference":
                self.model = self.ref.Model(*init)
                self._loaded = []
            else:
                self.model = self.cand.ModelNew(*init)
                self._loaded = self._load_reference_weights(init, seed)
        except BaseException as e:  # noqa: BLE001
            self.model = None
            return _failure(e, "init")
        self._constructed = seed
        return {"ok": True}

    def build(self, cmd: dict) -> dict:
        """Move the constructed model to the device (constructing it first unless `load` did,
        under the same init seed)."""
        torch = self.torch
        if self.device == "cuda":
            torch.cuda.init()
            self.primitives["l2_reset"] = l2_reset_function()
        seed = int(cmd.get("init_seed", 0))
        if self.model is None or self._constructed != seed:
            info = self.construct(seed)
            if not info["ok"]:
                return info
        try:
            if isinstance(self.model, torch.nn.Module):
                # No .eval(): KernelBench judges modules in their default (training) mode, where
                # BatchNorm uses batch statistics; reference and candidate get the same mode.
                self.model = self.model.to(self.device)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except BaseException as e:  # noqa: BLE001
            return _failure(e, "init")
        loaded = self._loaded
        info = {"ok": True, "weights_loaded": loaded, "network_isolated": network_isolated()}
        if self.device == "cuda":
            info["gpu"] = torch.cuda.get_device_name()
            props = torch.cuda.get_device_properties(0)
            info["l2_bytes"] = int(getattr(props, "L2_cache_size", 50 * 2**20))
        return info

    def _load_reference_weights(self, init, seed) -> list[str]:
        """Give ModelNew the reference's parameter values wherever names and shapes match."""
        torch = self.torch
        if not isinstance(self.model, torch.nn.Module):
            return []
        torch.manual_seed(seed)
        ref_sd = self.ref.Model(*init).state_dict()
        own = self.model.state_dict()
        match = {k: v for k, v in ref_sd.items() if k in own and own[k].shape == v.shape
                 and own[k].dtype == v.dtype}
        if match:
            self.model.load_state_dict(match, strict=False)
        return sorted(match)

    def _sync(self):
        if self.device == "cuda":
            self.primitives["sync"]()  # captured before untrusted code: it cannot be patched

    def trim(self) -> None:
        """Hand the caching allocator's unused blocks back to the driver (the command's `trim`):
        what the process still holds is then what it uses."""
        if self.device == "cuda" and self.torch.cuda.is_initialized():
            try:
                self.primitives["sync"]()
                self.torch.cuda.empty_cache()
            except Exception:  # noqa: BLE001 - a broken context shows in the next command
                pass

    def begin_command(self) -> None:
        """The judge has copied everything shared for the last command: let it go."""
        self._keep.clear()
        if self._arena is not None:
            self._arena.reset()

    def arena(self, cmd: dict) -> dict:
        """Allocate the arena (cuda_ipc.Arena) of `bytes` and share it: the judge maps it now,
        outside its GPU lock, and later outputs copied into it need no mapping there."""
        from kernelzero.eval.transport.cuda_ipc import Arena, share
        if self.transfer != "ipc" or not self._cuda_ready():
            return {"ok": False, "reason": "outputs are not shared over CUDA IPC here"}
        self._ensure_pool()
        self._arena_wanted = False
        self._arena = Arena.allocate(self.torch, int(cmd["bytes"]), self._share_pool)
        if self._arena is None:
            return {"ok": False, "reason": "no device memory for the arena"}
        return {"ok": True, "ipc": share(self._arena.buf)}

    def _ensure_pool(self) -> None:
        from kernelzero.eval.transport.cuda_ipc import output_pool
        if self._pool_wanted and self._share_pool is None:  # RuntimeConfig.ipc_output_pool
            self._pool_wanted, self._share_pool = False, output_pool(self.torch)

    def _write(self, name: str, obj, sizes_arena: bool = False) -> dict:
        """Encode `obj` into the file `name` (tensorio.encode). `sizes_arena`: a trial's outputs,
        which size the arena when it is still to be made (a reference's: `_arena_slots` times
        what they share)."""
        from kernelzero.eval.transport.cuda_ipc import Arena, Sharing, shared_bytes
        from kernelzero.eval.transport.tensorio import encode
        if self.transfer == "ipc":
            self._ensure_pool()
        if sizes_arena and self._arena_wanted and self.transfer == "ipc":
            try:
                need = self._arena_slots * shared_bytes(obj, self._ipc_min_bytes,
                                                        in_place_bytes=self._in_place_bytes)
            except Exception:  # noqa: BLE001 - an odd output object: no arena, nothing else changes
                need = 0
            if need:
                self._arena_wanted = False
                self._arena = Arena.allocate(self.torch, need, self._share_pool)
        sharing = Sharing(self._keep, self._share_pool, self._ipc_min_bytes, self._arena,
                          self._in_place_bytes) if self.transfer == "ipc" else None
        path = os.path.join(self.out_dir, name)
        with open(path, "wb") as fh:
            desc = encode(obj, fh, sharing=sharing)
        return {"file": name, "desc": desc}

    def run(self, cmd: dict) -> dict:
        """Correctness trials: for each seed, fresh inputs, one forward, outputs to a file.

        For candidates, every fresh allocation (torch.empty* from Python or C++) is filled with
        NaN / the largest integer during these trials (PyTorch's deterministic fill), so an output
        that is allocated but not fully written can never hold a stale, correct-looking result.
        """
        torch = self.torch
        results = []
        self._arena_slots = len(cmd["trials"])
        self._in_place_bytes = int(cmd.get("share_in_place_bytes", 0)) \
            if self.role == "reference" else 0
        poison = bool(cmd.get("poison"))
        if poison:
            torch.use_deterministic_algorithms(True, warn_only=True)
            torch.utils.deterministic.fill_uninitialized_memory = True
        try:
            return run_trials(self, cmd, results)
        finally:
            if poison:
                torch.use_deterministic_algorithms(False)

    def profile(self, cmd: dict) -> dict:
        """One more call, on the given trial's inputs, with its GPU kernels profiled (the
        library-share evidence of the strict policy). Not a judged call: the profiler
        synchronizes on exit, which would hide unjoined work. Sent after the timing, so that
        whatever the profiler leaves in the process cannot touch the timed calls."""
        torch = self.torch
        reply = {"ok": True}
        try:
            inputs = self.make_inputs(int(cmd["seed"]), cmd.get("dist", "task"))
            with torch.no_grad(), KernelProfile(torch, reply):
                self.model(*inputs)
        except BaseException as e:  # noqa: BLE001 - evidence missing, not a verdict
            reply["profile_error"] = one_line(e)
        return reply

    def _forward_logged(self, inputs):
        """One forward call with every dispatched ATen op recorded (runtime policy evidence).

        A dispatch mode sees ops called from Python and from C++ extensions alike; kernels that
        Triton or a CUDA extension launches directly do not pass through the dispatcher.
        """
        from torch.utils._python_dispatch import TorchDispatchMode
        ops: set[str] = set()

        class OpLog(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                ops.add(f"{func.namespace}::{func.overloadpacket.__name__}")
                return func(*args, **(kwargs or {}))

        with OpLog():
            out = self.model(*inputs)
        return out, sorted(ops)

    def time(self, cmd: dict) -> dict:
        """Time forward calls (kernelzero/eval/worker/timer.py: `time_calls`)."""
        try:
            return time_calls(self, cmd)
        except BaseException as e:  # noqa: BLE001
            return {"ok": False, "status": classify(e, "time"), "reason": one_line(e),
                    "detail": traceback.format_exc()[-2000:]}
