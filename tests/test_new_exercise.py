"""``authoring.py new-exercise`` scaffolds the two places an exercise lives and its test, in a
copy of the course: the files it writes are valid, lint-clean, registered in lesson order, and
nothing that exists is overwritten."""

import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tools import new_exercise as scaffold

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def course(tmp_path, monkeypatch):
    """A copy of what the scaffold touches: lesson 03's solution notebook, the checks package's
    __init__, the tests folder."""
    (tmp_path / "notebooks" / "solutions").mkdir(parents=True)
    lesson = next((ROOT / "notebooks" / "solutions").glob("03_*.ipynb"))
    shutil.copy(lesson, tmp_path / "notebooks" / "solutions" / lesson.name)
    (tmp_path / "mha_course" / "checks").mkdir(parents=True)
    shutil.copy(ROOT / "mha_course" / "checks" / "__init__.py", tmp_path / "mha_course" / "checks")
    (tmp_path / "tests").mkdir()
    monkeypatch.setattr(scaffold, "ROOT", tmp_path)
    monkeypatch.setattr(scaffold, "CHECKS", tmp_path / "mha_course" / "checks")
    return tmp_path


def test_it_writes_the_cell_the_checker_and_the_test(course):
    written = scaffold.new_exercise("RMSNorm", "03")
    checker = course / "mha_course" / "checks" / "l03_rms_norm.py"
    test = course / "tests" / "test_checks_rms_norm.py"
    assert checker in written and test in written
    init = (course / "mha_course" / "checks" / "__init__.py").read_text()
    modules = [line.strip().strip('",') for line in init.splitlines() if line.startswith('    "l')]
    assert modules.index("l03_rms_norm") == max(i for i, m in enumerate(modules) if m < "l04")
    nb = nbformat.read(next((course / "notebooks" / "solutions").glob("03_*")), as_version=4)
    assert nb.cells[-2].source.startswith("# exercise: RMSNorm\n")
    assert (
        "# BEGIN SOLUTION" in nb.cells[-2].source
        and "check_rms_norm(RMSNorm)" in nb.cells[-1].source
    )
    for path in (checker, test):
        compile(path.read_text(), str(path), "exec")
    lint = subprocess.run(
        [sys.executable, "-m", "ruff", "check", "--no-cache", str(checker), str(test)],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert lint.returncode == 0, lint.stdout


def test_it_refuses_bad_names_lessons_and_overwrites(course):
    with pytest.raises(ValueError, match="is no name"):
        scaffold.new_exercise("rms-norm", "03")
    with pytest.raises(ValueError, match="an existing lesson"):
        scaffold.new_exercise("rms_norm", "42")
    scaffold.new_exercise("rms_norm", "03")
    before = (course / "tests" / "test_checks_rms_norm.py").read_text()
    with pytest.raises(ValueError, match="exists already: nothing was written"):
        scaffold.new_exercise("rms_norm", "03")
    assert (course / "tests" / "test_checks_rms_norm.py").read_text() == before
