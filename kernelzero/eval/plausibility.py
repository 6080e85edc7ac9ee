"""Is a timing believable? Checks of a candidate's timing against physics and the judge's clock.

- `roofline_floor_ms`: the least time the task's inputs and outputs take to move at the GPU's
  memory bandwidth; a run under half of it is `rejected` (`implausible_speedup`).
- `unconfirmed_saving`: the saving claimed by the worker's CUDA events must show on the judge's
  own wall clock of the timed loop; if not, the verdict is flagged `timing_unconfirmed`.
"""
from __future__ import annotations

from kernelzero.eval.reference import ReferenceRun
from kernelzero.eval.verdict import Timing

# Peak memory bandwidth by GPU name (bytes/s, vendor datasheets); unknown GPUs get a generous bound.
PEAK_BANDWIDTH = {"H200": 4.8e12, "H100": 3.35e12, "H800": 3.35e12, "A100": 2.04e12,
                  "L40S": 0.864e12, "A10": 0.6e12, "4090": 1.0e12, "B200": 8.0e12}


def unconfirmed_saving(ref: ReferenceRun, cand: Timing, cand_wall_ms: float,
                       cand_calls: int | None = None) -> bool:
    """Cross-check of the worker's CUDA-event times against the judge's own clock.

    Both timed loops (reference and candidate) do the same per-call work besides the module
    (fresh inputs, L2 flush), so a saving per call that the CUDA events claim must roughly show
    in the wall clock per call too. A claimed saving the wall clock does not show is
    unconfirmed (a flag, not a rejection: the judge's wall clock of a timing also holds its
    fixed costs, warm-up and calibration, spread over a number of calls that differs between
    the two loops). Only a saving of more than 5% is checked: a candidate that claims none has
    nothing to confirm (on the H200 the unchecked rule flagged 40% of honest verdicts, slower
    ones included). The margin (a quarter of the reference time plus 0.1 ms per call) absorbs
    host noise.
    """
    if not ref.timing or not ref.time_wall_ms_per_call or not cand.n:
        return False
    claimed = ref.timing.median_ms - cand.median_ms
    if claimed <= 0.05 * ref.timing.median_ms:
        return False
    seen = ref.time_wall_ms_per_call - cand_wall_ms / (cand_calls or cand.n)
    return claimed - seen > 0.25 * ref.timing.median_ms + 0.1


def roofline_floor_ms(ref: ReferenceRun, gpu: str | None) -> float | None:
    """Least time to read every input once and write every output once, in milliseconds."""
    if not ref.io_bytes:
        return None
    bw = next((v for k, v in PEAK_BANDWIDTH.items() if gpu and k in gpu), 10e12)
    return ref.io_bytes / bw * 1e3
