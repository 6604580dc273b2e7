"""The course authors' tool: build, check and measure the notebooks (not part of the package).

One source per lesson: the solution notebook in ``notebooks/solutions/``; the learner's version in
``notebooks/`` is generated from it (how: :mod:`mha_course.lessons`). This script stamps the
shared set-up cell and the badges, generates, executes and saves both versions, and checks that
nothing is stale.

    python tools/authoring.py build           # stamp, generate and execute every notebook
    python tools/authoring.py build 02        # only lesson 02 (both versions)
    python tools/authoring.py check           # fail if an exercise notebook is stale or lacks a check
    python tools/authoring.py stats           # per lesson: answer lines, words, the targets
    python tools/authoring.py stats --run     # ... and each notebook's run time and peak memory
    python tools/authoring.py clean FILES     # clean notebook metadata (for pre-commit)
    python tools/authoring.py export nbgrader OUT/   # the lessons for nbgrader (or otter)
    python tools/authoring.py hub-link HUB_URL       # the nbgitpuller link for a JupyterHub

A learner's fresh notebook is ``python -m mha_course reset 02``, in the package.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import sys
import tempfile
import time
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: import the course package from this checkout
    sys.path.insert(0, str(ROOT))
if str(ROOT / "tools") not in sys.path:  # and the other authoring tools beside this one
    sys.path.insert(0, str(ROOT / "tools"))

from mha_course import lessons  # noqa: E402
from mha_course.work import WORK_DIR_VARIABLE, exercise_name  # noqa: E402

NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


def repository_url() -> str:
    """The course's repository URL: defined once, in pyproject.toml's [project.urls]."""
    text = (ROOT / "pyproject.toml").read_text(encoding="utf-8")
    match = re.search(r'^Repository\s*=\s*"([^"]+)"', text, re.MULTILINE)
    if match is None:
        raise RuntimeError("pyproject.toml has no [project.urls] Repository entry")
    return match.group(1)


def release_tag() -> str:
    from mha_course import __version__

    return f"v{__version__}"


def _github_path() -> str:
    """``owner/name`` of the repository on GitHub."""
    return repository_url().removeprefix("https://github.com/").rstrip("/")


def colab_url(path_in_repo: str) -> str:
    return f"https://colab.research.google.com/github/{_github_path()}/blob/{release_tag()}/{path_in_repo}"


def binder_url() -> str:
    return f"https://mybinder.org/v2/gh/{_github_path()}/{release_tag()}?urlpath=lab/tree/notebooks"


COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
BINDER_BADGE = "https://mybinder.org/badge_logo.svg"


def badges_line(path_in_repo: str) -> str:
    """The first line of every notebook: open it on Colab, or the whole course on Binder."""
    return (
        f"[![Open In Colab]({COLAB_BADGE})]({colab_url(path_in_repo)}) "
        f"[![Binder]({BINDER_BADGE})]({binder_url()})"
    )


def stamp_badges(nb, path_in_repo: str) -> None:
    """Put the badges line at the top of the first (title) markdown cell."""
    cell = nb.cells[0]
    if cell.cell_type != "markdown":
        raise ValueError("a notebook starts with its title, in a markdown cell")
    lines = cell.source.split("\n")
    if lines and lines[0].startswith("[![Open In Colab]"):
        lines = lines[1:]
        while lines and not lines[0].strip():
            lines = lines[1:]
    cell.source = "\n".join([badges_line(path_in_repo), ""] + lines)


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


def _sources(nb) -> list[tuple[str, str, list[str]]]:
    return [(c.cell_type, c.source, sorted(c.metadata.get("tags", []))) for c in nb.cells]


def solution_paths(only: list[str] | None = None) -> list[Path]:
    return lessons.solution_paths(ROOT, only)


def exercise_path(solution: Path) -> Path:
    return NOTEBOOKS / solution.name


def lesson_notebooks() -> list[Path]:
    """Every notebook of the course, both versions: what the tests run, nothing else (no
    learner's copy, no backup, nothing in my_work/)."""
    return [p for s in solution_paths() for p in (exercise_path(s), s)]


def stale_notebooks() -> list[str]:
    """Problems that would make learners and instructors see different notebooks."""
    problems = []
    for path in solution_paths():
        solution = nbformat.read(path, as_version=4)
        first_code = next((c for c in solution.cells if c.cell_type == "code"), None)
        if first_code is None or first_code.source != setup_cell_source():
            problems.append(
                f"{path.relative_to(ROOT)}: the first code cell is not the shared set-up cell"
            )
        if not solution.cells[0].source.startswith(badges_line(f"notebooks/solutions/{path.name}")):
            problems.append(
                f"{path.relative_to(ROOT)}: the first cell does not start with its badges"
            )
        target = exercise_path(path)
        if not target.exists():
            problems.append(
                f"{target.relative_to(ROOT)}: missing (generate it from {path.relative_to(ROOT)})"
            )
            continue
        expected = lessons.make_exercise_notebook(solution, path.name)
        if _sources(nbformat.read(target, as_version=4)) != _sources(expected):
            problems.append(
                f"{target.relative_to(ROOT)}: stale, differs from what {path.relative_to(ROOT)} generates"
            )
    return problems


def missing_check_calls(paths: list[Path] | None = None) -> list[str]:
    """Every registered exercise's check call (``check_softmax(softmax)``) must stand in a code
    cell of both versions of its lesson, not commented out: a check cell dropped from a solution
    and rebuilt would otherwise vanish from both without a word."""
    from mha_course.exercises import EXERCISES

    problems = []
    for path in lesson_notebooks() if paths is None else paths:
        code = [
            line.split("#", 1)[0]
            for cell in nbformat.read(path, as_version=4).cells
            if cell.cell_type == "code"
            for line in cell.source.splitlines()
        ]
        for exercise in EXERCISES:
            if path.name.startswith(f"{exercise.lesson}_") and not any(
                exercise.check_call in line for line in code
            ):
                problems.append(
                    f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path}: no check "
                    f"cell for {exercise.name} (`{exercise.check_call}`)"
                )
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


