"""The exercises' reference answers, by the exercise's name: ``reference.MultiHeadAttention``.

Each is declared with its exercise, in the exercise's checker module (:mod:`mha_course.checks`):
the package's own implementation where it has the skeleton's signature, else a thin adapter over
it. The checkers compare a learner's code with these, and a notebook uses them in place of an
unfinished exercise, so that the rest of the lesson still runs.
"""

from __future__ import annotations


def __getattr__(name: str):
    """The reference of the exercise called ``name``."""
    from .checks import _registry

    exercise = _registry.find(name)
    if exercise is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return exercise.reference


def __dir__() -> list[str]:
    from .checks import REGISTRY

    return sorted(e.name for e in REGISTRY)
