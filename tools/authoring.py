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
    python tools/authoring.py stamp           # re-stamp set-up cells, badges, pictures, outputs kept
    python tools/authoring.py images          # redraw images/ from the diagram code, then stamp
    python tools/authoring.py set-repo OWNER/NAME[@REF]   # a fork: re-point every link to it
    python tools/authoring.py export nbgrader OUT/   # the lessons for nbgrader (or otter)
    python tools/authoring.py hub-link HUB_URL       # the nbgitpuller link for a JupyterHub
    python tools/authoring.py new-exercise NAME --lesson NN   # scaffold an exercise (CONTRIBUTING.md)

A learner's fresh notebook is ``python -m mha_course reset 02``, in the package.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
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

import notebook_images  # noqa: E402  (tools/notebook_images.py: the lessons' pictures)

from mha_course import lessons  # noqa: E402
from mha_course.work import WORK_DIR_VARIABLE, exercise_name  # noqa: E402


def _beside(name: str):
    """The module ``name`` beside this file, by its path: a copy of the course (a fork being
    set up) reads its own pyproject.toml, never this checkout's."""
    spec = importlib.util.spec_from_file_location(
        f"{__name__}.{name}", Path(__file__).with_name(f"{name}.py")
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


_repository = _beside("repository")  # where the course lives (shared with tools/exports.py)
repository_url, course_ref, release_tag = (
    _repository.repository_url,
    _repository.course_ref,
    _repository.release_tag,
)
colab_url, binder_url, RELEASE = _repository.colab_url, _repository.binder_url, _repository.RELEASE
COLAB_BADGE, BINDER_BADGE = _repository.COLAB_BADGE, _repository.BINDER_BADGE
_pyproject, _tool_table, _github_path = (
    _repository._pyproject,
    _repository._tool_table,
    _repository._github_path,
)

NOTEBOOKS = ROOT / "notebooks"
SOLUTIONS = NOTEBOOKS / "solutions"
IMAGES = ROOT / "images"  # each lesson's key picture, drawn by mha_course.diagrams
KERNELSPEC = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}


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


INSTALL_LOG = "/tmp/mha-course-install.log"
INSTALL_FAILED = (
    "❌ The course package did not install (is this runtime online?): run this cell again. "
    f"What pip said is in {INSTALL_LOG}"
)


def setup_cell_source() -> str:
    """The first code cell of every notebook. On Colab, once per runtime, it installs the course
    package and what it needs that Colab lacks: every package already there is a constraint at its
    installed version (pip's own list, so a torch whose ``__version__`` carries a local label,
    such as 2.11.0+cu130, is kept as the 2.11.0 it is installed as). If that fails it says so in
    one line, not a pip traceback. Then, everywhere, it seeds everything and picks the device."""
    requirement = f"mha-course @ git+{repository_url()}@{course_ref()}"
    return (
        "# Set-up, the same in every notebook. On Colab it first installs the course package (once per\n"
        "# runtime), adding only what Colab lacks: Colab's own packages (torch, ipywidgets, ...) stay.\n"
        "import sys\n"
        "from importlib.util import find_spec\n"
        "\n"
        'if "google.colab" in sys.modules and not find_spec("mha_course"):\n'
        "    !pip list --format=freeze > /tmp/colab-packages.txt\n"
        f'    !pip install -c /tmp/colab-packages.txt "{requirement}" > {INSTALL_LOG} 2>&1 || echo "{INSTALL_FAILED}"\n'
        "\n"
        'if find_spec("mha_course"):  # (if not, the line above says why)\n'
        "    from mha_course.notebook import start\n"
        "\n"
        "    device = start(seed=0)"
    )


