"""Where a learner's answers are: a ``my_work/`` folder of saved exercise cells, or the exercise
cells of their notebooks. Each answer is the source of one ``# exercise: <name>`` cell."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ..work import TODO, exercise_name

__all__ = ["Submission", "read_folder", "read_notebook", "collect_submissions", "is_skeleton"]

LESSON_NOTEBOOK = re.compile(r"^\d\d_.*\.ipynb$")


@dataclass
class Submission:
    """One learner's answers, ``{exercise name: cell source}``; a skeleton counts as no answer."""

    learner: str
    answers: dict[str, str] = field(default_factory=dict)
    sources: list[Path] = field(default_factory=list)  # where they came from

    def add(self, answers: dict[str, str], source: Path, *, override: bool) -> None:
        for name, code in answers.items():
            if override or name not in self.answers or is_skeleton(self.answers[name]):
                self.answers[name] = code
        self.sources.append(source)


def is_skeleton(source: str) -> bool:
    """Still the generated skeleton: it holds the ``raise NotImplementedError(...)`` line."""
    return TODO in source


def read_notebook(path: Path) -> dict[str, str]:
    """The exercise cells of a notebook, ``{name: source}`` (the last cell of a name wins)."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    answers = {}
    for cell in nb.cells:
        if cell.cell_type == "code":
            name = exercise_name(cell.source)
            if name is not None:
                answers[name] = cell.source
    return answers


def read_folder(folder: Path) -> dict[str, str]:
    """The answers saved in a ``my_work/`` folder: ``<name>.py`` files (not ``.history/``)."""
    answers = {}
    for path in sorted(folder.glob("*.py")):
        source = path.read_text(encoding="utf-8", errors="replace")
        answers[exercise_name(source) or path.stem] = source
    return answers


def _work_folders(folder: Path) -> list[Path]:
    candidates = [folder, folder / "my_work", folder / "notebooks" / "my_work"]
    return [c for c in candidates if c.is_dir() and any(c.glob("*.py"))]


SKIPPED = {"solutions", "my_work", "__pycache__", "node_modules", "site-packages"}


def _notebooks(folder: Path, depth: int = 3) -> list[Path]:
    """The lesson notebooks in ``folder`` and its subfolders (``notebooks/``, or nbgrader's
    ``<assignment>/``), ``depth`` levels down at most; never the course's solutions, a backup
    in ``my_work/.history/`` or a checkpoint."""
    found = sorted(p for p in folder.glob("*.ipynb") if LESSON_NOTEBOOK.match(p.name))
    if depth > 0:
        for sub in sorted(p for p in folder.iterdir() if p.is_dir()):
            if sub.name not in SKIPPED and not sub.name.startswith("."):
                found += _notebooks(sub, depth - 1)
    return found


def learner_name(path: Path) -> str:
    """Whose work ``path`` is: a folder's name, going up past ``my_work``, ``notebooks`` and
    nbgrader's assignment folder (``ada/01_self_attention/01_self_attention.ipynb`` is ada's); a
    notebook that is not a lesson's is named by its file (``ada.ipynb``)."""
    path = path.resolve()
    if path.is_file() and not LESSON_NOTEBOOK.match(path.name):
        return path.stem
    folder = path if path.is_dir() else path.parent
    while folder.parent != folder and (
        folder.name in ("my_work", "notebooks") or (path.is_file() and folder.name == path.stem)
    ):
        folder = folder.parent
    return folder.name


def collect_submissions(paths: list[Path]) -> list[Submission]:
    """One :class:`Submission` per learner, from ``paths`` (folders or notebooks), in the order
    given; paths that name the same learner are merged. Saved answers in ``my_work/`` (what last
    ran) win over notebook cells. Raises FileNotFoundError for a path that does not exist."""
    by_learner: dict[str, Submission] = {}
    for path in paths:
        path = Path(path)
        if not path.exists():
            raise FileNotFoundError(f"no such file or folder: {path}")
        name = learner_name(path)
        submission = by_learner.setdefault(name, Submission(name))
        if path.is_file():
            submission.add(read_notebook(path), path, override=False)
            continue
        for notebook in _notebooks(path):
            submission.add(read_notebook(notebook), notebook, override=False)
        for folder in _work_folders(path):
            submission.add(read_folder(folder), folder, override=True)
        if not submission.sources:
            submission.sources.append(path)  # an empty folder: graded, every exercise not done
    return list(by_learner.values())
