"""Build the course's notebooks: one source per lesson, the learner's version generated from it.

The sources are the solution notebooks in ``notebooks/solutions/``. Inside a code cell, the lines
between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` are the answer. The exercise notebook in
``notebooks/`` is the same notebook with every such block replaced by its comment lines (the
skeleton's step-by-step guide) and a ``raise NotImplementedError``. Markdown cells tagged
``solution-only`` are dropped from the exercise version.

    python -m mha_course.authoring build           # stamp, generate and execute every notebook
    python -m mha_course.authoring build 02        # only lesson 02 (both versions)
    python -m mha_course.authoring check           # fail if an exercise notebook is stale
    python -m mha_course.authoring reset 02        # give a learner a fresh lesson-02 notebook
"""

from __future__ import annotations

import argparse
import copy
import re
import shutil
import sys
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
TODO = 'raise NotImplementedError("Exercise: write this part, then run the check below.")'

EXERCISE_NOTE = (
    "> **Exercise version.** Write your answers in the cells that start with `# exercise:`, where it "
    "says `raise NotImplementedError`, then run the check cell below each one. Stuck? Open the hints "
    "first; the worked answers are in [`solutions/{name}`](solutions/{name})."
)


def repository_url() -> str:
    """The course's repository URL: defined once, in pyproject.toml's [project.urls]."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^Repository\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if match is None:
        raise RuntimeError("pyproject.toml has no [project.urls] Repository entry")
    return match.group(1)


def release_tag() -> str:
    from . import __version__

    return f"v{__version__}"


def setup_cell_source() -> str:
    """The first code cell of every notebook: installs the package on Colab (keeping Colab's own
    torch), then seeds everything and picks the device. Elsewhere it only does the second part."""
    url = repository_url().replace("https://", "git+https://")
    return (
        "# Set-up, the same in every notebook. On Colab it installs the course package first\n"
        "# (pinning the torch Colab already has, so torch is never reinstalled).\n"
        "import sys\n"
        "\n"
        'if "google.colab" in sys.modules:\n'
        "    import torch\n"
        "\n"
        '    !echo "torch=={torch.__version__}" > /tmp/keep-torch.txt\n'
        f'    !pip install -q -c /tmp/keep-torch.txt "mha-course @ {url}@{release_tag()}"\n'
        "\n"
        "from mha_course.notebook import start\n"
        "\n"
        "device = start(seed=0)"
    )


# ---------------------------------------------------------------- generating the exercise version

def _skeleton(block: list[str], indent: str) -> list[str]:
    comments = [line for line in block if line.strip().startswith("#")]
    return comments + [f"{indent}{TODO}"]


def exercise_source(source: str) -> str:
    """A code cell's source with each solution block replaced by its skeleton."""
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
            out.extend(_skeleton(block, indent))
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
    """The learner's version of a solution notebook (outputs cleared: it is executed afterwards)."""
    nb = copy.deepcopy(solution)
    cells = []
    for cell in nb.cells:
        if "solution-only" in cell.metadata.get("tags", []):
            continue
        if cell.cell_type == "code":
            cell.source = exercise_source(cell.source)
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    note = nbformat.v4.new_markdown_cell(EXERCISE_NOTE.format(name=name))
    note.metadata["tags"] = ["exercise-note"]
    note.id = "exercise-note"
    cells.insert(1, note)
    nb.cells = cells
    return nb


def _sources(nb) -> list[tuple[str, str, list[str]]]:
    return [(c.cell_type, c.source, sorted(c.metadata.get("tags", []))) for c in nb.cells]


def solution_paths(only: list[str] | None = None) -> list[Path]:
    paths = sorted(SOLUTIONS.glob("[0-9][0-9]_*.ipynb"))
    if only:
        paths = [p for p in paths if p.name[:2] in only]
    return paths


def exercise_path(solution: Path) -> Path:
    return NOTEBOOKS / solution.name


