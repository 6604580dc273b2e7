"""The nbgrader and otter exports and the hub link (tools/exports.py), driven by the registry.

The tools themselves are not installed here: these tests replay the parts of them that decide
what a learner gets (nbgrader 0.9's ClearSolutions, otter 7's solution stripping, nbgitpuller
1.3's link handler), and ``.ci/graders`` runs the real tools on every lesson.
"""

import ast
import json
import re
import urllib.parse
from pathlib import Path

import nbformat
import pytest

from mha_course import lessons
from mha_course.exercises import EXERCISES
from mha_course.notebook import _PREAMBLE
from mha_course.work import TODO, exercise_name
from tools import authoring, exports

ROOT = Path(__file__).resolve().parent.parent
GRADED = exports.graded_lessons()
IDS = [p.stem for p in GRADED]


def registered(lesson: str) -> list[str]:
    return [e.name for e in EXERCISES if e.lesson == lesson]


def code_sources(nb) -> list[str]:
    return [c.source for c in nb.cells if c.cell_type == "code"]


def test_every_exercise_has_points_and_the_bigger_ones_more():
    names = {e.name for e in EXERCISES}
    assert all(isinstance(exports.points(n), int) and exports.points(n) >= 1 for n in names)
    assert any(exports.points(n) > 1 for n in names), "bigger ones get more"
    with pytest.raises(ValueError, match="no exercise named"):
        exports.points("not_an_exercise")


def test_every_lesson_with_exercises_is_exported():
    assert {p.name[:2] for p in GRADED} == {e.lesson for e in EXERCISES}


# ---------------------------------------------------------------- nbgrader


class _Config:
    """Enough of traitlets' config object to read nbgrader_config.py."""

    def __getattr__(self, name):
        value = _Config()
        setattr(self, name, value)
        return value


def nbgrader_config(folder: Path):
    c = _Config()
    exec((folder / "nbgrader_config.py").read_text(encoding="utf-8"), {"get_config": lambda: c})
    return c


def clear_solutions(cell, stub: str, begin: str, end: str) -> bool:
    """nbgrader 0.9.6's ClearSolutions._replace_solution_region, for a code cell."""
    new, inside, replaced = [], False, False
    for line in cell.source.split("\n"):
        if begin in line:
            assert not inside, "nested solution region"
            inside = replaced = True
            indent = re.match(r"\s*", line).group(0)
            new += [indent + s for s in stub.split("\n")]
        elif end in line:
            inside = False
        elif not inside:
            new.append(line)
    assert not inside, "no end solution statement"
    cell.source = "\n".join(new)
    return replaced


@pytest.fixture(scope="module")
def nbgrader_export(tmp_path_factory):
    out = tmp_path_factory.mktemp("nbgrader")
    assert authoring.main(["export", "nbgrader", str(out)]) == 0
    return out


@pytest.mark.parametrize("solution", GRADED, ids=IDS)
def test_nbgrader_cells_follow_schema_3(nbgrader_export, solution):
    nb = nbformat.read(nbgrader_export / "source" / solution.stem / solution.name, as_version=4)
    lesson = solution.name[:2]
    ids, solutions, tests = set(), [], {}
    for cell in nb.cells:
        meta = cell.metadata["nbgrader"]
        assert meta["schema_version"] == 3
        assert {"grade", "solution", "locked", "grade_id"} <= set(meta)
        assert re.fullmatch(r"[a-zA-Z0-9_\-]+", meta["grade_id"]) and meta["grade_id"] not in ids
        ids.add(meta["grade_id"])
        if meta["solution"]:
            assert cell.cell_type == "code" and not meta["locked"] and not meta["grade"]
            solutions.append(exercise_name(cell.source))
        elif meta["grade"]:
            assert cell.cell_type == "code" and meta["locked"]
            tests[meta["grade_id"]] = meta["points"]
        else:
            assert meta["locked"], "every other cell is locked"
    assert solutions == registered(lesson)
    assert tests == {n: exports.points(n) for n in registered(lesson)}


