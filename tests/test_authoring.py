"""The notebooks as files (tools/authoring.py): generated versions up to date, clean metadata,
shared set-up cell, badges and links.

(nbval re-executes them and compares the outputs; this file checks what nbval does not.)
"""

import json
import re
from pathlib import Path

import nbformat
import pytest

from mha_course import lessons
from mha_course.exercises import EXERCISES
from tools import authoring

ROOT = Path(__file__).resolve().parent.parent
ALL = authoring.lesson_notebooks()


def test_lesson_notebooks_are_both_versions_of_every_lesson():
    assert len(ALL) == 2 * len(authoring.solution_paths()) and all(p.exists() for p in ALL)


def test_there_is_a_solution_and_an_exercise_version_of_every_lesson():
    solutions = {p.name for p in authoring.solution_paths()}
    exercises = {p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert solutions and solutions == exercises


def test_exercise_notebooks_are_not_stale():
    problems = authoring.stale_notebooks()
    assert not problems, "run `python tools/authoring.py build`:\n" + "\n".join(problems)


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(ROOT)))
def test_notebook_hygiene(path):
    raw = json.loads(path.read_text(encoding="utf-8"))
    nb = nbformat.reads(json.dumps(raw), as_version=4)
    nbformat.validate(nb)
    assert nb.metadata["kernelspec"]["name"] == "python3"
    assert "widgets" not in nb.metadata, "saved widget state: strip it"
    code = [c for c in nb.cells if c.cell_type == "code"]
    assert code[0].source == authoring.setup_cell_source(), (
        "the first code cell must be the shared set-up cell"
    )
    for cell in code:
        assert cell.execution_count is not None, f"not executed: {cell.source[:60]!r}"
        for output in cell.outputs:
            assert output.output_type != "error", f"error saved in {cell.source[:60]!r}"
            if output.output_type == "stream":
                assert output.name == "stdout", (
                    f"stderr saved in {cell.source[:60]!r}: {output.text[:200]!r}"
                )


@pytest.mark.parametrize("path", authoring.solution_paths(), ids=lambda p: p.name)
def test_exercise_version_has_skeletons_and_hints(path):
    solution = nbformat.read(path, as_version=4)
    exercise = nbformat.read(authoring.exercise_path(path), as_version=4)
    n_blocks = sum(c.source.count(lessons.BEGIN) for c in solution.cells if c.cell_type == "code")
    n_todo = sum(
        c.source.count("raise NotImplementedError") for c in exercise.cells if c.cell_type == "code"
    )
    assert n_todo == n_blocks
    assert not any(lessons.BEGIN in c.source for c in exercise.cells)
    for cell in solution.cells:
        if cell.cell_type == "code" and lessons.BEGIN in cell.source:
            assert cell.source.lstrip().startswith("# exercise: "), (
                "an exercise cell starts with its marker"
            )
    if n_blocks:
        markdown = "\n".join(c.source for c in exercise.cells if c.cell_type == "markdown")
        assert "<details><summary><b>Hint" in markdown, "every exercise needs at least one hint"


def test_every_registered_exercise_has_a_cell_and_a_hint():
    cells = {}
    for path in authoring.solution_paths():
        nb = nbformat.read(path, as_version=4)
        for i, cell in enumerate(nb.cells):
            match = re.match(r"# exercise: (\w+)", cell.source)
            if cell.cell_type == "code" and match:
                following = "\n".join(c.source for c in nb.cells[i + 1 : i + 3])
                cells[match.group(1)] = (path.name, following)
    for exercise in EXERCISES:
        assert exercise.name in cells, f"no '# exercise: {exercise.name}' cell in any notebook"
        notebook, following = cells[exercise.name]
        assert notebook.startswith(exercise.lesson), (
            f"{exercise.name} is registered for lesson {exercise.lesson}"
        )
        assert "Hint" in following, f"{exercise.name}: put a hint right after the exercise cell"


def test_setup_cell_installs_from_the_one_repository_url_keeping_colabs_packages():
    cell = authoring.setup_cell_source()
    url = authoring.repository_url()
    assert url.startswith("https://github.com/")
    assert f"git+{url}@{authoring.course_ref()}" in cell
    assert "-c /tmp/colab-packages.txt" in cell and "pip list --format=freeze" in cell
    assert 'if "google.colab" in sys.modules and not find_spec("mha_course"):' in cell


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(ROOT)))
def test_badges_open_this_very_notebook_at_the_release(path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0].source.split("\n")[0]
    relative = path.relative_to(ROOT).as_posix()
    assert first == authoring.badges_line(relative)
    assert f"/blob/{authoring.course_ref()}/{relative})" in first


def test_no_notebook_links_to_a_missing_file():
    for path in ALL:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            for target in re.findall(r"\]\(([^)\s]+)\)", cell.source):
                if target.startswith(("http://", "https://", "#", "mailto:", "attachment:")):
                    continue  # a picture's attachment is checked in tests/test_diagrams.py
                assert (path.parent / target.split("#")[0]).exists(), (
                    f"{path.name}: broken link {target}"
                )


def test_clean_joins_a_stream_sent_in_pieces():
    import nbformat

    cell = nbformat.v4.new_code_cell("print('a'); print('b')")
    cell.outputs = [
        nbformat.v4.new_output("stream", name="stdout", text="a\n"),
        nbformat.v4.new_output("stream", name="stdout", text="b\n"),
        nbformat.v4.new_output("stream", name="stderr", text="c\n"),
    ]
    nb = authoring.clean(nbformat.v4.new_notebook(cells=[cell]))
    assert [(o.name, o.text) for o in nb.cells[0].outputs] == [
        ("stdout", "a\nb\n"),
        ("stderr", "c\n"),
    ]
