"""Your progress: every exercise of the course, each saved answer run through its checker.

``check_all()`` in a notebook, ``python -m mha_course progress`` in a terminal. The verdicts
are the ones the lessons print (the same checkers), from the answers saved in ``my_work/``; the
answers run in a subprocess, so an answer that never ends only costs its own line.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..work import WORK_DIR_VARIABLE
from .answers import Submission, read_folder
from .runner import Row, grade_submission

__all__ = ["check_all", "progress", "default_work_dir", "format_progress"]

MARKS = {"pass": "✅", "fail": "❌", "error": "❌", "timeout": "❌", "not_done": "⏳"}


def default_work_dir() -> Path:
    """``$MHA_COURSE_WORK_DIR``, else ``my_work`` here (a notebook runs in notebooks/), else the
    course's ``notebooks/my_work``."""
    if os.environ.get(WORK_DIR_VARIABLE):
        return Path(os.environ[WORK_DIR_VARIABLE])
    if Path("my_work").is_dir():
        return Path("my_work")
    from ..lessons import course_directory

    try:
        return course_directory() / "notebooks" / "my_work"
    except FileNotFoundError:
        return Path("my_work")


def _why(row: Row) -> str:
    if row.status == "not_done":
        return "not done yet" if row.cause == "no answer saved" else f"not done yet ({row.cause})"
    if row.status == "error":
        return f"does not run: {row.cause}"
    return row.cause


def format_progress(rows: list[Row], work_dir: Path) -> str:
    lines = [f"Your exercises, from the answers saved in {work_dir}/:"]
    lesson = None
    for row in rows:
        label = f" {row.lesson} " if row.lesson != lesson else "    "
        lesson = row.lesson
        why = _why(row) if row.status != "pass" else ""
        lines.append(f"{label} {MARKS[row.status]} {row.exercise:<30} {why}".rstrip())
    done = sum(row.status == "pass" for row in rows)
    lines.append(f"{done} of {len(rows)} exercises done")
    return "\n".join(lines)


def progress(work_dir: Path | str | None = None, timeout: float = 60.0) -> list[Row]:
    """Grade the answers in ``work_dir`` (default: :func:`default_work_dir`) and print the list."""
    folder = Path(work_dir) if work_dir is not None else default_work_dir()
    answers = read_folder(folder) if folder.is_dir() else {}
    rows = grade_submission(Submission("you", answers), timeout=timeout)
    print(format_progress(rows, folder))
    return rows


def check_all(work_dir: Path | str | None = None, timeout: float = 60.0) -> None:
    """In a notebook: every exercise of the course, ✅ / ❌ / ⏳, from your saved answers."""
    progress(work_dir, timeout)