@pytest.mark.parametrize("solution", GRADED, ids=IDS)
def test_nbgrader_releases_the_courses_own_exercise_notebook(nbgrader_export, solution):
    """What generate_assignment writes is the course's exercise notebook plus the graded cells:
    the skeleton's guide and its TODO line, which the course's tools recognise."""
    config = nbgrader_config(nbgrader_export).ClearSolutions
    assert config.code_stub == {"python": TODO}
    nb = nbformat.read(nbgrader_export / "source" / solution.stem / solution.name, as_version=4)
    for cell in nb.cells:
        replaced = clear_solutions(
            cell, TODO, config.begin_solution_delimeter, config.end_solution_delimeter
        )
        assert replaced == cell.metadata["nbgrader"]["solution"], cell.source[:80]
    graded = [c.source for c in nb.cells if c.metadata["nbgrader"]["grade"]]
    release = [s for s in code_sources(nb) if s not in graded]
    assert release == code_sources(nbformat.read(lessons.exercise_path(solution), as_version=4))


@pytest.mark.parametrize("solution", GRADED, ids=IDS)
def test_each_graded_cell_follows_its_exercises_check(nbgrader_export, solution):
    nb = nbformat.read(nbgrader_export / "source" / solution.stem / solution.name, as_version=4)
    for i, cell in enumerate(nb.cells):
        if cell.metadata["nbgrader"]["grade"]:
            exercise = next(e for e in EXERCISES if e.name == cell.metadata["nbgrader"]["grade_id"])
            assert f"{exercise.check.__name__}({exercise.name})" in nb.cells[i - 1].source
            assert f"assert {exercise.check.__name__}.passes({exercise.name})" in cell.source


def graded_cell_run(exercise, answer: str | None):
    """Run an exercise cell (None: none at all) then its graded cell; the graded cell's error."""
    namespace: dict = {}
    exec(_PREAMBLE, namespace)
    if answer is not None:
        exec(answer, namespace)
    try:
        exec(exports.graded_test_source(exercise), namespace)
    except AssertionError as error:
        return error
    return None


@pytest.mark.parametrize("exercise", EXERCISES, ids=lambda e: e.name)
def test_a_graded_cell_fails_a_skeleton_and_the_reference(exercise):
    solution = authoring.solution_answers()[exercise.name]
    error = graded_cell_run(exercise, lessons.exercise_source(solution))
    assert error is not None and "not done yet" in str(error)
    reference = f"from mha_course.reference import {exercise.name}\n"
    error = graded_cell_run(exercise, reference)
    assert error is not None and "the course's reference" in str(error)


@pytest.mark.parametrize("exercise", [e for e in EXERCISES if e.lesson == EXERCISES[0].lesson])
def test_a_graded_cell_passes_the_solution_and_fails_a_wrong_answer(exercise):
    solution = authoring.solution_answers()[exercise.name]
    assert graded_cell_run(exercise, exports.guide_above(solution)) is None
    wrong = f"{solution}\n{exercise.name} = lambda *args, **kwargs: 0\n"
    error = graded_cell_run(exercise, wrong)
    assert error is not None and "not done yet" not in str(error), "a wrong answer says why"


def test_an_exercise_cell_the_registry_does_not_know_is_refused():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell("# exercise: not_an_exercise\nx = 1")]
    with pytest.raises(ValueError, match="not_an_exercise"):
        exports.lesson_plan(nb, "00")
    nb.cells = []
    with pytest.raises(ValueError, match="registry's exercises"):
        exports.lesson_plan(nb, EXERCISES[0].lesson)