def stale_notebooks() -> list[str]:
    """Problems that would make learners and instructors see different notebooks."""
    problems = []
    for path in solution_paths():
        solution = nbformat.read(path, as_version=4)
        first_code = next((c for c in solution.cells if c.cell_type == "code"), None)
        if first_code is None or first_code.source != setup_cell_source():
            problems.append(f"{path.relative_to(ROOT)}: the first code cell is not the shared set-up cell")
        target = exercise_path(path)
        if not target.exists():
            problems.append(f"{target.relative_to(ROOT)}: missing (generate it from {path.relative_to(ROOT)})")
            continue
        expected = make_exercise_notebook(solution, path.name)
        if _sources(nbformat.read(target, as_version=4)) != _sources(expected):
            problems.append(f"{target.relative_to(ROOT)}: stale, differs from what {path.relative_to(ROOT)} generates")
    return problems


# ---------------------------------------------------------------- executing and saving

def stamp_setup_cell(nb) -> bool:
    """Make the first code cell the shared set-up cell; True when it changed."""
    cell = next(c for c in nb.cells if c.cell_type == "code")
    if cell.source == setup_cell_source():
        return False
    cell.source = setup_cell_source()
    return True


def clean(nb):
    """Clean metadata: the python3 kernelspec, no widget state, no timing metadata."""
    nb.metadata = {
        "kernelspec": dict(KERNELSPEC),
        "language_info": {"name": "python", "pygments_lexer": "ipython3"},
    }
    for cell in nb.cells:
        for key in ("execution", "collapsed", "scrolled", "ExecuteTime"):
            cell.metadata.pop(key, None)
        if cell.cell_type == "code":
            for output in cell.get("outputs", []):
                output.get("metadata", {}).pop("execution", None)
    return nb


def execute(nb, directory: Path, timeout: int = 900):
    from nbclient import NotebookClient

    client = NotebookClient(nb, timeout=timeout, kernel_name="python3", record_timing=False,
                            resources={"metadata": {"path": str(directory)}})
    client.execute()
    return nb


def write(nb, path: Path) -> None:
    nbformat.validate(nb)
    nbformat.write(clean(nb), path)


def build(only: list[str] | None = None, run: bool = True) -> None:
    for path in solution_paths(only):
        solution = nbformat.read(path, as_version=4)
        stamp_setup_cell(solution)
        exercise = make_exercise_notebook(solution, path.name)
        for nb, target in ((solution, path), (exercise, exercise_path(path))):
            if run:
                start = time.perf_counter()
                execute(nb, target.parent)
                print(f"executed {target.relative_to(ROOT)} in {time.perf_counter() - start:.1f} s")
            write(nb, target)


def reset(lesson: str) -> Path:
    """Give a learner a fresh exercise notebook; the old one is kept as a backup beside it."""
    paths = solution_paths([lesson])
    if not paths:
        raise SystemExit(f"no lesson {lesson!r}; lessons: {', '.join(p.name[:2] for p in solution_paths())}")
    target = exercise_path(paths[0])
    if target.exists():
        backup = target.with_name(f"{target.stem}.backup-{time.strftime('%Y%m%d-%H%M%S')}.ipynb")
        shutil.copy2(target, backup)
        print(f"your old notebook is saved as {backup.name}")
    nb = make_exercise_notebook(nbformat.read(paths[0], as_version=4), paths[0].name)
    write(nb, target)
    print(f"fresh notebook: {target.name} (run it from the top)")
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_course.authoring", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="stamp the set-up cell, generate exercise versions, execute both")
    b.add_argument("lessons", nargs="*", help="lesson numbers, e.g. 01 02 (default: all)")
    b.add_argument("--no-execute", action="store_true", help="generate only, without running")
    sub.add_parser("check", help="exit 1 if a generated notebook is stale")
    r = sub.add_parser("reset", help="a fresh exercise notebook for one lesson (old one backed up)")
    r.add_argument("lesson")
    args = parser.parse_args(argv)
    if args.command == "build":
        build(args.lessons or None, run=not args.no_execute)
    elif args.command == "check":
        problems = stale_notebooks()
        print("\n".join(problems) or "every exercise notebook is up to date")
        return 1 if problems else 0
    else:
        reset(args.lesson)
    return 0


if __name__ == "__main__":
    sys.exit(main())
