"""progress and grade: every verdict a room can produce, end to end, in subprocesses."""

import ast
import csv
import subprocess
import sys
import time
from pathlib import Path

import nbformat
import pytest

from mha_course.exercises import EXERCISES
from mha_course.grading import collect_submissions
from mha_course.grading.report import summary_lines, write_html
from mha_course.grading.runner import Row, grade_submission
from mha_course.work import TODO
from tools import authoring

SOLUTIONS = authoring.solution_answers()
# softmax opens the course; the other names come from the registry, which lessons change
assert EXERCISES[0].name == "softmax"
SECOND = EXERCISES[1].name  # another exercise of the first lesson


def calls(name: str, source: str) -> bool:
    """``source`` calls ``name`` itself, the learner's own answer, which the lessons leave in the
    namespace for the later exercises (not ``torch.softmax(...)``, not a word in a docstring)."""
    return any(
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == name
        for node in ast.walk(ast.parse(source))
    )


# an exercise -> the later exercises whose reference answers call it: they use its answer
DEPENDENTS = {
    e.name: [later.name for later in EXERCISES[i + 1 :] if calls(e.name, SOLUTIONS[later.name])]
    for i, e in enumerate(EXERCISES)
}
DEPENDENTS = {name: later for name, later in DEPENDENTS.items() if later}
FIRST = next(iter(DEPENDENTS))  # the first exercise that a later one calls ...
THEN = DEPENDENTS[FIRST][0]  # ... and the first that calls it
LATER = next(e.name for e in EXERCISES if e.lesson > "00")  # a later lesson's exercise
GOOD = SOLUTIONS["softmax"]
WRONG = "# exercise: softmax\ndef softmax(scores):\n    return scores.exp() / scores.exp().sum(0, keepdim=True)\n"
SYNTAX = "# exercise: softmax\ndef softmax(scores)\n    return scores\n"
LOOP = "# exercise: softmax\ndef softmax(scores):\n    while True:\n        pass\n"
EXIT = "# exercise: softmax\nimport sys\n\nsys.exit(3)\n"
HARD_EXIT = "# exercise: softmax\nimport os\n\ndef softmax(scores):\n    os._exit(7)\n"
SKELETON = f"# exercise: softmax\ndef softmax(scores):\n    {TODO}\n"


def learner(room: Path, name: str, answers: dict[str, str]) -> Path:
    folder = room / name / "my_work"
    folder.mkdir(parents=True)
    for exercise, source in answers.items():
        (folder / f"{exercise}.py").write_text(source, encoding="utf-8")
    return room / name


def by_exercise(rows):
    return {row.exercise: row for row in rows}


