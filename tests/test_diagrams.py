"""The course's pictures are drawn by code: images/ holds exactly what that code draws, and every
lesson shows its pictures, both versions, each carrying the very file of images/.

(The pixels depend on the matplotlib version, so images/ is compared with the code by name only;
the notebooks' attachments are compared with images/ byte for byte.)
"""

import base64
import copy
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import nbformat  # noqa: E402
import pytest  # noqa: E402

from mha_course import diagrams  # noqa: E402
from tools import authoring  # noqa: E402

notebook_images = authoring.notebook_images
IMAGES = Path(__file__).resolve().parent.parent / "images"
BY_FILE = {picture.filename: picture for picture in diagrams.PICTURES}

# A picture drawn for a lesson that is not written yet: kept in images/ so that the lesson's
# author finds it ready. When the lesson's notebook exists, it must show the picture (below), and
# the picture leaves this list.
AWAITING_THEIR_LESSON: dict[str, str] = {}


def lesson_exists(lesson: str) -> bool:
    return bool(authoring.solution_paths([lesson]))


DRAWINGS = sorted(name for name in diagrams.__all__ if name.endswith("_diagram"))


def test_every_picture_is_drawn_by_a_public_diagram_function():
    assert {draw.__name__ for draw in diagrams.DIAGRAMS.values()} <= set(DRAWINGS)


@pytest.mark.parametrize("name", DRAWINGS)
def test_each_diagram_draws_labelled_elements(name):
    fig = getattr(diagrams, name)()
    try:
        patches = sum(len(ax.patches) for ax in fig.axes)
        texts = [t.get_text() for ax in fig.axes for t in ax.texts if t.get_text().strip()]
        assert patches >= 6 and len(texts) >= 4, "boxes and arrows, with their labels"
        titles = [ax.get_title() for ax in fig.axes] + [t.get_text() for t in fig.texts]
        assert any(titles), "a title says what the picture is"
        for ax in fig.axes:
            if ax.axison:  # a picture with axes labels them
                assert ax.get_xlabel() and ax.get_ylabel(), f"{name}: unlabelled axes"
    finally:
        plt.close(fig)


def test_images_folder_matches_the_diagram_code(tmp_path):
    assert {p.name for p in IMAGES.glob("*")} == set(BY_FILE), (
        "run `python tools/authoring.py images`"
    )
    built = diagrams.build(tmp_path)
    assert [p.name for p in built] == [p.filename for p in diagrams.PICTURES]
    assert len(set(diagrams.DIAGRAMS)) == len(diagrams.PICTURES)


@pytest.mark.parametrize("picture", diagrams.PICTURES, ids=lambda p: p.name)
def test_each_picture_has_alt_text_that_describes_it(picture):
    words = picture.alt.split()
    assert len(words) >= 15, f"{picture.name}: describe what the picture shows, not only its name"
    assert "[" not in picture.alt and "]" not in picture.alt, "brackets would end the alt text"
    assert picture.lessons and all(len(lesson) == 2 for lesson in picture.lessons)


@pytest.mark.parametrize("picture", diagrams.PICTURES, ids=lambda p: p.name)
def test_each_picture_is_shown_by_its_lessons_in_both_versions(picture):
    written = [lesson for lesson in picture.lessons if lesson_exists(lesson)]
    if picture.name in AWAITING_THEIR_LESSON:
        assert not written, f"lesson {written} exists now: show {picture.filename} in it"
        return
    assert written, f"{picture.filename} is shown by no lesson"
    for solution in authoring.solution_paths(written):
        for path in (solution, authoring.exercise_path(solution)):
            nb = nbformat.read(path, as_version=4)
            cells = [
                c
                for c in nb.cells
                if c.cell_type == "markdown" and f"(attachment:{picture.filename})" in c.source
            ]
            assert len(cells) == 1, f"{path.name}: one cell shows {picture.filename}"
            assert f"![{picture.alt}](attachment:{picture.filename})" in cells[0].source
            attached = cells[0].attachments[picture.filename]["image/png"]
            assert base64.b64decode(attached) == (IMAGES / picture.filename).read_bytes()


