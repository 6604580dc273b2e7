"""The learner's saved answers: never replaced by a skeleton, never lost, movable for the tests."""

from pathlib import Path

import pytest

from mha_course import lessons, work

ANSWER = "# exercise: softmax\ndef softmax(scores):\n    return scores.softmax(-1)\n"
OTHER_ANSWER = "# exercise: softmax\ndef softmax(scores):\n    return scores.exp() / scores.exp().sum(-1, keepdim=True)\n"
SKELETON = (
    f"# exercise: softmax\ndef softmax(scores):\n    # 1. subtract the max\n    {lessons.TODO}\n"
)


def test_an_answer_is_saved_and_a_skeleton_or_other_cell_is_not(tmp_path):
    assert work.save_answer("x = 1", tmp_path) is None
    assert work.save_answer(SKELETON, tmp_path) is None
    assert not (tmp_path / "softmax.py").exists()
    path = work.save_answer(ANSWER, tmp_path)
    assert path == tmp_path / "softmax.py" and path.read_text() == ANSWER


def test_a_skeleton_never_replaces_a_saved_answer(tmp_path):
    work.save_answer(ANSWER, tmp_path)
    work.save_answer(SKELETON, tmp_path)
    assert (tmp_path / "softmax.py").read_text() == ANSWER
    assert work.history(directory=tmp_path) == []


def test_a_replaced_answer_is_kept_in_the_history(tmp_path):
    work.save_answer(ANSWER, tmp_path)
    work.save_answer(ANSWER, tmp_path)  # the same answer again: nothing to keep
    work.save_answer(OTHER_ANSWER, tmp_path)
    work.save_answer(ANSWER, tmp_path)
    kept = work.history("softmax", tmp_path)
    assert [p.read_text() for p in kept] == [ANSWER, OTHER_ANSWER]
    assert (tmp_path / "softmax.py").read_text() == ANSWER
    assert work.history("LayerNorm", tmp_path) == []


def test_the_work_folder_follows_the_environment(tmp_path, monkeypatch):
    monkeypatch.delenv(work.WORK_DIR_VARIABLE, raising=False)
    assert work.work_dir() == Path("my_work")
    monkeypatch.setenv(work.WORK_DIR_VARIABLE, str(tmp_path / "private"))
    assert work.save_answer(ANSWER) == tmp_path / "private" / "softmax.py"


@pytest.mark.parametrize(
    "source, name",
    [
        ("# exercise: LayerNorm\nclass LayerNorm: ...", "LayerNorm"),
        ("# a comment", None),
        # what %load puts in a cell: the marker is found below its line
        ("# %load my_work/LayerNorm.py\n# exercise: LayerNorm\nclass LayerNorm: ...", "LayerNorm"),
        ("# %load my_work/.history/softmax.20260101-120000.py\n" + ANSWER, "softmax"),
        ("%load my_work/softmax.py", None),  # the magic itself, before it ran
        ("x = 1\n# exercise: softmax\n", None),
    ],
)
def test_exercise_name(source, name):
    assert work.exercise_name(source) == name


def test_an_answer_restored_with_load_is_saved_as_it_was_written(tmp_path):
    work.save_answer(OTHER_ANSWER, tmp_path)
    restored = "# %load my_work/.history/softmax.20260101-120000.py\n" + ANSWER
    assert work.is_answer(restored)
    assert work.save_answer(restored, tmp_path).read_text() == ANSWER
    assert [p.read_text() for p in work.history("softmax", tmp_path)] == [OTHER_ANSWER]
    assert work.save_answer("# %load my_work/softmax.py\n" + SKELETON, tmp_path) is None


def test_the_history_command_lists_the_folder_the_notebooks_use(tmp_path, monkeypatch, capsys):
    from mha_course.__main__ import main

    monkeypatch.setenv(work.WORK_DIR_VARIABLE, str(tmp_path))
    work.save_answer(ANSWER)
    work.save_answer(OTHER_ANSWER)
    assert main(["history", "softmax"]) == 0
    out = capsys.readouterr().out
    [kept] = work.history("softmax")
    assert f"(in {tmp_path}/.history/)" in out and f"  {kept.name}" in out
    assert f"`%load {tmp_path}/.history/<its name>`" in out


# ---------------------------------------------------------------- end to end, in a copy of the course

ROOT = Path(__file__).resolve().parent.parent
LEARNER_ANSWER = (
    "# exercise: softmax\ndef softmax(scores):\n    return torch.softmax(scores, dim=-1)  # mine\n"
)


KEPT_CELLS = (
    "# Set-up",
    "import torch\n",
    "# exercise: softmax",
    "from mha_course.checks import check_softmax",
)


