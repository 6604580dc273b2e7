"""Exercise results for a learner and for a room: which answers pass their checks.

* :func:`check_all` (in a notebook) and ``python -m mha_course progress`` (in a terminal): your
  own exercises, each run through its checker: ✅ / ❌ / ⏳, the failing case in one line.
* ``python -m mha_course grade PATH... --csv FILE``: the instructor's table, one row per learner
  and exercise (``learner, exercise, status, cause``), from learners' ``my_work/`` folders or
  submitted exercise notebooks.

A learner's code is never run inside the calling process: each learner's answers run in a
subprocess of their own (:mod:`mha_course.grading.worker`), one exercise after another, with a
time limit per exercise; a crash, an infinite loop or a ``sys.exit`` costs only that learner's
row for that exercise.

:func:`is_yours` is for the graded cells of the nbgrader and otter exports (``tools/exports.py``).
"""

__all__ = [
    "Row",
    "Submission",
    "check_all",
    "collect_submissions",
    "grade_submissions",
    "is_yours",
    "progress",
]

_HOMES = {
    "Row": "runner",
    "grade_submissions": "runner",
    "Submission": "answers",
    "collect_submissions": "answers",
    "check_all": "learner",
    "progress": "learner",
    "is_yours": "cells",
}


def __getattr__(name: str):
    """Import on first use: the command line reads its options before torch is imported."""
    if name not in _HOMES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(f".{_HOMES[name]}", __name__), name)