def test_guide_above_keeps_the_skeleton_for_nested_comments():
    source = (
        "# exercise: f\n"
        "def f(x):\n"
        "    # BEGIN SOLUTION\n"
        "    # which total?\n"
        "    total = 0\n"
        "    for v in x:\n"
        "        # add each one\n"
        "        total += v\n"
        "    return total\n"
        "    # END SOLUTION"
    )
    moved = exports.guide_above(source)
    assert moved.index("# which total?") < moved.index("# BEGIN SOLUTION")
    cell = nbformat.v4.new_code_cell(moved)
    clear_solutions(cell, TODO, lessons.BEGIN, lessons.END)
    assert cell.source == lessons.exercise_source(source)
    ast.parse(moved)
    with pytest.raises(ValueError, match="without code"):
        exports.guide_above("def f():\n    # BEGIN SOLUTION\n    # only words\n    # END SOLUTION")


# ---------------------------------------------------------------- otter


def otter_student_lines(lines: list[str]) -> list[str]:
    """otter 7.0's replace_solutions for Python, the parts the export uses."""
    skip = ("# SOLUTION NO PROMPT", "# BEGIN PROMPT", "# END PROMPT", "# SEED")
    out, inside = [], False
    for line in lines:
        if any(line.rstrip().endswith(s) for s in skip):
            continue
        if inside and not line.rstrip().endswith("# END SOLUTION"):
            continue
        if line.rstrip().endswith("# END SOLUTION"):
            inside = False
            continue
        begin = re.match(r"(\s*)# BEGIN SOLUTION( NO PROMPT)?", line)
        if begin:
            inside = True
            if begin.group(2):
                continue
            line = begin.group(1) + "..."
        assert not re.match(r"(\s*).* ?# ?SOLUTION", line), f"otter would replace {line!r}"
        out.append(line)
    assert not inside
    return out


def read_config(cell) -> dict:
    """The assignment config cell: the small YAML the export writes (values as JSON)."""
    lines = cell.source.split("\n")
    assert lines[0] == "# ASSIGNMENT CONFIG"
    config: dict = {}
    section = None
    for line in lines[1:]:
        key, _, value = line.strip().partition(": ")
        if line.startswith("  - "):
            config[section] = [*(config[section] or []), json.loads(line[4:])]
        elif line.startswith("  "):
            config[section] = {**(config[section] or {}), key: json.loads(value)}
        elif line.endswith(":"):
            section = line[:-1]
            config[section] = None
        else:
            config[key] = json.loads(value)
    return config


@pytest.mark.parametrize("solution", GRADED, ids=IDS)
def test_otter_master_notebook(tmp_path, solution):
    assert authoring.main(["export", "otter", str(tmp_path), "--lesson", solution.name[:2]]) == 0
    nb = nbformat.read(tmp_path / solution.stem / solution.name, as_version=4)
    config = read_config(nb.cells[0])
    assert config["name"] == solution.stem and "runs_on" not in config
    assert config["requirements"] == [
        f"mha-course @ git+{authoring.repository_url()}@{exports._course_ref()}"
    ]
    raw = [c.source for c in nb.cells if c.cell_type == "raw"]
    names = registered(solution.name[:2])
    for name in names:
        i = raw.index(f"# BEGIN QUESTION\nname: {name}\npoints: {exports.points(name)}")
        assert raw[i + 1 : i + 6] == [
            "# BEGIN SOLUTION",
            "# END SOLUTION",
            "# BEGIN TESTS",
            "# END TESTS",
            "# END QUESTION",
        ]
    assert len(raw) == 1 + 6 * len(names)
    # the learner's notebook otter writes: the course's exercise notebook (and otter's own cells)
    student, solution_version, state, question = [], [], "text", None
    for cell in nb.cells[1:]:
        if cell.cell_type == "raw":
            state = {"# BEGIN SOLUTION": "solution", "# BEGIN TESTS": "tests"}.get(
                cell.source, "text"
            )
            question = re.match(r"# BEGIN QUESTION\nname: (\w+)", cell.source) or question
            continue
        if state == "tests":
            exercise = next(e for e in EXERCISES if e.name == question.group(1))
            assert cell.source == exports.graded_test_source(exercise)
        elif state == "solution":
            solution_version.append(cell.source)
            student.append("\n".join(otter_student_lines(cell.source.split("\n"))))
        elif cell.cell_type == "code":
            student.append(cell.source)
    assert student == code_sources(nbformat.read(lessons.exercise_path(solution), as_version=4))
    for source in solution_version:  # the autograder's version runs as Python
        ast.parse(source)
        assert lessons.BEGIN in source