def short_lesson_00(path: Path, to: Path) -> None:
    """Lesson 00 cut to its title, set-up, exercise and check cells, with their stored outputs."""
    import nbformat

    nb = nbformat.read(path, as_version=4)
    nb.cells = [nb.cells[0]] + [c for c in nb.cells if c.source.startswith(KEPT_CELLS)]
    nbformat.write(nb, to)


def course_copy(tmp_path: Path) -> Path:
    """Lesson 00 of the course (short), both versions, with a learner's saved answer, an earlier
    notebook kept by a reset, and a learner's own copy of the lesson (which fails if it is run)."""
    import shutil

    course = tmp_path / "course"
    (course / "notebooks" / "solutions").mkdir(parents=True)
    for name in ("pyproject.toml", "conftest.py"):
        shutil.copy(ROOT / name, course / name)
    shutil.copytree(ROOT / "tools", course / "tools", ignore=shutil.ignore_patterns("__pycache__"))
    for version in ("notebooks", "notebooks/solutions"):
        short_lesson_00(ROOT / version / "00_setup.ipynb", course / version / "00_setup.ipynb")
    my_work = course / "notebooks" / "my_work"
    (my_work / ".history").mkdir(parents=True)
    (my_work / "softmax.py").write_text(LEARNER_ANSWER, encoding="utf-8")
    broken = (ROOT / "notebooks" / "00_setup.ipynb").read_text(encoding="utf-8")
    broken = broken.replace("Ready: device = cpu", "a stored output no run can give")
    (my_work / ".history" / "00_setup.20260101-120000.ipynb").write_text(broken, encoding="utf-8")
    (course / "notebooks" / "00_setup-Copy1.ipynb").write_text(broken, encoding="utf-8")
    return course


def snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_the_tests_never_read_or_write_the_learners_work(tmp_path, monkeypatch):
    import subprocess
    import sys

    monkeypatch.delenv(work.WORK_DIR_VARIABLE, raising=False)
    course = course_copy(tmp_path)
    before = snapshot(course / "notebooks" / "my_work")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "0", "-v", "notebooks"],
        cwd=course,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout[-3000:]
    # nbval names a cell "notebooks/00_setup::ipynb::Cell 0"
    ran = {line.split("::Cell")[0] for line in done.stdout.splitlines() if "::Cell" in line}
    collected = {name.replace("::ipynb", ".ipynb") for name in ran}
    assert collected == {"notebooks/00_setup.ipynb", "notebooks/solutions/00_setup.ipynb"}
    assert snapshot(course / "notebooks" / "my_work") == before


def test_rerunning_a_lesson_keeps_the_answer_and_every_earlier_version(tmp_path, monkeypatch):
    import shutil

    import nbformat
    from nbclient import NotebookClient

    monkeypatch.delenv(work.WORK_DIR_VARIABLE, raising=False)
    course = course_copy(tmp_path)
    lesson = course / "notebooks" / "00_setup.ipynb"

    def run_all_cells() -> tuple[str, str]:
        """Run the learner's notebook top to bottom; what its exercise cell and the check cell
        below it printed."""
        nb = nbformat.read(lesson, as_version=4)
        resources = {"metadata": {"path": str(lesson.parent)}}
        NotebookClient(nb, timeout=300, resources=resources).execute()
        at = next(i for i, c in enumerate(nb.cells) if "# exercise: softmax" in c.source)
        return tuple("".join(o.get("text", "") for o in c.outputs) for c in nb.cells[at : at + 2])

    # The lesson's skeleton, never touched: the answer saved earlier stays and runs in its
    # place, the cell says so, and the check tests it.
    said, checked = run_all_cells()
    assert (lesson.parent / "my_work" / "softmax.py").read_text() == LEARNER_ANSWER
    assert "runs in place of this skeleton" in said and "`%load my_work/softmax.py`" in said
    assert "✅ softmax" in checked
    # Another answer written in the notebook replaces it; the earlier one is kept in the history.
    shutil.copy(course / "notebooks" / "solutions" / "00_setup.ipynb", lesson)
    run_all_cells()
    solution = (lesson.parent / "my_work" / "softmax.py").read_text()
    assert solution != LEARNER_ANSWER
    [kept] = work.history("softmax", lesson.parent / "my_work")
    assert kept.read_text() == LEARNER_ANSWER
    # The earlier version brought back with %load, then run: it is the answer again, and the one
    # it replaces is kept.
    nb = nbformat.read(lesson, as_version=4)
    cell = next(c for c in nb.cells if c.source.startswith("# exercise: softmax"))
    cell.source = f"# %load my_work/.history/{kept.name}\n" + kept.read_text()
    nbformat.write(nb, lesson)
    said, checked = run_all_cells()
    assert (lesson.parent / "my_work" / "softmax.py").read_text() == LEARNER_ANSWER
    history = work.history("softmax", lesson.parent / "my_work")
    assert [p.read_text() for p in history] == [LEARNER_ANSWER, solution]
    assert said == "" and "✅ softmax" in checked
