"""What the set-up cell starts: exercise cells watched and saved, answers loaded in later
lessons, and the fallback to the reference."""

import pytest
import torch

from mha_course import checks, reference, work
from mha_course.exercises import yours_or_reference
from mha_course.notebook import after_exercise_cell, load_your_work
from mha_course.work import last_run, save_answer


@pytest.fixture(autouse=True)
def fresh_cell_runs(monkeypatch):
    """Each test starts with no exercise cell run, and leaves none behind for other tests."""
    monkeypatch.setattr(work, "_LAST_RUNS", {})


GOOD_SOFTMAX = """# exercise: softmax
def softmax(scores):
    return torch.softmax(scores, dim=-1)
"""
WRONG_SOFTMAX = """# exercise: softmax
def softmax(scores):
    return torch.softmax(scores, dim=0)
"""


def test_an_exercise_cell_that_ran_is_saved_and_remembered(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    after_exercise_cell("x = 1")
    after_exercise_cell(GOOD_SOFTMAX)
    assert (tmp_path / "softmax.py").read_text() == GOOD_SOFTMAX
    assert last_run("softmax").succeeded and last_run("softmax").error is None


def test_a_cell_that_failed_is_remembered_and_not_saved(tmp_path, monkeypatch):
    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    broken = "# exercise: LayerNorm\nclass LayerNorm(:\n"
    try:
        compile(broken, "<cell>", "exec")
    except SyntaxError as error:
        after_exercise_cell(broken, error)
    run = last_run("LayerNorm")
    assert not run.succeeded and run.error.startswith("SyntaxError") and "(line 2)" in run.error
    assert not (tmp_path / "LayerNorm.py").exists()


def test_a_skeleton_run_points_to_the_answer_saved_earlier(tmp_path, monkeypatch, capsys):
    from mha_course.lessons import TODO

    monkeypatch.setenv("MHA_COURSE_WORK_DIR", str(tmp_path))
    after_exercise_cell(GOOD_SOFTMAX)
    after_exercise_cell(f"# exercise: softmax\ndef softmax(scores):\n    {TODO}\n")
    assert (tmp_path / "softmax.py").read_text() == GOOD_SOFTMAX
    assert "%load my_work/softmax.py" in capsys.readouterr().out


def test_load_your_work_uses_yours_when_it_passes(tmp_path, capsys):
    save_answer(GOOD_SOFTMAX, tmp_path)
    work = load_your_work(tmp_path)
    assert work.softmax is not reference.softmax
    assert torch.allclose(work.softmax(torch.zeros(2)), torch.tensor([0.5, 0.5]))
    out = capsys.readouterr().out
    assert "softmax" in out and "yours ✅" in out
    assert work.scaled_dot_product_attention is reference.scaled_dot_product_attention


def test_load_your_work_falls_back_when_yours_is_wrong_or_broken(tmp_path, capsys):
    save_answer(WRONG_SOFTMAX, tmp_path)
    (tmp_path / "scaled_dot_product_attention.py").write_text(
        "# exercise: scaled_dot_product_attention\n1/0\n"
    )
    work = load_your_work(tmp_path)
    assert work.softmax is reference.softmax
    assert work.scaled_dot_product_attention is reference.scaled_dot_product_attention
    out = capsys.readouterr().out
    assert "softmax                        course reference (yours: fails its check)" in out
    assert "(yours: raises ZeroDivisionError)" in out


def test_yours_or_reference(capsys):
    def skeleton(scores):
        raise NotImplementedError

    def wrong(scores):
        return scores

    assert (
        yours_or_reference(checks.check_softmax, skeleton, reference.softmax) is reference.softmax
    )
    assert "not done yet" in capsys.readouterr().out
    assert yours_or_reference(checks.check_softmax, wrong, reference.softmax) is reference.softmax
    assert "does not pass check_softmax" in capsys.readouterr().out

    def right(scores):
        return torch.softmax(scores, -1)

    assert yours_or_reference(checks.check_softmax, right, reference.softmax) is right


def test_load_your_work_lists_only_earlier_lessons(tmp_path, capsys):
    work = load_your_work(tmp_path, before="01")
    out = capsys.readouterr().out
    assert "softmax" in out and "scaled_dot_product_attention" not in out
    assert "On Colab" in out  # nothing found: say where answers come from
    assert work.scaled_dot_product_attention is reference.scaled_dot_product_attention


def test_expect_prints_whether_the_statement_holds(capsys):
    from mha_course.notebook import expect

    expect("pre-LN converges (loss < 0.1)", True)
    expect("post-LN stalls (loss > 1)", False)
    out = capsys.readouterr().out.splitlines()
    assert out == [
        "✔ pre-LN converges (loss < 0.1)",
        "✘ not so on this run: post-LN stalls (loss > 1)",
    ]
