"""The lessons for the grading tools institutions use (nbgrader, otter-grader), and the
nbgitpuller link that puts the course in every learner's home on a JupyterHub.

    python tools/authoring.py export nbgrader OUT/            # an nbgrader course folder
    python tools/authoring.py export otter OUT/ [--colab]     # otter-assign master notebooks
    python tools/authoring.py hub-link HUB_URL [--lesson NN] [--branch REF]

Both exports are made from the solution notebooks and the exercise registry
(``mha_course.exercises``), never from a list of names. In each lesson:

* every exercise cell is the tool's solution cell. The course's skeleton (the block's comment
  lines, then the line ``mha_course.work.TODO``) is kept: the comments move above the solution
  markers, and the tool is told to put the course's TODO line where the solution was, so that the
  notebook a learner gets from the tool is the course's own exercise notebook;
* after the exercise's check cell comes one graded test cell. It fails unless the name is the
  learner's own definition (not the course's reference, which later cells put in its place) and
  passes its checker: ``check_X.passes(X)`` is False when the exercise is not done and raises the
  checker's message when it is wrong. Points are each exercise's, as its checker module declares them;
* every other cell is locked (nbgrader) or question text (otter); markdown cells tagged
  ``solution-only`` are left out, as in the course's exercise notebooks.

``.ci/graders`` proves both exports with the tools themselves (see there).
"""

from __future__ import annotations

import json
import re
import sys
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from mha_course import lessons  # noqa: E402
from mha_course.exercises import EXERCISES, Exercise, by_name  # noqa: E402
from mha_course.work import TODO, exercise_name  # noqa: E402
from tools import repository  # noqa: E402

__all__ = [
    "points",
    "guide_above",
    "nbgrader_notebook",
    "otter_notebook",
    "export_nbgrader",
    "export_otter",
    "hub_link",
]


def points(name: str) -> int:
    """An exercise's points, as its checker module declares them (a ValueError for a name that
    is not an exercise)."""
    return by_name(name).points


# ---------------------------------------------------------------- a lesson, with its graded cells


@dataclass
class Graded:
    exercise: Exercise
    at: int  # index of the exercise cell in the lesson's cells
    after: int  # index of the cell its graded test follows (its check cell)


BADGES = "[![Open In Colab]"


def _assigns(source: str, name: str) -> bool:
    return re.search(rf"^\s*({name}\s*=|def {name}\b|class {name}\b)", source, re.M) is not None


def lesson_plan(solution, lesson: str) -> tuple[list, list[Graded]]:
    """The cells of a lesson for a grading tool (solution-only cells left out, no outputs) and
    where its graded tests go: after each exercise's check cell (``check_X(X)``), or after the
    exercise cell itself when a cell rebinds the name before the check. Raises ValueError when
    the notebook and the registry disagree."""
    cells = []
    for cell in solution.cells:
        if "solution-only" in cell.metadata.get("tags", []):
            continue
        cell = nbformat.from_dict(json.loads(json.dumps(cell)))
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
        cells.append(cell)
    if cells and cells[0].cell_type == "markdown" and cells[0].source.startswith(BADGES):
        # the badges open the course's own notebooks, not the tool's: leave them out
        cells[0].source = cells[0].source.split("\n", 1)[-1].lstrip("\n")
    graded: list[Graded] = []
    for i, cell in enumerate(cells):
        name = exercise_name(cell.source) if cell.cell_type == "code" else None
        if name is None:
            continue
        exercise = by_name(name)
        if exercise.lesson != lesson:
            raise ValueError(
                f"lesson {lesson} has an exercise cell for {name}, a lesson {exercise.lesson} exercise"
            )
        after = i
        call = re.compile(rf"\b{exercise.check.__name__}\(\s*{name}\b")
        for j in range(i + 1, len(cells)):
            if cells[j].cell_type != "code":
                continue
            if call.search(cells[j].source):
                after = j
                break
            if _assigns(cells[j].source, name):
                break
        graded.append(Graded(exercise, i, after))
    names = [g.exercise.name for g in graded]
    registered = [e.name for e in EXERCISES if e.lesson == lesson]
    if sorted(names) != sorted(registered):
        raise ValueError(
            f"lesson {lesson}: its exercise cells ({', '.join(names) or 'none'}) are not the "
            f"registry's exercises of the lesson ({', '.join(registered) or 'none'})"
        )
    for a, b in zip(graded, graded[1:]):
        if b.at <= a.after:
            raise ValueError(
                f"lesson {lesson}: {b.exercise.name} sits between {a.exercise.name} and its check"
            )
    return cells, graded


