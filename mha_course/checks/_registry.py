"""The registry of the course's exercises, filled by the checker modules themselves.

An exercise lives in two places: its solution cell (``# exercise: <name>`` in its lesson's
solution notebook) and its checker module, which declares it with :func:`~._core.exercise`:
its name, lesson, reference and points. Everything else (``mha_course.exercises``, the
learner's progress, the grader, the nbgrader and otter exports, the authoring statistics) reads
this list.

This module holds data only and imports nothing of the course, so that anything may read it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Exercise", "REGISTRY", "register", "find"]


@dataclass(frozen=True)
class Exercise:
    name: str  # what the learner writes; also the cell marker "# exercise: <name>"
    lesson: str  # "01"
    check: Callable  # the Checker: check(candidate) prints ✅ or ⏳, or raises ExerciseFailure
    reference: object  # used in the learner's place until their answer passes
    points: int = 1  # in the grader and the nbgrader/otter exports

    @property
    def check_call(self) -> str:
        """``check_multi_head_attention(MultiHeadAttention)``: the lesson's check cell."""
        return f"{self.check.__name__}({self.name})"


REGISTRY: list[Exercise] = []
"""Every exercise, in the order their lessons' checker modules declare them."""


def register(entry: Exercise) -> None:
    """Add ``entry``; a name is registered once (a second declaration is a mistake in the code)."""
    if any(e.name == entry.name for e in REGISTRY):
        raise ValueError(f"{entry.name!r} is declared twice in mha_course.checks")
    REGISTRY.append(entry)


def find(name: str) -> Exercise | None:
    """The exercise called ``name``, or None."""
    return next((e for e in REGISTRY if e.name == name), None)
