"""The lessons as files: each learner's notebook is generated from one source, its solution.

The sources are the solution notebooks in ``notebooks/solutions/``. Inside a code cell, the lines
between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` are the answer. The exercise notebook in
``notebooks/`` is the same notebook with every such block replaced by its comment lines (the
skeleton's step-by-step guide) and a ``raise NotImplementedError``. Markdown cells tagged
``solution-only`` are dropped from the exercise version.

This module is what a learner needs at run time (``python -m mha_course reset 01`` gives a fresh
lesson, keeping the old one); building, executing and checking the notebooks is the course
authors' job, in ``tools/authoring.py``.
"""

from __future__ import annotations

import copy
from pathlib import Path

from .work import TODO, keep_earlier_version

__all__ = [
    "BEGIN",
    "END",
    "TODO",
    "exercise_source",
    "map_solution_blocks",
    "make_exercise_notebook",
    "course_directory",
    "solution_paths",
    "exercise_path",
    "reset",
]

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"

EXERCISE_NOTE = (
    "> **Exercise version.** Write your answers in the cells that start with `# exercise:`, where it "
    "says `raise NotImplementedError`, then run the check cell below each one. Stuck? Open the hints "
    "first; the worked answers are in [`solutions/{name}`](solutions/{name})."
)


def _skeleton(block: list[str], indent: str) -> list[str]:
    """The solution block's comment lines, then ``raise NotImplementedError``. A comment that sat
    deeper (inside a loop of the solution) keeps its depth inside the comment, so the skeleton
    still shows the structure and stays valid, formatter-stable code."""
    comments = []
    for line in block:
        text = line.lstrip()
        if text.startswith("#"):
            extra = max(len(line) - len(text) - len(indent), 0)
            comments.append(f"{indent}#{' ' * extra}{text[1:]}" if extra else f"{indent}{text}")
    return comments + [f"{indent}{TODO}"]


def exercise_source(source: str) -> str:
    """A code cell's source with each solution block replaced by its skeleton."""
    return map_solution_blocks(source, _skeleton)


def map_solution_blocks(source: str, replace) -> str:
    """A code cell's source with each solution block (its lines between the markers) replaced by
    ``replace(block_lines, indent)``, a list of lines; ``indent`` is the markers' indentation."""
    out: list[str] = []
    block: list[str] | None = None
    indent = ""
    for line in source.split("\n"):
        stripped = line.strip()
        if stripped == BEGIN:
            if block is not None:
                raise ValueError(f"nested {BEGIN!r} in cell:\n{source}")
            block, indent = [], line[: len(line) - len(line.lstrip())]
        elif stripped == END:
            if block is None:
                raise ValueError(f"{END!r} without {BEGIN!r} in cell:\n{source}")
            out.extend(replace(block, indent))
            block = None
        elif block is not None:
            block.append(line)
        else:
            out.append(line)
    if block is not None:
        raise ValueError(f"{BEGIN!r} without {END!r} in cell:\n{source}")
    return "\n".join(out)


def has_exercises(nb) -> bool:
    return any(c.cell_type == "code" and BEGIN in c.source for c in nb.cells)


def make_exercise_notebook(solution, name: str):
    """The learner's version of a solution notebook (outputs cleared: it is executed afterwards).

    Its badges open the exercise version: the solution's first line with the path changed."""
    import nbformat

    nb = copy.deepcopy(solution)
    cells = []
    for cell in nb.cells:
        if "solution-only" in cell.metadata.get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = exercise_source(cell.source)
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    if cells and cells[0].cell_type == "markdown":
        first, _, rest = cells[0].source.partition("\n")
        cells[0].source = first.replace("notebooks/solutions/", "notebooks/") + "\n" + rest
    if has_exercises(solution):
        note = nbformat.v4.new_markdown_cell(EXERCISE_NOTE.format(name=name))
        note.metadata["tags"] = ["exercise-note"]
        note.id = "exercise-note"
        cells.insert(1, note)
    nb.cells = cells
    return nb


# ---------------------------------------------------------------- finding the course's notebooks


def course_directory(start: Path | str | None = None) -> Path:
    """The course checkout that holds ``start`` (default: the current folder): the first folder,
    going up, with a ``notebooks/solutions`` folder in it."""
    here = Path(start or Path.cwd()).resolve()
    for folder in (here, *here.parents):
        if (folder / "notebooks" / "solutions").is_dir():
            return folder
    raise FileNotFoundError(
        f"no course here: neither {here} nor a folder above it has notebooks/solutions/. "
        "Run this from inside your copy of the course."
    )


def solution_paths(root: Path, only: list[str] | None = None) -> list[Path]:
    """The solution notebooks, in lesson order; ``only=["01"]`` picks lessons by number."""
    paths = sorted((root / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))
    return [p for p in paths if p.name[:2] in only] if only else paths


def exercise_path(solution: Path) -> Path:
    """``notebooks/solutions/01_x.ipynb`` -> ``notebooks/01_x.ipynb``."""
    return solution.parent.parent / solution.name


# ---------------------------------------------------------------- a fresh lesson for a learner


def reset(lesson: str, root: Path | str | None = None) -> Path:
    """Give a learner a fresh exercise notebook for ``lesson`` ("01"). The old notebook is kept
    in ``notebooks/my_work/.history/`` (outside the folders the tests collect), with the time."""
    import nbformat

    root = course_directory(root)
    paths = solution_paths(root, [lesson])
    if not paths:
        known = ", ".join(p.name[:2] for p in solution_paths(root))
        raise SystemExit(f"no lesson {lesson!r}; the lessons are {known}")
    target = exercise_path(paths[0])
    if target.exists():
        backup = keep_earlier_version(target, target.parent / "my_work" / ".history")
        print(f"your old notebook is kept as {backup.relative_to(root)}")
    nb = make_exercise_notebook(nbformat.read(paths[0], as_version=4), paths[0].name)
    nbformat.write(nb, target)
    print(f"fresh notebook: {target.relative_to(root)} (run it from the top)")
    return target
