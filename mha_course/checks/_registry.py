"""The registry of the course's exercises, filled by the checker modules' declarations
(:func:`~._core.exercise`) and read by everything else: ``mha_course.exercises``, progress, the
grader, the exports, the statistics. Data only: it imports nothing of the course."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


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


REGISTRY: list[Exercise] = []  # every exercise, in the order the lessons' modules declare them


def register(entry: Exercise) -> None:
    """Add ``entry``; a name is registered once (a second declaration is a mistake in the code)."""
    if any(e.name == entry.name for e in REGISTRY):
        raise ValueError(f"{entry.name!r} is declared twice in mha_course.checks")
    REGISTRY.append(entry)


def find(name: str) -> Exercise | None:
    """The exercise called ``name``, or None."""
    return next((e for e in REGISTRY if e.name == name), None)
