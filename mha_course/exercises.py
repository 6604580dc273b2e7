"""The course's exercises, in lesson order: what the learner defines, how it is checked, and
the reference used in its place until the learner's version passes.

This registry is also the one place that decides whether an answer is used: :func:`evaluate`
runs an answer through its exercise's checker and returns a :class:`Verdict`, which both
:func:`yours_or_reference` (in the lesson) and ``notebook.load_your_work`` (in later lessons)
print. The names here are what the learner writes, and the checkers' messages use them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from . import checks, reference
from .checks._failure import CellDidNotRun, ExerciseFailure, NotDoneYet, error_line

__all__ = [
    "Exercise",
    "EXERCISES",
    "by_name",
    "by_check",
    "yours_or_reference",
    "Verdict",
    "evaluate",
    "evaluate_file",
]


@dataclass(frozen=True)
class Exercise:
    name: str  # the function or class the learner writes; also the cell marker "# exercise: <name>"
    lesson: str  # "01"
    check: Callable[..., bool]
    reference: object

    @property
    def check_call(self) -> str:
        """``check_multi_head_attention(MultiHeadAttention)``: the check cell of the lesson."""
        return f"{getattr(self.check, '__name__', 'check')}({self.name})"


# (lesson, what the learner writes, its checker), in lesson order. The reference used in its
# place until it passes is the definition of the same name in mha_course.reference.
_TABLE = [
    ("00", "softmax", checks.check_softmax),
    ("00", "soft_lookup", checks.check_soft_lookup),
    ("01", "attention_scores", checks.check_attention_scores),
    ("01", "may_attend_mask", checks.check_may_attend_mask),
    ("01", "scaled_dot_product_attention", checks.check_scaled_dot_product_attention),
    ("01", "SelfAttention", checks.check_self_attention),
    ("02", "MultiHeadAttention", checks.check_multi_head_attention),
    ("02", "load_torch_weights", checks.check_load_torch_weights),
    ("02", "job_scores", checks.check_job_scores),
    ("03", "LayerNorm", checks.check_layer_norm),
    ("03", "ResidualBlock", checks.check_residual_block),
    ("03", "gradient_norms", checks.check_gradient_norms),
    ("03", "positional_encoding", checks.check_positional_encoding),
    ("04", "EncoderLayer", checks.check_encoder_layer),
    ("04", "EncoderModel", checks.check_encoder_model),
    ("04", "train_step", checks.check_train_step),
    ("05", "load_layer", checks.check_load_layer),
    ("05", "embed_sentences", checks.check_embed_sentences),
    ("05", "head_ablation", checks.check_head_ablation),
    ("06", "attention_cost", checks.check_attention_cost),
    ("06", "attention_in_blocks", checks.check_attention_in_blocks),
    ("07", "DecoderBlock", checks.check_decoder_block),
    ("07", "CharLM", checks.check_char_lm),
    ("07", "sample_next", checks.check_sample_next),
    ("07", "CachedAttention", checks.check_cached_attention),
    ("07", "DecoderLayer", checks.check_decoder_layer),
    ("08", "rotary", checks.check_rotary),
    ("08", "rope_attention", checks.check_rope_attention),
    ("08", "alibi_bias", checks.check_alibi_bias),
    ("08", "grouped_query_attention", checks.check_grouped_query_attention),
    ("08", "sliding_window_attention", checks.check_sliding_window_attention),
]

EXERCISES: list[Exercise] = [
    Exercise(name, lesson, check, getattr(reference, name)) for lesson, name, check in _TABLE
]


def by_name(name: str) -> Exercise:
    for exercise in EXERCISES:
        if exercise.name == name:
            return exercise
    known = ", ".join(e.name for e in EXERCISES)
    raise ValueError(f"no exercise named {name!r}; the exercises are: {known}")


def by_check(check) -> Exercise | None:
    """The exercise a checker checks (None for a checker that is not registered)."""
    return next((e for e in EXERCISES if e.check is check), None)


# ---------------------------------------------------------------- verdicts


@dataclass(frozen=True)
class Verdict:
    """Whether an answer is used, and if not, why, in one short line.

    ``status``: "yours" (it passes), "not done yet", "fails its check", "raises <Error>" (it
    crashed, on loading or in the check), "did not run" (its cell's last run failed), "not found"
    (no saved answer), or "no <name> in <file>".
    """

    exercise: Exercise
    status: str
    reason: str = ""  # the case and the likely cause, or the error and the line that raised it

    @property
    def passed(self) -> bool:
        return self.status == "yours"

    @property
    def next_step(self) -> str:
        """How to see the whole message."""
        lesson = f" in lesson {self.exercise.lesson}" if self.exercise.lesson else ""
        return f"Full message: run {self.exercise.check_call}{lesson}."


def _exercise_of(check_or_exercise) -> Exercise:
    if isinstance(check_or_exercise, Exercise):
        return check_or_exercise
    found = by_check(check_or_exercise)
    name = getattr(check_or_exercise, "exercise", "your code")
    return found or Exercise(name, "", check_or_exercise, None)


def evaluate(check_or_exercise, candidate, *, cell: bool = True) -> Verdict:
    """Run ``candidate`` through its exercise's checker, quietly. ``cell``: the candidate is what
    the notebook's exercise cell defined (so a failed last run of that cell makes it stale)."""
    exercise = _exercise_of(check_or_exercise)
    if candidate is None:
        return Verdict(exercise, "not done yet")
    try:
        exercise.check.run(candidate, cell=cell)
    except NotDoneYet as not_done:  # its message, if any, names the exercise it waits for
        return Verdict(exercise, "not done yet", str(not_done))
    except CellDidNotRun as failure:
        return Verdict(exercise, "did not run", str(failure).split("\n")[0])
    except ExerciseFailure as failure:
        if failure.raised is not None:
            return Verdict(exercise, f"raises {type(failure.raised).__name__}", failure.short())
        return Verdict(exercise, "fails its check", failure.short())
    return Verdict(exercise, "yours")


def evaluate_file(exercise: Exercise, path: Path, namespace: dict) -> tuple[Verdict, object]:
    """Run a saved answer in ``namespace``, then :func:`evaluate` what it defines. Returns the
    verdict and the answer (None when there is none)."""
    if not path.exists():
        return Verdict(exercise, "not found"), None
    try:
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    except Exception as error:  # a broken answer is reported, never fatal
        return Verdict(exercise, f"raises {type(error).__name__}", error_line(error)), None
    candidate = namespace.get(exercise.name)
    if candidate is None:
        return Verdict(exercise, f"no {exercise.name} in {path.name}"), None
    return evaluate(exercise, candidate, cell=False), candidate


# ---------------------------------------------------------------- in a lesson


def yours_or_reference(check, yours, reference):
    """Return ``yours`` when it passes ``check``, else ``reference``, and say which one is used
    (and, when it is the reference, why in one line, and what to do).

    Cells after an exercise call this, so an unfinished exercise does not break the rest of the
    lesson: they run on the course's reference until the learner's version passes.
    """
    verdict = evaluate(check, yours)
    name, check_name = verdict.exercise.name, getattr(check, "__name__", "its check")
    if verdict.passed:
        print(f"Using your {name} (it passes {check_name}).")
        return yours
    problem, then = {
        "not done yet": (
            "is not done yet",
            "Finish the exercise and re-run this cell to use yours.",
        ),
        "did not run": (
            "is an earlier definition: its exercise cell did not run",
            "Fix the cell, run it, then re-run this cell.",
        ),
    }.get(
        verdict.status,
        (
            f"does not pass {check_name} yet",
            "Run the check cell above for the full message; fix your answer, then re-run this cell.",
        ),
    )
    print(
        f"Your {name} {problem}, so the cells below use the course's reference "
        f"(mha_course.reference). {then}"
    )
    if verdict.reason:
        print(f"  ({verdict.reason})")
    return reference