def clean_file(path: Path) -> bool:
    """Clean one notebook file in place; True when it changed."""
    before = path.read_text(encoding="utf-8")
    nb = nbformat.reads(before, as_version=4)
    after = nbformat.writes(clean(nb)) + "\n"
    if after == before:
        return False
    path.write_text(after, encoding="utf-8")
    return True


# ---------------------------------------------------------------- a private my_work/ for each run


def solution_answers() -> dict[str, str]:
    """The answer of every exercise, ``{name: the exercise cell's source}``, from the solutions."""
    answers = {}
    for path in solution_paths():
        for cell in nbformat.read(path, as_version=4).cells:
            name = exercise_name(cell.source) if cell.cell_type == "code" else None
            if name is not None:
                answers[name] = cell.source if cell.source.endswith("\n") else cell.source + "\n"
    return answers


def seed_work_dir(directory: Path, notebook: Path) -> Path:
    """Fill a private work folder for running ``notebook``: a solution notebook finds every
    lesson's solution answer saved (as a learner who solved them all would), an exercise
    notebook finds none (as a learner who has written nothing). So each notebook runs the same
    whatever ran before it, in any order, and never touches a learner's own my_work/."""
    directory.mkdir(parents=True, exist_ok=True)
    if notebook.parent.name == "solutions":
        for name, source in solution_answers().items():
            (directory / f"{name}.py").write_text(source, encoding="utf-8")
    return directory


@contextlib.contextmanager
def private_work_dir(notebook: Path):
    """Run the kernels started inside this block against a fresh work folder for ``notebook``."""
    before = os.environ.get(WORK_DIR_VARIABLE)
    with tempfile.TemporaryDirectory(prefix="mha-course-") as tmp:
        os.environ[WORK_DIR_VARIABLE] = str(seed_work_dir(Path(tmp) / "my_work", notebook))
        try:
            yield Path(os.environ[WORK_DIR_VARIABLE])
        finally:
            if before is None:
                os.environ.pop(WORK_DIR_VARIABLE, None)
            else:
                os.environ[WORK_DIR_VARIABLE] = before


# ---------------------------------------------------------------- executing and saving


def execute(nb, path: Path, timeout: int = 900):
    """Run ``nb`` as the notebook at ``path``: in its folder, against a private work folder."""
    from nbclient import NotebookClient

    client = NotebookClient(
        nb,
        timeout=timeout,
        kernel_name="python3",
        record_timing=False,
        resources={"metadata": {"path": str(path.parent)}},
    )
    with private_work_dir(path):
        client.execute()
    return nb


def write(nb, path: Path) -> None:
    nbformat.validate(nb)
    nbformat.write(clean(nb), path)


def build(only: list[str] | None = None, run: bool = True) -> None:
    for path in solution_paths(only):
        solution = nbformat.read(path, as_version=4)
        stamp_setup_cell(solution)
        stamp_badges(solution, f"notebooks/solutions/{path.name}")
        exercise = lessons.make_exercise_notebook(solution, path.name)
        for nb, target in ((solution, path), (exercise, exercise_path(path))):
            if run:
                start = time.perf_counter()
                execute(nb, target)
                print(f"executed {target.relative_to(ROOT)} in {time.perf_counter() - start:.1f} s")
            write(nb, target)


