"""Multi-turn repair: turn a verdict into the next user message of the conversation.

Covers: the feedback text for every verdict status (compile errors with the log tail, mismatch
summaries with trial counts and errors, timings and speedups for correct kernels), the rule for
which attempts deserve another turn, and the follow-up chat (previous prompt + the model's answer
+ the feedback). Not covered: sampling or judging (the `generate` command drives the loop).
"""
from __future__ import annotations

from dataclasses import dataclass

from kernelzero.coder.prompts import task_meta
from kernelzero.eval import Timing, Verdict
from kernelzero.tasks import Task


@dataclass
class RepairConfig:
    """How feedback is written.

    max_log_chars: most characters of compiler/runtime output quoted (the tail is kept).
    keep_history: keep every earlier turn in the chat; False keeps only the first prompt and the
        latest answer (shorter prompts for small context windows).
    """

    max_log_chars: int = 2000
    keep_history: bool = True

    def __post_init__(self) -> None:
        if self.max_log_chars < 0:
            raise ValueError("RepairConfig.max_log_chars must be >= 0")


def _ms(t: Timing | None) -> str:
    return "n/a" if t is None else f"{t.median_ms:.4g} ms (median of {t.n}, IQR {t.iqr_ms:.3g} ms)"


def _tail(text: str, limit: int) -> str:
    text = (text or "").strip()
    if not text or limit == 0:
        return ""
    return text if len(text) <= limit else "...\n" + text[-limit:]


def feedback_message(verdict: Verdict, config: RepairConfig | None = None) -> str:
    """What the model is told about its last answer, ending with what to do next."""
    config = config or RepairConfig()
    log = _tail(verdict.log_tail, config.max_log_chars)
    log_block = f"\n\nOutput:\n```\n{log}\n```" if log else ""
    s = verdict.status
    if s == "format_error":
        return (f"Your answer could not be used: {verdict.reason}. Answer with the complete "
                f"Python file, defining `class ModelNew`, in one ```python code block.")
    if s == "compile_error":
        return (f"Your code failed to compile: {verdict.reason}{log_block}\n\nFix the error and "
                f"answer with the complete corrected code.")
    if s == "runtime_error":
        return (f"Your code compiled but failed while running: {verdict.reason}{log_block}\n\n"
                f"Fix the error and answer with the complete corrected code.")
    if s == "timeout":
        return (f"Your code did not finish in time: {verdict.reason}. Look for infinite loops, "
                f"deadlocks or a far too small launch grid, and answer with the complete "
                f"corrected code.")
    if s == "rejected":
        return (f"Your code was rejected: {verdict.reason}. Follow the rules of the task (do the "
                f"work in your own kernels) and answer with the complete corrected code.")
    if s == "incorrect":
        errs = []
        if verdict.max_abs_err is not None:
            errs.append(f"max absolute error {verdict.max_abs_err:.3g}")
        if verdict.max_rel_err is not None:
            errs.append(f"max relative error {verdict.max_rel_err:.3g}")
        detail = f" ({', '.join(errs)})" if errs else ""
        return (f"Your code ran but its output is wrong: {verdict.reason}. It matched the "
                f"reference in {verdict.trials_passed} of {verdict.trials_run} trials with random "
                f"inputs{detail}.{log_block}\n\nCheck indexing, masking of the tails, strides, "
                f"dtypes and the reduction order, and answer with the complete corrected code.")
    if s == "correct":
        if verdict.runtime_ms is None:
            return ("Your code is correct. Make it faster if you can (fewer memory passes, "
                    "fusion, better tiling) and answer with the complete code.")
        lines = [f"Your code is correct. Runtime: {_ms(verdict.runtime_ms)}; the PyTorch "
                 f"reference: {_ms(verdict.ref_runtime_ms)}"]
        if verdict.speedup is not None:
            lines.append(f"speedup over eager PyTorch: {verdict.speedup:.3g}x")
        if verdict.speedup_compile is not None:
            lines.append(f"speedup over torch.compile: {verdict.speedup_compile:.3g}x")
        return ("; ".join(lines) + ". Make it faster (fewer memory passes, fusion, better "
                "tiling, vectorised loads) while keeping it correct, and answer with the complete "
                "code.")
    return f"Your code could not be judged: {verdict.reason}."  # invalid_task: not the model's


def needs_another_turn(verdict: Verdict) -> bool:
    """Failed attempts get another turn; correct ones only when a timing can guide them to be
    faster (on CPU nothing is timed, so a correct answer is final). A broken task ends it."""
    if verdict.status == "invalid_task":
        return False
    return not verdict.correct or verdict.runtime_ms is not None


def repair_prompt(chat: list[dict], completion: str, verdict: Verdict, task: Task, sample: int,
                  turn: int, config: RepairConfig | None = None) -> list[dict]:
    """The chat for turn `turn`: `chat` so far, the model's `completion`, then the feedback.

    The metadata on the new user message says which task, sample and turn it is (for replay)."""
    config = config or RepairConfig()
    if config.keep_history:
        base = [dict(m) for m in chat]
    else:  # the first prompt (up to its first user message) only
        first_user = next(i for i, m in enumerate(chat) if m["role"] == "user")
        base = [dict(m) for m in chat[:first_user + 1]]
    for m in base:  # only the newest user message carries the metadata
        m.pop("meta", None)
    return base + [
        {"role": "assistant", "content": completion},
        {"role": "user", "content": feedback_message(verdict, config),
         "meta": task_meta(task, sample=sample, turn=turn)},
    ]
