"""progress and grade: every verdict a room can produce, end to end, in subprocesses."""

import csv
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mha_course.exercises import EXERCISES
from mha_course.grading import Submission, collect_submissions
from mha_course.grading.report import summary_lines, write_html
from mha_course.grading.runner import Row, grade_submission
from mha_course.work import TODO
from tools import authoring

SOLUTIONS = authoring.solution_answers()
# softmax opens the course; the other names come from the registry, which lessons change
assert EXERCISES[0].name == "softmax"
SECOND = EXERCISES[1].name  # another exercise of the first lesson
LATER = next(  # a later lesson's exercise, one that softmax's answer feeds if any does
    (e.name for e in EXERCISES if e.lesson > "00" and "softmax(" in SOLUTIONS[e.name]),
    next(e.name for e in EXERCISES if e.lesson > "00"),
)
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


def test_a_later_answer_uses_the_learners_earlier_one_or_the_reference(tmp_path):
    """Answers run in one namespace, in lesson order: a wrong earlier answer is replaced by the
    reference for the later exercises, as in the lessons."""
    answers = {
        "softmax": WRONG,
        LATER: SOLUTIONS[LATER],
    }
    rows = by_exercise(grade_submission(Submission("jo", answers), timeout=30, names=set(answers)))
    assert rows["softmax"].status == "fail"
    assert rows[LATER].status == "pass"


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
