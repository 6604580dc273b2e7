"""What the graded test cells of the nbgrader and otter exports call (``tools/exports.py``).

A lesson's check cell prints ⏳ and returns normally for an exercise that is not done, which a
grading tool would count as passed; and the cells after it rebind the exercise's name to the
course's reference when the learner's version does not pass. A graded cell therefore asks two
questions: is this name still the learner's own definition, and does it pass its checker?
"""

from __future__ import annotations

__all__ = ["is_yours"]


def is_yours(candidate, name: str) -> bool:
    """False when ``candidate`` is the course's reference for exercise ``name`` (or None): what
    ``yours_or_reference`` puts in place of an answer that does not pass."""
    from ..exercises import by_name

    return candidate is not None and candidate is not by_name(name).reference
