"""The learner's notebook generated from its solution, and ``python -m mha_course reset``."""

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from mha_course import lessons

ROOT = Path(__file__).resolve().parent.parent


def test_exercise_source_keeps_comments_and_drops_code():
    source = "def f(x):\n    # BEGIN SOLUTION\n    # 1. double it\n    y = 2 * x\n    return y\n    # END SOLUTION\n"
    assert lessons.exercise_source(source) == (
        "def f(x):\n    # 1. double it\n    " + lessons.TODO + "\n"
    )


def test_exercise_source_keeps_the_depth_of_nested_comments_inside_them():
    source = (
        "def f(xs):\n    # BEGIN SOLUTION\n    # 1. loop\n    for x in xs:\n        # 1a. print it\n"
        "        print(x)\n    # END SOLUTION\n"
    )
    assert lessons.exercise_source(source) == (
        "def f(xs):\n    # 1. loop\n    #     1a. print it\n    " + lessons.TODO + "\n"
    )


@pytest.mark.parametrize(
    "source",
    [
        "# BEGIN SOLUTION\nx = 1\n",
        "x = 1\n# END SOLUTION\n",
        "# BEGIN SOLUTION\n# BEGIN SOLUTION\n# END SOLUTION\n",
    ],
)
def test_unbalanced_markers_are_an_error(source):
    with pytest.raises(ValueError):
        lessons.exercise_source(source)


def test_the_exercise_version_opens_itself_on_colab():
    solution = lessons.solution_paths(ROOT)[1]
    nb = lessons.make_exercise_notebook(nbformat.read(solution, as_version=4), solution.name)
    first = nb.cells[0].source.split("\n")[0]
    assert f"/notebooks/{solution.name})" in first and "solutions/" not in first


def test_the_course_is_found_from_any_folder_inside_it(tmp_path):
    assert lessons.course_directory(ROOT / "notebooks" / "solutions") == ROOT
    with pytest.raises(FileNotFoundError, match="notebooks/solutions"):
        lessons.course_directory(tmp_path)


def fake_course(tmp_path: Path) -> Path:
    """A course folder with lesson 00 only."""
    (tmp_path / "notebooks" / "solutions").mkdir(parents=True)
    solution = lessons.solution_paths(ROOT, ["00"])[0]
    (tmp_path / "notebooks" / "solutions" / solution.name).write_bytes(solution.read_bytes())
    return tmp_path / "notebooks" / solution.name


def test_reset_keeps_the_old_notebook_out_of_the_collected_folders(tmp_path):
    target = fake_course(tmp_path)
    target.write_text("my work", encoding="utf-8")
    lessons.reset("00", tmp_path)
    lessons.reset("00", tmp_path)  # twice in the same second: both old versions are kept
    kept = list((tmp_path / "notebooks" / "my_work" / ".history").glob("00_setup.*.ipynb"))
    assert len(kept) == 2 and "my work" in [p.read_text(encoding="utf-8") for p in kept]
    fresh = nbformat.read(target, as_version=4)
    assert not any(lessons.BEGIN in c.source for c in fresh.cells)
    assert any(lessons.TODO in c.source for c in fresh.cells)
    assert sorted(p.name for p in (tmp_path / "notebooks").glob("*.ipynb")) == [target.name]


def test_reset_is_one_command_run_from_inside_the_course(tmp_path, monkeypatch):
    target = fake_course(tmp_path)
    done = subprocess.run(
        [sys.executable, "-m", "mha_course", "reset", "00"],
        cwd=tmp_path / "notebooks",
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert target.exists() and "fresh notebook: notebooks/00_setup.ipynb" in done.stdout
    # the same command with a lesson that does not exist (in-process: the start-up is proven above)
    from mha_course.__main__ import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as wrong:
        main(["reset", "42"])
    assert "the lessons are 00" in str(wrong.value.code)  # printed on stderr, exit status 1
