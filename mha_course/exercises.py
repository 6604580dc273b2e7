"""The course's exercises, in lesson order: the registry's public face.

Each exercise is declared by its checker module (:mod:`mha_course.checks`): what the learner
defines, its lesson, the reference used in its place until the learner's version passes, and its
points. This module reads that registry; it is also the one place that decides whether an answer
is used: :func:`evaluate` runs an answer through its exercise's checker and returns a
:class:`Verdict`, which both :func:`yours_or_reference` (in the lesson) and
``notebook.load_your_work`` (in later lessons) print.
"""

from __future__ import annotations

from .checks import REGISTRY
from .checks._registry import Exercise
from .checks._verdict import Verdict, evaluate, evaluate_file, exercise_of

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

EXERCISES: list[Exercise] = REGISTRY
"""Every exercise, in lesson order (the checker modules declare them)."""


def by_name(name: str) -> Exercise:
    """The exercise called ``name``."""
    for exercise in EXERCISES:
        if exercise.name == name:
            return exercise
    known = ", ".join(e.name for e in EXERCISES)
    raise ValueError(f"no exercise named {name!r}; the exercises are: {known}")


def by_check(check) -> Exercise | None:
    """The exercise a checker checks (None for a checker that is not registered)."""
    return next((e for e in EXERCISES if e.check is check), None)


def yours_or_reference(check, yours, reference=None):
    """Return ``yours`` when it passes ``check``, else the exercise's reference (or
    ``reference``, when given), and say which one is used (and, when it is the reference, why in
    one line, and what to do).

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
    return exercise_of(check).reference if reference is None else reference