def guide_above(source: str, begin: str = lessons.BEGIN, prompt: bool = False) -> str:
    """An exercise cell with each solution block's comment lines (the skeleton's guide, as the
    course's generator keeps them) moved above the block, so that a tool that replaces the block
    with one line keeps them. ``begin``: the opening marker to write. ``prompt``: after each
    block, the course's TODO line inside otter's ``# BEGIN PROMPT`` / ``# END PROMPT`` string (the
    solution version holds it as an inert string; otter's student version has it as code)."""

    def moved(block: list[str], indent: str) -> list[str]:
        skeleton = lessons.exercise_source(
            "\n".join([indent + lessons.BEGIN, *block, indent + lessons.END])
        ).split("\n")
        code = [line for line in block if not line.lstrip().startswith("#")]
        if not any(line.strip() for line in code):
            raise ValueError(f"a solution block without code:\n{source}")
        lines = skeleton[:-1] + [indent + begin, *code, indent + lessons.END]
        if prompt:
            lines += [f'{indent}""" # BEGIN PROMPT', skeleton[-1], f'{indent}""" # END PROMPT']
        return lines

    return lessons.map_solution_blocks(source, moved)


def graded_test_source(exercise: Exercise) -> str:
    """The graded test of one exercise: the same source for nbgrader and otter."""
    name, check = exercise.name, exercise.check.__name__
    n = points(name)
    return (
        f"# Graded: {name}, {n} point{'s' if n != 1 else ''}. It passes when your {name} passes "
        f"{check}; the check cell above says why not.\n"
        f"from mha_course.checks import {check}\n"
        "from mha_course.grading import is_yours\n"
        "\n"
        f'assert is_yours({name}, "{name}"), "{name} here is the course\'s reference: run your {name} cell"\n'
        f'assert {check}.passes({name}), "{name} is not done yet: write it, run its cell, then its check"'
    )


def _code(source: str, cell_id: str):
    cell = nbformat.v4.new_code_cell(source)
    cell.id = cell_id
    return cell


def _raw(source: str, cell_id: str):
    cell = nbformat.v4.new_raw_cell(source)
    cell.id = cell_id
    return cell


def _notebook(solution, cells):
    nb = nbformat.v4.new_notebook(metadata=json.loads(json.dumps(solution.metadata)))
    nb.cells = cells
    return nb


def lesson_number(path: Path) -> str:
    return path.name[:2]


def graded_lessons(only: list[str] | None = None) -> list[Path]:
    """The solution notebooks of the lessons that have exercises (``only``: these lessons)."""
    with_exercises = {e.lesson for e in EXERCISES}
    return [p for p in lessons.solution_paths(ROOT, only) if lesson_number(p) in with_exercises]


# ---------------------------------------------------------------- nbgrader


def _nbgrader(cell, grade_id: str, *, solution=False, grade=False, points_=None) -> None:
    meta = {
        "schema_version": 3,
        "grade": grade,
        "solution": solution,
        "locked": not solution,
        "task": False,
        "grade_id": grade_id,
    }
    if grade:
        meta["points"] = points_
    cell.metadata["nbgrader"] = meta


def nbgrader_notebook(solution, lesson: str):
    """A lesson as an nbgrader (cell metadata schema v3) source notebook."""
    cells, graded = lesson_plan(solution, lesson)
    exercise_at = {g.at: g for g in graded}
    tests_after = {g.after: g for g in graded}
    out = []
    for i, cell in enumerate(cells):
        if i in exercise_at:
            name = exercise_at[i].exercise.name
            cell.source = guide_above(cell.source)
            _nbgrader(cell, f"{name}-answer", solution=True)
        else:
            _nbgrader(cell, f"locked-{cell.get('id') or i}")
        out.append(cell)
        if i in tests_after:
            exercise = tests_after[i].exercise
            test = _code(graded_test_source(exercise), f"graded-{exercise.name}")
            _nbgrader(test, exercise.name, grade=True, points_=points(exercise.name))
            out.append(test)
    return _notebook(solution, out)


NBGRADER_CONFIG = '''\
"""nbgrader's settings for the mha-course lessons (written by `python tools/authoring.py export nbgrader`)."""

c = get_config()  # noqa: F821 (nbgrader defines it)

# Where a solution was, the course's own skeleton line: the notebook a learner gets from
# `nbgrader generate_assignment` is then the course's exercise notebook, which the course's
# tools (its progress list, its grader, its answer saving) recognise.
c.ClearSolutions.code_stub = {{"python": {todo!r}}}
c.ClearSolutions.begin_solution_delimeter = {begin!r}
c.ClearSolutions.end_solution_delimeter = {end!r}

# The longest cells of a lesson (a training run, a benchmark) take longer than nbgrader's default
# of 30 s per cell.
c.Execute.timeout = 900
'''

