"""Scaffold a new exercise: the two places it lives, and its test.

    python tools/authoring.py new-exercise rms_norm --lesson 03

writes

* an exercise cell and its check cell at the end of the lesson's solution notebook
  (``notebooks/solutions/03_*.ipynb``): ``# exercise: rms_norm``, a docstring to fill, the answer
  between ``# BEGIN SOLUTION`` and ``# END SOLUTION``, then ``check_rms_norm(rms_norm)``;
* its checker module ``mha_course/checks/l03_rms_norm.py``: the declaration (name, lesson,
  reference, points, what to do) and an empty case table, and the module's place in
  ``mha_course/checks/__init__.py``'s LESSON_MODULES (after the lesson's other modules);
* its test ``tests/test_checks_rms_norm.py``, which fails until the table has cases and
  mistakes, each mistake with a planted wrong answer.

CONTRIBUTING.md walks through the rest: the reference, the cases, the mistakes and their
messages, the hints, and the build.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

from mha_course.checks._core import snake_case as snake

ROOT = Path(__file__).resolve().parent.parent
CHECKS = ROOT / "mha_course" / "checks"

CHECKER = '''"""Lesson {lesson}'s {name}: what it computes, in the lesson's words."""

from __future__ import annotations

from ._core import exercise
from ._table import Case, Out, Table, seeded_randn


def {name}_reference(x):
    """The reference: the library's implementation, or a thin adapter over it."""
    raise NotImplementedError("the reference of {name}")


def _cases():
    randn = seeded_randn(0)
    yield Case("a (2, 3) tensor", (randn(2, 3),))  # what each case is, with its shapes


{table} = Table(
    cases=_cases,
    reference={name}_reference,
    mistakes=[],  # Mistake("its name", a wrong version called as the answer is, "its cause")
    outputs=[Out("the result")],
)
check_{snake} = exercise(
    "{name}",
    "{lesson}",
    reference={name}_reference,
    todo="Replace `raise NotImplementedError` with your {name}.",
    table={table},
)
__all__ = ["check_{snake}", "{name}_reference"]
'''

TEST = '''"""{name}'s checker: it passes its reference, and names each classic mistake."""

import pytest

from mha_course.checks import check_{snake}

from checker_helpers import fails_with, passes

TABLE = check_{snake}.table


def test_{snake}_has_cases_and_mistakes():
    assert list(TABLE.cases()), "the case table is empty: add the cases"
    assert TABLE.mistakes, "no classic mistake is named yet: add them, each with a test below"


def test_{snake}_passes_its_reference(capsys):
    passes(check_{snake}, TABLE.reference, capsys)


# (a wrong answer, as a learner writes it; words of the cause it must be told)
WRONG = []


@pytest.mark.parametrize("candidate, phrase", WRONG)
def test_{snake}_names_each_mistake(candidate, phrase):
    fails_with(check_{snake}, candidate, "Likely cause", phrase)
'''

CELL = '''# exercise: {name}
def {name}(x):
    """What it computes, its shapes, a small example, the properties it must have."""
    # BEGIN SOLUTION
    raise NotImplementedError  # the answer goes here
    # END SOLUTION'''


def new_exercise(name: str, lesson: str) -> list[Path]:
    """Write the exercise's cell, checker module and test (see the module's docstring); returns
    the files written. Refuses a name that is no identifier, a lesson that does not exist, and
    files that exist already (nothing is overwritten)."""
    if not name.isidentifier():
        raise ValueError(f"an exercise's name is what the learner defines: {name!r} is no name")
    solutions = sorted((ROOT / "notebooks" / "solutions").glob(f"{lesson}_*.ipynb"))
    if not re.fullmatch(r"\d\d", lesson) or not solutions:
        raise ValueError(
            f"lesson must be the number of an existing lesson, e.g. 03; got {lesson!r}"
        )
    module = f"l{lesson}_{snake(name)}"
    checker, test = CHECKS / f"{module}.py", ROOT / "tests" / f"test_checks_{snake(name)}.py"
    for path in (checker, test):
        if path.exists():
            raise ValueError(f"{path.relative_to(ROOT)} exists already: nothing was written")
    words = {"name": name, "lesson": lesson, "snake": snake(name), "table": snake(name).upper()}
    checker.write_text(CHECKER.format(**words), encoding="utf-8")
    test.write_text(TEST.format(**words), encoding="utf-8")
    _add_to_lesson_modules(module, lesson)
    notebook = solutions[0]
    nb = nbformat.read(notebook, as_version=4)
    nb.cells += [
        nbformat.v4.new_code_cell(CELL.format(**words)),
        nbformat.v4.new_code_cell(
            f"from mha_course.checks import check_{snake(name)}\n\ncheck_{snake(name)}({name})"
        ),
    ]
    nbformat.write(nb, notebook)
    return [checker, test, CHECKS / "__init__.py", notebook]


def _add_to_lesson_modules(module: str, lesson: str) -> None:
    """Insert ``module`` into LESSON_MODULES after the last module of its lesson or before it."""
    init = CHECKS / "__init__.py"
    text = init.read_text(encoding="utf-8")
    names = re.findall(r'^    "(l\d\d_\w+)",$', text, re.MULTILINE)
    after = [n for n in names if n[1:3] <= lesson]
    anchor = f'    "{after[-1]}",\n' if after else "LESSON_MODULES = (\n"
    init.write_text(text.replace(anchor, anchor + f'    "{module}",\n', 1), encoding="utf-8")
