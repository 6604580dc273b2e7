"""The counts behind `python tools/authoring.py stats`: what a learner writes and reads."""

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from mha_course.lessons import make_exercise_notebook
from tools import lesson_stats

ANSWER = '''# exercise: double
def double(x):
    """Twice x."""
    # BEGIN SOLUTION
    # 1. a comment is not an answer line

    y = x + x  # nor is a trailing comment
    return y
    # END SOLUTION
'''


def _lesson(tmp_path, cells):
    solution = new_notebook(cells=cells)
    folder = tmp_path / "notebooks"
    (folder / "solutions").mkdir(parents=True)
    nbformat.write(solution, folder / "solutions" / "01_x.ipynb")
    nbformat.write(make_exercise_notebook(solution, "01_x.ipynb"), folder / "01_x.ipynb")
    return lesson_stats.course_stats(tmp_path)[0]


def test_answer_lines_drop_comments_and_blank_lines():
    assert lesson_stats.answer_lines(ANSWER) == ["y = x + x", "return y"]


def test_a_line_shown_above_the_check_is_counted_and_one_below_is_not(tmp_path):
    stats = _lesson(
        tmp_path,
        [
            new_markdown_cell("# title"),
            new_code_cell("z = 1\ny = x + x\n"),  # shown above: gives the answer away
            new_code_cell(ANSWER),
            new_code_cell("check_double(double)"),
            new_code_cell("return y  # below the check: fine"),
        ],
    )
    (exercise,) = stats.exercises
    assert exercise.shown == []  # "y = x + x" is under 12 characters: too short to count
    assert stats.answer_lines == 2 and stats.short_exercises == ["double"]

    long_answer = ANSWER.replace("y = x + x", "y = torch.cat([x, x], dim=-1)")
    stats = _lesson(
        tmp_path / "2",
        [
            new_markdown_cell("Hint: `y = torch.cat([x, x],  dim=-1)`"),
            new_code_cell(long_answer),
            new_code_cell("check_double(double)"),
        ],
    )
    assert stats.exercises[0].shown == ["y = torch.cat([x, x], dim=-1)"]


def test_main_path_words_leave_out_details_code_and_going_further(tmp_path):
    stats = _lesson(
        tmp_path,
        [
            new_markdown_cell(
                "# Title\n\nOne two three.\n\n<details><summary>x</summary>\n\nfour five\n</details>"
            ),
            new_markdown_cell("```python\nsix seven\n```\nEight."),
            new_markdown_cell("## Going further\n\nnine ten eleven"),
            new_markdown_cell("### still further\n\ntwelve"),
        ],
    )
    assert stats.words == 5  # Title, One, two, three., Eight.


def test_a_long_sentence_is_one_of_over_35_words(tmp_path):
    long = " ".join(["word"] * 36) + "."
    short = " ".join(["word"] * 35) + "."
    stats = _lesson(tmp_path, [new_markdown_cell(f"{long} {short}\n\n* {short}")])
    assert len(stats.long_sentences) == 1


def test_the_targets_report_says_which_hold(tmp_path):
    stats = _lesson(tmp_path, [new_markdown_cell("Short."), new_code_cell(ANSWER)])
    report = dict(lesson_stats.targets_report([stats]))
    assert not report["00-06: 2 answer lines (at least 180)"]
    assert report["00-06: 1 exercises of three lines or fewer (at most 8)"]


def test_the_course_meets_its_targets():
    """Lessons 00-06: at least 180 answer lines, at most 8 short exercises, at most 5 % of answer
    lines shown above their check, at most 18,000 main-path words; every lesson at most 3,500
    words and 8 sentences over 35 words (`python tools/authoring.py stats` prints them)."""
    from pathlib import Path

    report = lesson_stats.targets_report(lesson_stats.course_stats(Path(__file__).parent.parent))
    missed = [statement for statement, holds in report if not holds]
    assert not missed, "targets missed:\n" + "\n".join(missed)