def _peak_kernel_memory(client, stop, peak: list[float]) -> None:
    """Sample the kernel process's resident memory until ``stop`` is set (psutil comes with Jupyter)."""
    import psutil

    while not stop.is_set():
        km = getattr(client, "km", None)
        pid = getattr(getattr(km, "provisioner", None), "pid", None)
        if pid is not None:
            try:
                peak[0] = max(peak[0], psutil.Process(pid).memory_info().rss)
            except psutil.Error:
                pass
        stop.wait(0.05)


def run_stats(path: Path) -> dict:
    """What an instructor plans with: words to read, code cells, exercises, and the time and peak
    memory of executing the notebook here."""
    import threading

    from nbclient import NotebookClient

    nb = nbformat.read(path, as_version=4)
    words = sum(len(c.source.split()) for c in nb.cells if c.cell_type == "markdown")
    code = [c for c in nb.cells if c.cell_type == "code"]
    exercises = sum(c.source.lstrip().startswith("# exercise:") for c in code)
    client = NotebookClient(
        nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    stop, peak = threading.Event(), [0.0]
    sampler = threading.Thread(target=_peak_kernel_memory, args=(client, stop, peak), daemon=True)
    sampler.start()
    start = time.perf_counter()
    try:
        with private_work_dir(path):
            client.execute()
    finally:
        stop.set()
        sampler.join()
    return {
        "notebook": path.name,
        "markdown_words": words,
        "code_cells": len(code),
        "exercises": exercises,
        "run_seconds": round(time.perf_counter() - start, 1),
        "peak_kernel_mib": round(peak[0] / 2**20),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python tools/authoring.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser(
        "build", help="stamp the set-up cell, generate exercise versions, execute both"
    )
    b.add_argument("lessons", nargs="*", help="lesson numbers, e.g. 01 02 (default: all)")
    b.add_argument("--no-execute", action="store_true", help="generate only, without running")
    sub.add_parser("check", help="exit 1 if a generated notebook is stale")
    c = sub.add_parser(
        "clean",
        help="clean notebook metadata in place (kernelspec, no widget state); "
        "exit 1 if a file changed (for pre-commit)",
    )
    c.add_argument("paths", nargs="+", type=Path)
    st = sub.add_parser(
        "stats",
        help="per lesson: answer lines, short exercises, answer lines shown above their check, "
        "main-path words and long sentences, and whether the course's targets hold",
    )
    st.add_argument("lessons", nargs="*", help="lesson numbers (default: all)")
    st.add_argument("--details", action="store_true", help="per exercise, and the long sentences")
    st.add_argument(
        "--run", action="store_true", help="also execute each notebook: run time and peak memory"
    )
    import exports  # the grading tools' formats and the hub link (tools/exports.py)

    exports.add_commands(sub)
    args = parser.parse_args(argv)
    if args.command in exports.COMMANDS:
        return exports.run(args)
    if args.command == "clean":
        changed = [p for p in args.paths if clean_file(p)]
        for p in changed:
            print(f"cleaned {p}")
        return 1 if changed else 0
    if args.command == "stats":
        return stats(args)
    if args.command == "build":
        build(args.lessons or None, run=not args.no_execute)
    else:
        problems = stale_notebooks() + missing_check_calls()
        print("\n".join(problems) or "every exercise notebook is up to date")
        return 1 if problems else 0
    return 0


def stats(args) -> int:
    """What a learner reads and writes (tools/lesson_stats.py), then, with --run, run times."""
    import lesson_stats

    counted = [
        s for s in lesson_stats.course_stats(ROOT) if not args.lessons or s.lesson in args.lessons
    ]
    print(lesson_stats.table(counted))
    print()
    report = lesson_stats.targets_report(lesson_stats.course_stats(ROOT))
    for statement, holds in report:
        if not args.lessons or statement[:2] in args.lessons or statement.startswith("00-06"):
            print(("✔ " if holds else "✘ ") + statement)
    if args.details:
        print()
        print(lesson_stats.details(counted))
    if args.run:
        print()
        print(
            f"{'notebook':<34} {'words':>6} {'cells':>6} {'exercises':>9} {'run s':>6} {'peak MiB':>9}"
        )
        for path in solution_paths(args.lessons or None):
            row = run_stats(exercise_path(path))
            print(
                f"{row['notebook']:<34} {row['markdown_words']:>6} {row['code_cells']:>6} "
                f"{row['exercises']:>9} {row['run_seconds']:>6} {row['peak_kernel_mib']:>9}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
