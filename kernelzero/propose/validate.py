"""The validation check every proposed module goes through (composed or model-written).

In order, stopping at the first stage that rejects (so cheap checks spare sandbox runs):
1. static: the source parses and has `Model`, `get_inputs`, `get_init_inputs` (`parse`,
   `format`); its classes and helpers use every API of the set (`api_missing`) and no other
   compute API (`api_extra`; glue such as view/reshape/flatten is allowed; see catalog/apimap.py);
   it is not a duplicate of a module seen before, by canonical AST form (`duplicate`);
2. sandbox + audit (kernelzero/eval/audit.py: `probe_reference` in the evaluator's sandbox on
   the evaluator's device; `validate_many` bundles several modules into one sandbox start): it loads and runs (`sandbox_error`), outputs are finite
   (`non_finite`), deterministic across two calls (`nondeterministic`), and not degenerate
   (`zeros`, `constant`, `identity`, `seed_independent`, `ignores_input`, `ignores_weights`,
   `small_output`, and `weights_constant` when `strict_weights`);
3. budget: inputs + outputs (and, where the evaluator times, one forward's inputs plus its peak
   allocations) within the memory cap (`memory`); on a timing device, the original module's
   measured eager runtime within the runtime band (`runtime`). On CPU nothing is timed and the
   band is not checked: `figures["runtime_ms"]` stays None rather than an invented number.
Every rejection is a `Rejection(code, message)`; a result lists all rejections of its stage.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from kernelzero.catalog.apimap import scan_source
from kernelzero.catalog.cost import get_target
from kernelzero.propose.dedup import Deduper, canonical_hash
from kernelzero.tasks.task import Task, static_check_task, syntax_error_text

STATIC_CODES = ("parse", "format", "api_missing", "api_extra", "duplicate")
BUDGET_CODES = ("memory", "runtime")


@dataclass
class ValidationConfig:
    """Knobs of the validation check.

    target: machine model (catalog/cost.py) whose memory cap and runtime range apply.
    memory_cap_bytes: override of the target's memory cap.
    runtime_band_ms: (low, high) accepted measured runtime; None derives it: low is
        `min_runtime_ms` (below it launch overhead dominates; scalar losses are kept small on
        purpose, see composer.LOSS_NUMEL_CAP), high the top of the target's range times `band`.
        Checked only where the evaluator times.
    min_runtime_ms: the derived band's low end.
    band: widening factor for the derived runtime band's high end.
    strict_weights: reject modules whose output does not depend on the init seed.
    seeds: the two input seeds of the audit probe.
    """

    target: str = "h100"
    memory_cap_bytes: float | None = None
    runtime_band_ms: tuple[float, float] | None = None
    min_runtime_ms: float = 0.02
    band: float = 3.0
    strict_weights: bool = False
    seeds: tuple[int, int] = (1234, 5678)

    def __post_init__(self) -> None:
        get_target(self.target)
        if self.runtime_band_ms is not None and not 0 <= self.runtime_band_ms[0] < self.runtime_band_ms[1]:
            raise ValueError("ValidationConfig.runtime_band_ms must be (low, high) with 0 <= low < high")
        if self.band < 1 or len(set(self.seeds)) != 2:
            raise ValueError("ValidationConfig needs band >= 1 and two different seeds")

    def band_ms(self) -> tuple[float, float]:
        if self.runtime_band_ms is not None:
            return self.runtime_band_ms
        return self.min_runtime_ms, get_target(self.target).target_ms[1] * self.band


@dataclass
class Rejection:
    code: str
    message: str

    def __str__(self) -> str:
        return f"{self.code}: {self.message}"


@dataclass
class ValidationResult:
    ok: bool
    rejections: list[Rejection] = field(default_factory=list)
    figures: dict = field(default_factory=dict)
    canonical_hash: str | None = None

    @property
    def reasons(self) -> list[str]:
        return [str(r) for r in self.rejections]

    @property
    def codes(self) -> list[str]:
        return [r.code for r in self.rejections]


def static_rejections(source: str, apis: list[str]) -> list[Rejection]:
    """Stage 1 without the duplicate check: parse, format, API use."""
    try:
        compile(source, "<proposed>", "exec", dont_inherit=True)
    except SyntaxError as e:
        return [Rejection("parse", f"does not parse: {syntax_error_text(e)}")]
    problem = static_check_task(source)
    if problem:
        return [Rejection("format", problem)]
    use = scan_source(source)
    out = []
    missing = sorted(set(apis) - use.apis)
    extra = sorted(use.apis - set(apis))
    if missing:
        out.append(Rejection("api_missing", "does not use " + ", ".join(missing)))
    if extra or use.unknown:
        out.append(Rejection("api_extra", "uses compute APIs outside the set: "
                             + ", ".join(extra + sorted(use.unknown))))
    return out


class Validator:
    """Runs the check; remembers accepted modules' canonical hashes for the duplicate check."""

    def __init__(self, evaluator, config: ValidationConfig | None = None,
                 deduper: Deduper | None = None):
        self.evaluator = evaluator
        self.config = config or ValidationConfig()
        self.deduper = deduper or Deduper()

    def validate(self, source: str, apis: list[str], name: str = "proposed",
                 remember: bool = True) -> ValidationResult:
        return self.validate_many([(source, apis, name)], remember=remember)[0]

    def validate_many(self, items: list[tuple[str, list[str], str]],
                      remember: bool = True) -> list[ValidationResult]:
        """Validate (source, apis, name) items; the sandbox stage runs them as one bundle
        (kernelzero.eval.audit.audit_many: one sandbox start for all). Results keep the order."""
        from kernelzero.eval.audit import audit_many

        results: list[ValidationResult | None] = [None] * len(items)
        pending: list[int] = []
        for i, (source, apis, _) in enumerate(items):
            rej = static_rejections(source, apis)
            chash = None if rej else canonical_hash(source)
            if not rej and chash in self.deduper.hashes:
                rej = [Rejection("duplicate", "a module with the same canonical form was accepted before")]
            if rej:
                results[i] = ValidationResult(False, rej, canonical_hash=chash)
            else:
                results[i] = ValidationResult(True, canonical_hash=chash)
                pending.append(i)
        tasks = [Task.from_source(items[i][0], name=items[i][2]) for i in pending]
        audits = audit_many(self.evaluator, tasks, seeds=self.config.seeds,
                            strict_weights=self.config.strict_weights)
        for i, task, audit in zip(pending, tasks, audits):
            res = self._after_audit(task, audit)
            res.canonical_hash = results[i].canonical_hash
            results[i] = res
            if res.ok and remember:
                self.deduper.hashes.add(res.canonical_hash)
        return results  # type: ignore[return-value]

    def run_checks(self, task: Task) -> ValidationResult:
        """Stages 2 and 3 (sandbox, audit, budget) for a task that passed the static stage."""
        from kernelzero.eval.audit import audit_task

        cfg = self.config
        return self._after_audit(task, audit_task(self.evaluator, task, seeds=cfg.seeds,
                                                  strict_weights=cfg.strict_weights))

    def _after_audit(self, task: Task, audit) -> ValidationResult:
        cfg = self.config
        d = audit.details
        figures = {k: d[k] for k in ("output_shapes", "output_dtypes", "input_shapes", "input_bytes",
                                     "output_bytes", "peak_mem_bytes", "has_parameters") if k in d}
        figures["audit_warnings"] = d.get("warnings", [])
        figures["runtime_ms"] = None
        if not audit.ok:
            rej = []
            for line in audit.reasons:
                code, _, msg = line.partition(": ")
                rej.append(Rejection("sandbox_error" if code == "probe_failed" else code, msg))
            return ValidationResult(False, rej, figures)
        # Memory is one forward's footprint: inputs + outputs, or on a GPU the inputs plus the
        # peak of what the forward allocates (measured in the timed reference run). Not the
        # audit's peak: its wrapped module runs several variants and keeps all their outputs
        # (2-4x a single forward on the device), nor the harness's own copies and flush buffer.
        figures["audit_peak_mem_bytes"] = figures.pop("peak_mem_bytes", None)
        cap = cfg.memory_cap_bytes or get_target(cfg.target).memory_cap_bytes
        used = d.get("input_bytes", 0) + d.get("output_bytes", 0)
        runtime = None
        if getattr(self.evaluator.config, "timed", False):
            probe = self.evaluator.probe_reference(task, seeds=[cfg.seeds[0]], time=True)
            if not probe.ok or probe.runtime_ms is None:
                return ValidationResult(False, [Rejection("sandbox_error", probe.reason or
                                                          "the timed run gave no timing")], figures)
            runtime = figures["runtime_ms"] = probe.runtime_ms.median_ms
            if probe.peak_mem_bytes:
                figures["peak_mem_bytes"] = probe.peak_mem_bytes
            if probe.forward_peak_bytes:
                figures["forward_peak_bytes"] = probe.forward_peak_bytes
                used = max(used, probe.forward_peak_bytes)
        figures["memory_bytes"] = used
        if used > cap:
            return ValidationResult(False, [Rejection("memory", f"{used / 2**20:.1f} MiB exceeds the "
                                                      f"cap of {cap / 2**20:.1f} MiB")], figures)
        if runtime is not None:
            lo, hi = cfg.band_ms()
            if not lo <= runtime <= hi:
                return ValidationResult(False, [Rejection("runtime", f"measured {runtime:.3g} ms is "
                                                          f"outside the band [{lo:.3g}, {hi:.3g}] ms")],
                                        figures)
        return ValidationResult(True, [], figures)