README = """\
# mha-course for {tool}

Written by `python tools/authoring.py export {tool} OUT/` from the course's solution notebooks:
one assignment per lesson, {per}. Graded tests call the course's checkers; points per exercise
are declared with each exercise's checker in `mha_course/checks/` (total {total}). The course package must be installed in
the environment whose kernel runs the notebooks (the learners' and the grader's).

{how}
"""


def export_nbgrader(out: Path, only: list[str] | None = None) -> list[Path]:
    """An nbgrader course folder: ``OUT/nbgrader_config.py`` and ``OUT/source/NN_x/NN_x.ipynb``."""
    out = Path(out)
    written = []
    for path in graded_lessons(only):
        nb = nbgrader_notebook(nbformat.read(path, as_version=4), lesson_number(path))
        target = out / "source" / path.stem / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    config = NBGRADER_CONFIG.format(todo=TODO, begin=lessons.BEGIN, end=lessons.END)
    (out / "nbgrader_config.py").write_text(config, encoding="utf-8")
    how = (
        "From this folder: `nbgrader generate_assignment NN_x` writes the learners' version to\n"
        "`release/`; put their notebooks in `submitted/<learner>/NN_x/`; `nbgrader autograde NN_x\n"
        "--create` grades them; `nbgrader export` writes the grades to `grades.csv`."
    )
    _readme(out, "nbgrader", "in `source/`", only, how)
    return written


def _readme(out: Path, tool: str, per: str, only, how: str) -> None:
    total = sum(points(e.name) for e in EXERCISES if not only or e.lesson in only)
    text = README.format(tool=tool, per=per, total=total, how=how)
    (out / "README.md").write_text(text, encoding="utf-8")


# ---------------------------------------------------------------- otter-grader


def _yaml(value, indent: str = "") -> list[str]:
    """A small YAML writer for the assignment config (strings as JSON, which YAML reads)."""
    lines = []
    for key, item in value.items():
        if isinstance(item, dict):
            lines += [f"{indent}{key}:", *_yaml(item, indent + "  ")]
        elif isinstance(item, list):
            lines += [f"{indent}{key}:", *(f"{indent}  - {json.dumps(x)}" for x in item)]
        else:
            lines.append(f"{indent}{key}: {json.dumps(item)}")
    return lines


def _course_ref() -> str:
    """The git ref the course's links name (``course_ref`` where the authoring tool has it)."""
    return repository.course_ref()


def otter_config(name: str, colab: bool = False) -> dict:
    config = {
        "name": name,
        # for otter's grading image (`otter grade`); `otter run` uses the environment it runs in
        "requirements": [f"mha-course @ git+{repository.repository_url()}@{_course_ref()}"],
        "export_cell": {"pdf": False},
    }
    if colab:  # otter needs test files on Colab
        config.update({"runs_on": "colab", "tests": {"files": True}})
    return config


def otter_notebook(solution, lesson: str, name: str, colab: bool = False):
    """A lesson as an otter-assign master notebook: an assignment config, then one question per
    exercise (its solution, the cells down to its check, its graded test)."""
    cells, graded = lesson_plan(solution, lesson)
    config = ["# ASSIGNMENT CONFIG", *_yaml(otter_config(name, colab))]
    out = [_raw("\n".join(config), "otter-assignment-config")]
    starts = {g.at: g for g in graded}
    ends = {g.after: g for g in graded}
    for i, cell in enumerate(cells):
        if i in starts:
            name_ = starts[i].exercise.name
            question = f"# BEGIN QUESTION\nname: {name_}\npoints: {points(name_)}"
            out.append(_raw(question, f"q-{name_}"))
            out.append(_raw("# BEGIN SOLUTION", f"q-{name_}-solution"))
            cell.source = guide_above(cell.source, f"{lessons.BEGIN} NO PROMPT", prompt=True)
            out.append(cell)
            out.append(_raw("# END SOLUTION", f"q-{name_}-solution-end"))
        else:
            out.append(cell)
        if i in ends:
            exercise = ends[i].exercise
            name_ = exercise.name
            out.append(_raw("# BEGIN TESTS", f"q-{name_}-tests"))
            out.append(_code(graded_test_source(exercise), f"graded-{name_}"))
            out.append(_raw("# END TESTS", f"q-{name_}-tests-end"))
            out.append(_raw("# END QUESTION", f"q-{name_}-end"))
    return _notebook(solution, out)