def _sources(nb) -> list[tuple[str, str, list[str], dict]]:
    return [
        (c.cell_type, c.source, sorted(c.metadata.get("tags", [])), c.get("attachments", {}))
        for c in nb.cells
    ]


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
        problems += _picture_problems(solution, path)
        target = exercise_path(path)
        if not target.exists():
            problems.append(
                f"{target.relative_to(ROOT)}: missing (generate it from {path.relative_to(ROOT)})"
            )
            continue
        exercise = nbformat.read(target, as_version=4)
        problems += _picture_problems(exercise, target)
        expected = lessons.make_exercise_notebook(solution, path.name)
        if _sources(exercise) != _sources(expected):
            problems.append(
                f"{target.relative_to(ROOT)}: stale, differs from what {path.relative_to(ROOT)} generates"
            )
    return problems


def _picture_problems(nb, path: Path) -> list[str]:
    """The lesson's pictures in one version of it: the right ones, each equal to its file in
    images/ (run `python tools/authoring.py images` to put them right)."""
    label = str(path.relative_to(ROOT))
    return notebook_images.placement_problems(
        nb, path.name[:2], label
    ) + notebook_images.picture_problems(nb, label, IMAGES)


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


# ---------------------------------------------------------------- where the course lives

REPO_SPEC = re.compile(
    r"^([A-Za-z0-9](?:[A-Za-z0-9-]*[A-Za-z0-9])?)/([A-Za-z0-9._-]+)(?:@([^\s@]+))?$"
)
POINTED_FILES = ("README.md", "INSTRUCTORS.md")
"""Besides pyproject.toml and the notebooks: the files whose links name the repository."""


def stamp(only: list[str] | None = None) -> list[Path]:
    """Re-stamp the set-up cell, the badges and the pictures (from images/) of both versions of
    each lesson in place, keeping their outputs (the set-up cell prints the same off Colab, and
    badges and pictures are markdown): what a change of where the course lives, or of a picture,
    needs, without executing anything. Returns the files changed."""
    changed = []
    for path in solution_paths(only):
        for target, badge_path in (
            (path, f"notebooks/solutions/{path.name}"),
            (exercise_path(path), f"notebooks/{path.name}"),
        ):
            if not target.exists():
                continue
            nb = nbformat.read(target, as_version=4)
            before = _sources(nb)
            stamp_setup_cell(nb)
            stamp_badges(nb, badge_path)
            notebook_images.stamp_pictures(nb, IMAGES)
            if _sources(nb) != before:
                write(nb, target)
                changed.append(target)
    return changed


def _repoint(text: str, old: tuple[str, str], new: tuple[str, str]) -> str:
    """``text`` with every link to the repository ``old`` (owner/name, ref) pointing at ``new``:
    GitHub pages, Colab and Binder badges, pip's git URLs."""
    (old_path, old_ref), (new_path, new_ref) = old, new
    hosts = r"(https://(?:github\.com|colab\.research\.google\.com/github|mybinder\.org/v2/gh)/)"
    ref = re.escape(old_ref)
    text = re.sub(
        hosts + re.escape(old_path) + rf"/blob/{ref}/", rf"\g<1>{new_path}/blob/{new_ref}/", text
    )
    text = re.sub(
        hosts + re.escape(old_path) + rf"/{ref}(?=[?/\s)])", rf"\g<1>{new_path}/{new_ref}", text
    )
    text = re.sub(hosts + re.escape(old_path) + rf"@{ref}\b", rf"\g<1>{new_path}@{new_ref}", text)
    return re.sub(hosts + re.escape(old_path) + r"(?![\w.-])", rf"\g<1>{new_path}", text)