def test_a_room_end_to_end(tmp_path):
    """A correct learner, a wrong one, a syntax error, an infinite loop, sys.exit, os._exit and
    an empty folder: each gets its row, and the grader itself exits 0."""
    room = tmp_path / "room"
    paths = [
        learner(room, "ada", SOLUTIONS),
        learner(room, "ben", {"softmax": WRONG}),
        learner(room, "cy", {"softmax": SYNTAX}),
        learner(
            room,
            "dee",
            {
                "softmax": LOOP,
                LATER: SOLUTIONS[LATER],
            },
        ),
        learner(room, "eve", {"softmax": EXIT}),
        learner(room, "fay", {"softmax": HARD_EXIT}),
    ]
    (room / "gus").mkdir()
    paths.append(room / "gus")
    out_csv, out_html = tmp_path / "results.csv", tmp_path / "results.html"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mha_course",
            "grade",
            *map(str, paths),
            "--csv",
            str(out_csv),
            "--html",
            str(out_html),
            "--timeout",
            "8",
        ],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    with open(out_csv, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    assert list(rows[0]) == ["learner", "exercise", "status", "cause"]
    assert len(rows) == 7 * len(EXERCISES)
    table = {(r["learner"], r["exercise"]): r for r in rows}
    assert all(table[("ada", e.name)]["status"] == "pass" for e in EXERCISES)
    assert table[("ben", "softmax")]["status"] == "fail"
    assert "first axis" in table[("ben", "softmax")]["cause"]
    assert table[("cy", "softmax")]["status"] == "error"
    assert "SyntaxError" in table[("cy", "softmax")]["cause"]
    assert table[("dee", "softmax")]["status"] == "timeout"
    # the loop cost dee only that exercise: the next one still ran, in a fresh worker
    assert table[("dee", LATER)]["status"] == "pass"
    assert table[("eve", "softmax")]["status"] == "error"
    assert "SystemExit" in table[("eve", "softmax")]["cause"]
    assert table[("fay", "softmax")]["status"] == "error"
    assert "exited (code 7)" in table[("fay", "softmax")]["cause"]
    assert all(table[("gus", e.name)]["status"] == "not_done" for e in EXERCISES)
    assert "softmax" in done.stdout and "passed / attempted" in done.stdout
    page = out_html.read_text(encoding="utf-8")
    assert (
        all(f"<tr><th>{name}</th>" in page for name in ("ada", "dee", "gus")) and "timeout" in page
    )


def test_notebooks_and_skeletons(tmp_path):
    """A submitted exercise notebook: a skeleton cell is not done, an answer is graded."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [
        nbformat.v4.new_markdown_cell("# 00"),
        nbformat.v4.new_code_cell(SKELETON),
        nbformat.v4.new_code_cell(SOLUTIONS[SECOND]),
    ]
    folder = tmp_path / "hana"
    folder.mkdir()
    nbformat.write(nb, folder / "00_setup.ipynb")
    (submission,) = collect_submissions([folder / "00_setup.ipynb"])
    assert submission.learner == "hana"
    rows = by_exercise(grade_submission(submission, timeout=30, names={"softmax", SECOND}))
    assert rows["softmax"].status == "not_done" and rows["softmax"].cause == "still the skeleton"
    assert rows[SECOND].status == "pass"


def test_saved_answers_win_over_notebook_cells_and_paths_merge(tmp_path):
    folder = learner(tmp_path, "ivy", {"softmax": GOOD})
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(WRONG)]
    nbformat.write(nb, folder / "00_setup.ipynb")
    (submission,) = collect_submissions([folder, folder / "my_work"])
    assert submission.learner == "ivy" and submission.answers["softmax"] == GOOD
    with pytest.raises(FileNotFoundError, match="no such file or folder"):
        collect_submissions([tmp_path / "nobody"])


def broken(name: str, body: str = 'raise RuntimeError("broken on purpose")') -> str:
    """An answer to exercise ``name`` that runs and defines ``name``, whose calls run ``body``."""
    return f"# exercise: {name}\nimport os\n\n\ndef {name}(*args, **kwargs):\n    {body}\n"


def grade_room(room: Path, answers: dict[str, dict[str, str]], *, timeout: float, guard: float):
    """``python -m mha_course grade`` on one folder per learner (``{learner: {exercise: source}}``):
    ``({(learner, exercise): (status, cause)}, seconds)``. A grader that has not finished after
    ``guard`` seconds fails the test instead of hanging the suite."""
    paths = [str(learner(room, name, sources)) for name, sources in answers.items()]
    out_csv = room / "results.csv"
    command = [sys.executable, "-m", "mha_course", "grade", *paths, "--csv", str(out_csv)]
    start = time.monotonic()
    try:
        done = subprocess.run(
            [*command, "--timeout", f"{timeout:g}"], capture_output=True, text=True, timeout=guard
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the grader did not finish within {guard:g} s: it hangs")
    seconds = time.monotonic() - start
    assert done.returncode == 0, done.stderr
    with open(out_csv, newline="", encoding="utf-8") as f:
        rows = csv.DictReader(f)
        return {(r["learner"], r["exercise"]): (r["status"], r["cause"]) for r in rows}, seconds


SLOW = {  # learner -> a softmax that needs 100 s, not forever: it would pass, given the time
    "slow_to_define": f"# exercise: softmax\nimport time\n\ntime.sleep(100)\n\n{GOOD}",
    "slow_on_its_first_call": (
        f"{GOOD}\n\nimport time\n\n_right = softmax\n_naps = [100]\n\n\n"
        "def softmax(scores):\n    if _naps:\n        time.sleep(_naps.pop())\n"
        "    return _right(scores)\n"
    ),
}


def test_a_slow_answer_is_stopped_at_the_per_exercise_limit(tmp_path):
    """Graded with --timeout 3, each is stopped after about 3 s (plus the time the workers take
    to start), recorded as a timeout, never waited for."""
    answers = {name: {"softmax": source} for name, source in SLOW.items()}
    table, seconds = grade_room(tmp_path, answers, timeout=3, guard=300)
    for name in SLOW:
        assert table[(name, "softmax")] == ("timeout", "still running after 3 s"), name
    assert 3 <= seconds < 60


EXITS = {  # learner -> (an answer to FIRST that ends its worker, the exit code)
    "exits_0_when_called": (broken(FIRST, "os._exit(0)"), 0),
    "exits_0_when_defined": (f"# exercise: {FIRST}\nimport os\n\nos._exit(0)\n", 0),
    "exits_5_when_called": (broken(FIRST, "os._exit(5)"), 5),
}


def test_a_worker_that_exits_in_an_answer_costs_that_exercise_only(tmp_path):
    """Exit code 0 included (a worker that ends mid-exercise has not finished): the exercise is
    an error naming the code, and the grader goes on with the next answer in a fresh worker (one
    that calls FIRST: it gets the reference) instead of starting the same answer again."""
    answers = {name: {FIRST: source, THEN: SOLUTIONS[THEN]} for name, (source, _) in EXITS.items()}
    table, _ = grade_room(tmp_path, answers, timeout=60, guard=120)
    for name, (_, code) in EXITS.items():
        status, cause = table[(name, FIRST)]
        assert status == "error" and f"exited (code {code})" in cause, (name, cause)
        assert table[(name, THEN)] == ("pass", ""), (name, table[(name, THEN)])


NOT_PASSING = {  # how an answer can fail to pass -> (the answer to exercise `name`, its status)
    "fails": (broken, "fail"),
    "skeleton": (lambda name: broken(name, TODO), "not_done"),  # never run
}  # (one that ends its worker: test_a_worker_that_exits_in_an_answer_costs_that_exercise_only)
ROOM = {  # learner -> (the exercise answered so that it does not pass, how)
    **{f"fails_{first}": (first, "fails") for first in DEPENDENTS},
    **{f"{how}_{FIRST}": (FIRST, how) for how in NOT_PASSING},
}


def test_a_later_answer_gets_the_reference_for_an_earlier_one_that_does_not_pass(tmp_path):
    """Answers run in one namespace, in lesson order, as in the lessons: for every exercise that
    a later reference answer calls, an answer to it that does not pass, then right answers to
    all the exercises that call it. They must pass: they get the course's reference instead."""
    answers = {
        name: {first: NOT_PASSING[how][0](first)}
        | {later: SOLUTIONS[later] for later in DEPENDENTS[first]}
        for name, (first, how) in ROOM.items()
    }
    table, _ = grade_room(tmp_path, answers, timeout=60, guard=600)
    for name, (first, how) in ROOM.items():
        assert table[(name, first)][0] == NOT_PASSING[how][1], (name, table[(name, first)])
        for later in DEPENDENTS[first]:
            assert table[(name, later)] == ("pass", ""), (name, later, table[(name, later)])


def test_grade_usage_errors_exit_non_zero(tmp_path):
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mha_course",
            "grade",
            str(tmp_path / "nobody"),
            "--csv",
            str(tmp_path / "x.csv"),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "no such file or folder" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "mha_course", "grade", str(tmp_path), "--timeout", "0"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "--timeout must be positive" in done.stderr


def test_progress_lists_every_exercise(tmp_path):
    folder = learner(tmp_path, "me", {"softmax": GOOD, SECOND: WRONG.replace("softmax", SECOND)})
    done = subprocess.run(
        [sys.executable, "-m", "mha_course", "progress", "--dir", str(folder / "my_work")],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert any("✅ softmax" in line for line in lines)
    assert any(f"❌ {SECOND}" in line for line in lines)
    assert any(f"⏳ {LATER}" in line and "not done yet" in line for line in lines)
    assert lines[-1] == f"1 of {len(EXERCISES)} exercises done"


def test_summary_and_html_from_rows(tmp_path):
    rows = [
        Row("a", "softmax", "00", "pass"),
        Row("b", "softmax", "00", "fail", "case 'x': <wrong> & more"),
        Row("c", "softmax", "00", "not_done", "no answer saved"),
    ]
    assert summary_lines(rows)[1].split() == ["00", "softmax", "1", "/", "2", "(1", "fail)"]
    write_html(rows, tmp_path / "r.html")
    page = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "&lt;wrong&gt; &amp; more" in page and "<wrong>" not in page


def test_nbgrader_style_folders_and_course_clones(tmp_path):
    """nbgrader's submitted/<learner>/<assignment>/<notebook> is that learner's; a learner's whole
    clone of the course is read from notebooks/ and my_work/, never from the solutions."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(GOOD)]
    assignment = tmp_path / "submitted" / "kim" / "00_setup"
    assignment.mkdir(parents=True)
    nbformat.write(nb, assignment / "00_setup.ipynb")
    for path in (tmp_path / "submitted" / "kim", assignment / "00_setup.ipynb"):
        (submission,) = collect_submissions([path])
        assert submission.learner == "kim" and submission.answers == {"softmax": GOOD}
    clone = tmp_path / "lee"
    (clone / "notebooks" / "solutions").mkdir(parents=True)
    nbformat.write(nb, clone / "notebooks" / "solutions" / "00_setup.ipynb")
    skeleton = nbformat.v4.new_notebook()
    skeleton.cells = [nbformat.v4.new_code_cell(SKELETON)]
    nbformat.write(skeleton, clone / "notebooks" / "00_setup.ipynb")
    (submission,) = collect_submissions([clone / "notebooks"])
    assert submission.learner == "lee" and submission.answers == {"softmax": SKELETON}


def test_a_worker_killed_outside_an_exercise_is_started_again(monkeypatch):
    """A worker killed while it starts or between two exercises (out of memory on a busy
    machine) blames no answer: a fresh worker is started; one that keeps dying so is reported as
    the grader's error, not the learner's."""
    from mha_course.grading import runner
    from mha_course.grading.answers import Submission

    real, calls = runner._run_worker, []

    def dies_first(job, timeout, folder, attempt):
        calls.append(attempt)
        if attempt == 0:
            return [], "died between exercises -9"
        return real(job, timeout, folder, attempt)

    monkeypatch.setattr(runner, "_run_worker", dies_first)
    right = {"softmax": GOOD}
    rows = runner.grade_submission(Submission("ada", right), names={"softmax"})
    assert [(r.exercise, r.status) for r in rows] == [("softmax", "pass")] and calls == [0, 1]

    monkeypatch.setattr(runner, "_run_worker", lambda *a: ([], "died between exercises -9"))
    rows = runner.grade_submission(Submission("ada", right), names={"softmax"})
    assert [(r.status, r.cause) for r in rows] == [("error", "the grader's worker kept stopping")]
