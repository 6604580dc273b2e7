"""The notebooks as files: generated versions up to date, clean metadata, shared set-up cell.

(nbval re-executes them and compares the outputs; this file checks what nbval does not.)
"""

import json
import re
from pathlib import Path

import nbformat
import pytest

from mha_course import authoring
from mha_course.exercises import EXERCISES

ROOT = Path(__file__).resolve().parent.parent
ALL = sorted(ROOT.glob("notebooks/**/*.ipynb"))
ALL = [p for p in ALL if ".ipynb_checkpoints" not in p.parts and "backup" not in p.name]


def test_there_is_a_solution_and_an_exercise_version_of_every_lesson():
    solutions = {p.name for p in authoring.solution_paths()}
    exercises = {p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb")}
    assert solutions and solutions == exercises


def test_exercise_notebooks_are_not_stale():
    problems = authoring.stale_notebooks()
    assert not problems, "run `python -m mha_course.authoring build`:\n" + "\n".join(problems)


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
    n_blocks = sum(c.source.count(authoring.BEGIN) for c in solution.cells if c.cell_type == "code")
    n_todo = sum(
        c.source.count("raise NotImplementedError") for c in exercise.cells if c.cell_type == "code"
    )
    assert n_todo == n_blocks
    assert not any(authoring.BEGIN in c.source for c in exercise.cells)
    for cell in solution.cells:
        if cell.cell_type == "code" and authoring.BEGIN in cell.source:
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


def test_exercise_source_keeps_comments_and_drops_code():
    source = "def f(x):\n    # BEGIN SOLUTION\n    # 1. double it\n    y = 2 * x\n    return y\n    # END SOLUTION\n"
    assert authoring.exercise_source(source) == (
        "def f(x):\n    # 1. double it\n    " + authoring.TODO + "\n"
    )


def test_exercise_source_keeps_the_depth_of_nested_comments_inside_them():
    source = (
        "def f(xs):\n    # BEGIN SOLUTION\n    # 1. loop\n    for x in xs:\n        # 1a. print it\n"
        "        print(x)\n    # END SOLUTION\n"
    )
    assert authoring.exercise_source(source) == (
        "def f(xs):\n    # 1. loop\n    #     1a. print it\n    " + authoring.TODO + "\n"
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
        authoring.exercise_source(source)


def test_setup_cell_installs_from_the_one_repository_url_without_touching_torch():
    cell = authoring.setup_cell_source()
    url = authoring.repository_url()
    assert url.startswith("https://github.com/")
    assert f"git+{url}@{authoring.release_tag()}" in cell
    assert "-c /tmp/keep-torch.txt" in cell and "torch=={torch.__version__}" in cell
    assert 'if "google.colab" in sys.modules:' in cell


def test_reset_backs_up_and_regenerates(tmp_path, monkeypatch):
    solution = authoring.solution_paths()[0]
    monkeypatch.setattr(authoring, "NOTEBOOKS", tmp_path)
    target = tmp_path / solution.name
    target.write_text("my work", encoding="utf-8")
    authoring.reset(solution.name[:2])
    backups = list(tmp_path.glob("*.backup-*.ipynb"))
    assert len(backups) == 1 and backups[0].read_text(encoding="utf-8") == "my work"
    fresh = nbformat.read(target, as_version=4)
    assert not any(authoring.BEGIN in c.source for c in fresh.cells)


@pytest.mark.parametrize("path", ALL, ids=lambda p: str(p.relative_to(ROOT)))
def test_badges_open_this_very_notebook_at_the_release(path):
    nb = nbformat.read(path, as_version=4)
    first = nb.cells[0].source.split("\n")[0]
    relative = path.relative_to(ROOT).as_posix()
    assert first == authoring.badges_line(relative)
    assert f"/blob/{authoring.release_tag()}/{relative})" in first


def test_no_notebook_links_to_a_missing_file():
    for path in ALL:
        nb = nbformat.read(path, as_version=4)
        for cell in nb.cells:
            if cell.cell_type != "markdown":
                continue
            for target in re.findall(r"\]\(([^)\s]+)\)", cell.source):
                if target.startswith(("http://", "https://", "#", "mailto:")):
                    continue
                assert (path.parent / target.split("#")[0]).exists(), (
                    f"{path.name}: broken link {target}"
                )
            assert "attachment:" not in cell.source, "draw figures with mha_course.diagrams instead"