def test_the_two_versions_show_each_picture_in_the_same_cell():
    for solution in authoring.solution_paths():
        ids = [
            {
                c.id: c.attachments
                for c in nbformat.read(path, as_version=4).cells
                if c.cell_type == "markdown" and "attachments" in c
            }
            for path in (solution, authoring.exercise_path(solution))
        ]
        assert ids[0] == ids[1], solution.name


def test_every_attachment_in_the_lessons_equals_its_file_in_images():
    for path in authoring.lesson_notebooks():
        nb = nbformat.read(path, as_version=4)
        assert notebook_images.picture_problems(nb, path.name, IMAGES) == []
        assert notebook_images.placement_problems(nb, path.name[:2], path.name) == []


# ---------------------------------------------------------------- the check finds what is wrong


def a_lesson_showing(name: str):
    picture = BY_FILE[name]
    cell = nbformat.v4.new_markdown_cell(f"![{picture.alt}](attachment:{name})\n\nA caption.")
    cell.id = "picture"
    nb = nbformat.v4.new_notebook(cells=[cell])
    assert notebook_images.stamp_pictures(nb, IMAGES)
    return nb


def test_stamping_carries_the_file_and_the_alt_text():
    nb = a_lesson_showing("attention.png")
    nb.cells[0].source = "![a picture](attachment:attention.png)"
    nb.cells[0].attachments = {}
    assert notebook_images.stamp_pictures(nb, IMAGES)
    assert notebook_images.picture_problems(nb, "lesson", IMAGES) == []
    assert BY_FILE["attention.png"].alt in nb.cells[0].source
    assert not notebook_images.stamp_pictures(nb, IMAGES), "a second stamp changes nothing"


def test_a_picture_shown_but_not_carried_fails_the_check():
    nb = a_lesson_showing("attention.png")
    del nb.cells[0].attachments["attention.png"]
    (problem,) = notebook_images.picture_problems(nb, "lesson", IMAGES)
    assert "shows attachment:attention.png but carries no attention.png" in problem


def test_an_attachment_other_than_its_file_fails_the_check():
    nb = a_lesson_showing("attention.png")
    other = base64.b64encode((IMAGES / "kv_cache.png").read_bytes()).decode()
    nb.cells[0].attachments["attention.png"]["image/png"] = other
    (problem,) = notebook_images.picture_problems(nb, "lesson", IMAGES)
    assert "attention.png differs from images/attention.png" in problem


def test_other_alt_text_and_unknown_or_unshown_attachments_fail_the_check():
    nb = a_lesson_showing("attention.png")
    nb.cells[0].source = nb.cells[0].source.replace(BY_FILE["attention.png"].alt, "a diagram")
    nb.cells[0].attachments["old.png"] = {"image/png": "AAAA"}
    problems = notebook_images.picture_problems(nb, "lesson", IMAGES)
    assert any("alt text of attention.png" in p for p in problems)
    assert any("carries old.png but shows it nowhere" in p for p in problems)


def test_a_lesson_must_show_its_own_pictures_and_no_other():
    nb = a_lesson_showing("attention.png")
    assert notebook_images.placement_problems(nb, "01", "01") == []
    (missing, extra) = notebook_images.placement_problems(
        a_lesson_showing("kv_cache.png"), "01", "01"
    )
    assert "does not show attention.png" in missing and "shows kv_cache.png" in extra


def test_authoring_check_fails_when_images_differ_from_the_notebooks(tmp_path, monkeypatch):
    for path in IMAGES.glob("*.png"):
        (tmp_path / path.name).write_bytes(path.read_bytes())
    (tmp_path / "attention.png").write_bytes((IMAGES / "kv_cache.png").read_bytes())
    monkeypatch.setattr(authoring, "IMAGES", tmp_path)
    problems = authoring.stale_notebooks()
    assert {p.split(",")[0] for p in problems if "attention.png differs" in p} == {
        "notebooks/solutions/01_self_attention.ipynb",
        "notebooks/01_self_attention.ipynb",
    }


def test_the_exercise_version_carries_the_solutions_pictures():
    for solution_path in authoring.solution_paths():
        solution = nbformat.read(solution_path, as_version=4)
        exercise = authoring.lessons.make_exercise_notebook(
            copy.deepcopy(solution), solution_path.name
        )
        assert notebook_images.picture_problems(exercise, solution_path.name, IMAGES) == []
        assert notebook_images.pictures_shown(exercise) == notebook_images.pictures_shown(solution)