def test_otter_on_colab(tmp_path):
    lesson = EXERCISES[0].lesson
    assert authoring.main(["export", "otter", str(tmp_path), "--colab", "--lesson", lesson]) == 0
    (path,) = tmp_path.glob("*/*.ipynb")
    config = read_config(nbformat.read(path, as_version=4).cells[0])
    assert config["runs_on"] == "colab" and config["tests"] == {"files": True}
    assert authoring.main(["export", "nbgrader", str(tmp_path), "--colab"]) == 2


# ---------------------------------------------------------------- nbgitpuller


def as_nbgitpuller_reads_it(link: str) -> dict:
    """nbgitpuller 1.3.0: the hub sends /hub/user-redirect/git-pull?... to the user's server;
    UIHandler reads `repo`, `branch`, `urlpath` (else `urlPath`), `targetpath` (default: the
    repository URL's last part); SyncHandler clones into <server root>/<targetpath>; the browser
    then goes to <server base URL><urlpath>."""
    parts = urllib.parse.urlsplit(link)
    assert parts.path.endswith("/hub/user-redirect/git-pull")
    query = {k: v[-1] for k, v in urllib.parse.parse_qs(parts.query).items()}
    repo = query["repo"]
    return {
        "hub": f"{parts.scheme}://{parts.netloc}{parts.path.removesuffix('hub/user-redirect/git-pull')}",
        "repo": repo,
        "branch": query.get("branch"),
        "urlpath": query.get("urlpath") or query.get("urlPath"),
        "targetpath": query.get("targetpath") or repo.rstrip("/").split("/")[-1],
    }


@pytest.mark.parametrize("lesson", [None, *(p.name[:2] for p in authoring.solution_paths())])
def test_hub_link_opens_the_lesson_in_the_clone(lesson):
    link = exports.hub_link("https://hub.example.org", lesson)
    read = as_nbgitpuller_reads_it(link)
    assert read["hub"] == "https://hub.example.org/"
    assert read["repo"] == authoring.repository_url()
    assert read["branch"] == exports._course_ref()
    prefix = f"lab/tree/{read['targetpath']}/"
    assert read["urlpath"].startswith(prefix)
    in_repository = ROOT / read["urlpath"].removeprefix(prefix)
    if lesson is None:
        assert in_repository == ROOT / "notebooks"
    else:  # the learner's version of the lesson, never the solution
        assert in_repository.parent == ROOT / "notebooks" and in_repository.name[:2] == lesson
        assert in_repository.exists()


def test_hub_link_command(capsys):
    assert authoring.main(["hub-link", "https://uni.example.edu/jupyter", "--branch", "main"]) == 0
    out, err = capsys.readouterr()
    read = as_nbgitpuller_reads_it(out.strip())
    assert read["hub"] == "https://uni.example.edu/jupyter/" and read["branch"] == "main"
    assert err == ""
    assert authoring.main(["hub-link", "https://hub.example.org", "--lesson", "01"]) == 0
    out, err = capsys.readouterr()
    if exports._course_ref() == authoring.release_tag():  # a tag: nbgitpuller updates fail
        assert "second click" in err
    for bad in (["hub.example.org"], ["https://hub.example.org", "--lesson", "99"]):
        assert authoring.main(["hub-link", *bad]) == 2
        assert "hub-link:" in capsys.readouterr().err


def test_ci_proves_the_exports_with_the_tools():
    """.ci/run ends with .ci/graders, which pins the tools it proves the exports with."""
    assert "bash .ci/graders" in (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    script = (ROOT / ".ci" / "graders").read_text(encoding="utf-8")
    assert re.search(r'NBGRADER="nbgrader==[\d.]+"', script)
    assert re.search(r'OTTER="otter-grader==[\d.]+"', script)