def set_repo(spec: str) -> list[Path]:
    """Point the course at ``OWNER/NAME[@REF]`` everywhere (see :func:`main`'s ``set-repo``);
    without ``@REF`` the badges name the release tag. Returns the files changed."""
    match = REPO_SPEC.match(spec.strip())
    if match is None:
        raise ValueError(
            f"expected OWNER/NAME or OWNER/NAME@REF (a GitHub repository), got {spec!r}"
        )
    owner, name, ref = match.groups()
    old = (_github_path(), course_ref())
    pyproject = ROOT / "pyproject.toml"
    text = _pyproject()
    text = re.sub(
        r'^(Repository\s*=\s*)"[^"]+"',
        rf'\g<1>"https://github.com/{owner}/{name}"',
        text,
        count=1,
        flags=re.MULTILINE,
    )
    setting = f'ref = "{ref or RELEASE}"'
    if "[tool.mha-course]" not in text:
        raise RuntimeError("pyproject.toml has no [tool.mha-course] table to keep the ref in")
    table = _tool_table()
    new_table = re.sub(r'^ref\s*=\s*"[^"]*"', setting, table, count=1, flags=re.MULTILINE)
    text = text.replace(
        table, new_table if new_table != table else table.rstrip("\n") + f"\n{setting}\n"
    )
    changed = []
    if text != pyproject.read_text(encoding="utf-8"):
        pyproject.write_text(text, encoding="utf-8")
        changed.append(pyproject)
    new = (_github_path(), course_ref())
    for relative in POINTED_FILES:
        path = ROOT / relative
        before = path.read_text(encoding="utf-8")
        after = _repoint(before, old, new)
        if after != before:
            path.write_text(after, encoding="utf-8")
            changed.append(path)
    return changed + stamp()


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
        notebook_images.stamp_pictures(solution, IMAGES)  # the exercise version copies them
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
    sub.add_parser(
        "stamp",
        help="re-stamp every notebook's set-up cell, badges and pictures in place, outputs kept "
        "(no execution)",
    )
    sub.add_parser(
        "images",
        help="redraw images/ from the diagram code (mha_course.diagrams), then stamp each picture "
        "into the notebooks that show it, both versions, as a markdown cell attachment",
    )
    sr = sub.add_parser(
        "set-repo",
        help="point the badges, the Colab set-up cells, pyproject.toml, README.md and "
        "INSTRUCTORS.md at a GitHub repository (a fork): OWNER/NAME, or OWNER/NAME@REF for a "
        "branch or tag other than the release tag v<version>",
    )
    sr.add_argument("repository", help="OWNER/NAME or OWNER/NAME@REF")
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
    ne = sub.add_parser(
        "new-exercise",
        help="scaffold an exercise: its cell in the lesson's solution notebook, its checker "
        "module with an empty case table, and its test (see CONTRIBUTING.md)",
    )
    ne.add_argument("name", help="what the learner writes, e.g. rms_norm or RMSNorm")
    ne.add_argument("--lesson", required=True, help="the lesson's number, e.g. 03")
    import exports  # the grading tools' formats and the hub link (tools/exports.py)

    exports.add_commands(sub)
    args = parser.parse_args(argv)
    if args.command in exports.COMMANDS:
        return exports.run(args)
    if args.command == "new-exercise":
        from new_exercise import new_exercise

        try:
            written = new_exercise(args.name, args.lesson)
        except ValueError as error:
            parser.error(str(error))
        for path in written:
            print(f"wrote {path.relative_to(ROOT)}")
        print("next: CONTRIBUTING.md, 'Adding an exercise'")
        return 0
    if args.command == "clean":
        changed = [p for p in args.paths if clean_file(p)]
        for p in changed:
            print(f"cleaned {p}")
        return 1 if changed else 0
    if args.command == "stats":
        return stats(args)
    if args.command == "images":
        for path in notebook_images.draw(IMAGES):
            print(f"drew {path.relative_to(ROOT)}")
        for path in stamp():
            print(f"updated {path.relative_to(ROOT)}")
        return 0
    if args.command in ("stamp", "set-repo"):
        try:
            changed = stamp() if args.command == "stamp" else set_repo(args.repository)
        except ValueError as error:
            parser.error(str(error))
        for path in changed:
            print(f"updated {path.relative_to(ROOT)}")
        print(f"the course lives at {repository_url()}, ref {course_ref()}")
        return 0
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