def export_otter(out: Path, only: list[str] | None = None, colab: bool = False) -> list[Path]:
    """Otter-assign master notebooks: ``OUT/NN_x/NN_x.ipynb``."""
    out = Path(out)
    written = []
    for path in graded_lessons(only):
        solution = nbformat.read(path, as_version=4)
        nb = otter_notebook(solution, lesson_number(path), path.stem, colab)
        target = out / path.stem / path.name
        target.parent.mkdir(parents=True, exist_ok=True)
        nbformat.write(nb, target)
        written.append(target)
    how = (
        "In a lesson's folder: `otter assign NN_x.ipynb dist` writes the learners' notebook to\n"
        "`dist/student/` and the autograder (a zip) to `dist/autograder/`; `otter run -a\n"
        "dist/autograder/<zip> submission.ipynb` grades one submission here (`otter grade` grades\n"
        "many in Docker)."
    )
    _readme(out, "otter", "each a master notebook in its own folder", only, how)
    return written


# ---------------------------------------------------------------- nbgitpuller


def hub_link(hub_url: str, lesson: str | None = None, branch: str | None = None) -> str:
    """The nbgitpuller link that clones (or updates) this course into a hub user's home and opens
    the lesson's exercise notebook (or the notebooks folder) in JupyterLab: the format of
    nbgitpuller's own link generator (``repo``, ``urlpath``, ``branch``)."""
    parts = urllib.parse.urlsplit(hub_url)
    if parts.scheme not in ("http", "https") or not parts.netloc or parts.query or parts.fragment:
        raise ValueError(
            f"HUB_URL must be the hub's address, like https://hub.example.org, got {hub_url!r}"
        )
    repo = repository.repository_url()
    # nbgitpuller clones into a folder named like the repository's last part (its `targetpath`
    # default), relative to the folder the user's server starts in
    folder = repo.rstrip("/").split("/")[-1]
    target = "notebooks"
    if lesson is not None:
        paths = lessons.solution_paths(ROOT, [lesson])
        if not paths:
            known = ", ".join(lesson_number(p) for p in lessons.solution_paths(ROOT))
            raise ValueError(f"no lesson {lesson!r}; the lessons are {known}")
        target = f"notebooks/{paths[0].name}"
    query = {
        "repo": repo,
        "urlpath": f"lab/tree/{folder}/{target}",
        "branch": branch or _course_ref(),
    }
    base = hub_url if hub_url.endswith("/") else hub_url + "/"
    return f"{base}hub/user-redirect/git-pull?{urllib.parse.urlencode(query)}"


TAG_NOTE = (
    "note: {ref} is the release tag. nbgitpuller clones a tag, but a second click of the link "
    "fails (it updates from the branch origin/{ref}). For a room, give a branch: --branch main, "
    "or a branch of your own fork (see INSTRUCTORS.md)."
)


# ---------------------------------------------------------------- the commands


COMMANDS = ("export", "hub-link")


def add_commands(sub) -> None:
    e = sub.add_parser(
        "export", help="the lessons as nbgrader source assignments or otter-assign notebooks"
    )
    e.add_argument("tool", choices=("nbgrader", "otter"))
    e.add_argument("out", type=Path, help="the folder to write (created if missing)")
    e.add_argument("--lesson", action="append", help="only this lesson, e.g. 01 (repeatable)")
    e.add_argument(
        "--colab", action="store_true", help="otter: the notebooks run on Colab (runs_on: colab)"
    )
    h = sub.add_parser("hub-link", help="the nbgitpuller link that puts the course on a JupyterHub")
    h.add_argument("hub_url", help="the hub's address, e.g. https://hub.example.org")
    h.add_argument("--lesson", help="open this lesson's notebook, e.g. 01 (default: the folder)")
    h.add_argument("--branch", help="the git branch to pull (default: the course's ref)")


def run(args) -> int:
    if args.command == "hub-link":
        try:
            print(hub_link(args.hub_url, args.lesson, args.branch))
        except ValueError as error:
            print(f"hub-link: {error}", file=sys.stderr)
            return 2
        ref = args.branch or _course_ref()
        if ref == repository.release_tag():
            print(TAG_NOTE.format(ref=ref), file=sys.stderr)
        return 0
    if args.colab and args.tool != "otter":
        print("export: --colab is for otter", file=sys.stderr)
        return 2
    try:
        if args.tool == "nbgrader":
            written = export_nbgrader(args.out, args.lesson)
        else:
            written = export_otter(args.out, args.lesson, args.colab)
    except ValueError as error:
        print(f"export: {error}", file=sys.stderr)
        return 1
    for path in written:
        print(f"wrote {path}")
    return 0
