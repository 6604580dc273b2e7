"""The learner's own work: the answers saved from exercise cells, and every earlier version of them.

An exercise cell starts with ``# exercise: <name>`` (after the ``# %load <file>`` line that
IPython's ``%load`` puts first, when the answer was brought back that way). When it runs, its code
is saved to ``my_work/<name>.py`` beside the notebook, where later lessons load it. Three rules
keep that work safe:

* a cell that still holds the skeleton's ``raise NotImplementedError(...)`` line is not an answer,
  so it is never saved (re-running a lesson you solved earlier, or a fresh copy of it, cannot
  replace your answer with the empty skeleton);
* before a saved answer is replaced by a *different* one, the old one is copied to
  ``my_work/.history/<name>.<date>-<time>.py``, so no version is ever lost;
* ``MHA_COURSE_WORK_DIR`` moves the whole folder elsewhere: the course's tests run the notebooks
  against a private folder of their own and never read or write yours.

``start(work_dir=...)`` (:func:`choose_work_dir`) moves it too, e.g. onto Google Drive on Colab,
where every notebook runs on a machine of its own; a folder the environment names still wins.
"""

from __future__ import annotations

import os
import re
import time
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "TODO",
    "EXERCISE_MARKER",
    "work_dir",
    "choose_work_dir",
    "exercise_name",
    "answer_source",
    "is_answer",
    "save_answer",
    "keep_earlier_version",
    "history",
    "ExerciseRun",
    "last_run",
    "record_run",
]

# The line that stands where an answer goes in a generated skeleton (mha_course.lessons); a cell
# that still holds it is not an answer yet.
TODO = 'raise NotImplementedError("Exercise: write this part, then run the check below.")'
EXERCISE_MARKER = re.compile(r"^\s*# exercise: (\w+)")
# What ``%load my_work/<name>.py`` writes above the file it brings into a cell.
_LOAD_LINES = re.compile(r"\A(?:[ \t]*# %load [^\n]*(?:\n|\Z))+")
WORK_DIR_VARIABLE = "MHA_COURSE_WORK_DIR"


def work_dir() -> Path:
    """Where answers are saved: ``$MHA_COURSE_WORK_DIR`` if set (by the tests, or by
    :func:`choose_work_dir`), else ``my_work`` in the current folder (a notebook's kernel runs in
    the notebook's folder)."""
    return Path(os.environ.get(WORK_DIR_VARIABLE) or "my_work")


_CHOSEN: list[str] = []  # the folder choose_work_dir last put in the environment


def choose_work_dir(directory: Path | str) -> Path:
    """Save and load answers in ``directory`` from now on (in this kernel and in the commands it
    starts, such as ``!python -m mha_course history``); returns the folder in use.

    A folder the environment already names (``MHA_COURSE_WORK_DIR``, set by the course's tests
    for a private folder of their own) wins: then nothing changes."""
    current = os.environ.get(WORK_DIR_VARIABLE)
    if current and current not in _CHOSEN:
        return Path(current)
    folder = Path(directory).expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    os.environ[WORK_DIR_VARIABLE] = str(folder)
    _CHOSEN[:] = [str(folder)]
    return folder


def answer_source(source: str) -> str:
    """A cell's code without the ``# %load <file>`` line(s) that ``%load`` puts first: what is
    saved, so a restored answer is saved as it was written."""
    return _LOAD_LINES.sub("", source, count=1)


def exercise_name(source: str) -> str | None:
    """``"# exercise: softmax\\n..."`` -> ``"softmax"`` (also below a ``# %load ...`` line);
    None for any other cell."""
    match = EXERCISE_MARKER.match(answer_source(source))
    return match.group(1) if match else None


def is_answer(source: str) -> bool:
    """An exercise cell the learner has filled in: it no longer holds the skeleton's TODO line."""
    return exercise_name(source) is not None and TODO not in source


def keep_earlier_version(path: Path, history_dir: Path) -> Path:
    """Copy ``path`` into ``history_dir`` as ``<stem>.<date>-<time><suffix>``; return the copy."""
    history_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%d-%H%M%S")
    copy = history_dir / f"{path.stem}.{stamp}{path.suffix}"
    n = 1
    while copy.exists():  # two versions in the same second: number them
        n += 1
        copy = history_dir / f"{path.stem}.{stamp}-{n}{path.suffix}"
    copy.write_bytes(path.read_bytes())
    return copy


def save_answer(source: str, directory: Path | None = None) -> Path | None:
    """Save an answered exercise cell to ``<directory>/<name>.py``; None when the cell is not an
    answer (not an exercise cell, or still the skeleton). A different earlier answer is kept in
    ``<directory>/.history/`` first."""
    if not is_answer(source):
        return None
    directory = work_dir() if directory is None else Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{exercise_name(source)}.py"
    source = answer_source(source)
    text = source if source.endswith("\n") else source + "\n"
    if path.exists():
        if path.read_text(encoding="utf-8") == text:
            return path
        keep_earlier_version(path, directory / ".history")
    path.write_text(text, encoding="utf-8")
    return path


def history(name: str | None = None, directory: Path | None = None) -> list[Path]:
    """The earlier versions kept in ``my_work/.history/``, oldest first (of one exercise, or all)."""
    folder = (work_dir() if directory is None else Path(directory)) / ".history"
    if not folder.is_dir():
        return []
    versions = sorted(folder.iterdir(), key=lambda p: (p.stat().st_mtime, p.name))
    return [p for p in versions if name is None or p.name.split(".")[0] == name]


# ---------------------------------------------------------------- the last run of each exercise cell


@dataclass(frozen=True)
class ExerciseRun:
    """How the last run of an exercise cell went (recorded by the notebook's cell hook)."""

    name: str
    succeeded: bool
    error: str | None = None  # e.g. "SyntaxError: invalid syntax (line 12)"


_LAST_RUNS: dict[str, ExerciseRun] = {}


def record_run(run: ExerciseRun) -> None:
    _LAST_RUNS[run.name] = run


def last_run(name: str) -> ExerciseRun | None:
    """The last run of the ``# exercise: <name>`` cell in this kernel, or None if it never ran:
    a check uses it to say that the definition it was given is stale."""
    return _LAST_RUNS.get(name)
