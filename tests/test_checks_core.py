"""What every checker shares: the short rendering of a failure in a notebook, the looks at the
answer itself (its cell ran, its own work, no notebook variables), and the registry's verdicts."""

import pytest
import torch

from mha_course import reference, work
from mha_course.checks import ExerciseFailure, check_softmax
from mha_course.checks._failure import compare, count, differ, your
from mha_course.exercises import EXERCISES, by_name, evaluate, evaluate_file, yours_or_reference
from mha_course.notebook import after_exercise_cell, load_your_work

from checker_helpers import NOTEBOOK_IMPORTS, fails_with, notebook_cell, passes


@pytest.fixture(autouse=True)
def fresh_cell_runs(monkeypatch):
    monkeypatch.setattr(work, "_LAST_RUNS", {})


def softmax(scores):
    return torch.softmax(scores, dim=-1)


def wrong_axis(scores):
    return torch.softmax(scores, dim=0)


def crashes(scores):
    total = scores.exp().sum(dim=-1, keepdim=True)
    return scores.exp() / total.squeeze(-1).reshape(3)  # only right for 3 rows


def failure_of(check, candidate) -> ExerciseFailure:
    with pytest.raises(ExerciseFailure) as info:
        check(candidate)
    return info.value


# ---------------------------------------------------------------- how a failure shows


def test_a_failure_renders_as_its_message_under_one_header():
    failure = failure_of(check_softmax, wrong_axis)
    lines = failure._render_traceback_()
    assert "AssertionError" in lines[0] and "check_softmax(softmax) failed" in lines[0]
    assert lines[1:] == str(failure).splitlines()
    assert 3 <= len(lines) <= 15
    assert failure.case == "a (3, 4) matrix: one softmax per row"
    assert failure.likely_cause.startswith("you normalised over the first axis")


def test_a_crash_keeps_the_learners_frame_and_none_of_the_checkers():
    failure = failure_of(check_softmax, crashes)
    text = "\n".join(failure._render_traceback_())
    assert "your code raised RuntimeError" in text
    line = crashes.__code__.co_firstlineno + 2
    assert f"test_checks_core.py, line {line}, in crashes:" in text
    assert "return scores.exp() / total.squeeze(-1).reshape(3)" in text
    for internal in ("checks/_core.py", "checks/l00_warmups.py", "call_candidate", "Traceback"):
        assert internal not in text
    assert len(text.splitlines()) <= 15
    assert isinstance(failure.raised, RuntimeError)


@pytest.mark.parametrize("ipython", ["8 and later", "7 (Colab)", "7, ipykernel 6"])
def test_a_cell_is_named_as_the_notebook_shows_it(ipython, monkeypatch):
    """IPython 8 names a cell with ``compile.format_code_name``; IPython 7.34 (Colab's) has no
    such method: its cell is "<ipython-input-7-...>", or ipykernel 6's file named by the code."""
    import linecache
    import types

    import IPython

    from mha_course.checks._inspect import where

    filename = "<ipython-input-7-0123456789ab>" if ipython == "7 (Colab)" else "/tmp/k/123.py"
    compiler = types.SimpleNamespace()
    if ipython == "8 and later":
        compiler.format_code_name = lambda name: ("Cell", "In[7]") if name == filename else None
    history = types.SimpleNamespace(input_hist_parsed=["", "x = 1", "y = 2", "z = 3", "y = 2"])
    shell = types.SimpleNamespace(compile=compiler, history_manager=history)
    monkeypatch.setattr(IPython, "get_ipython", lambda: shell)
    monkeypatch.setitem(linecache.cache, filename, (6, None, ["y = 2\n"], filename))
    label = "Cell In[4]" if ipython == "7, ipykernel 6" else "Cell In[7]"  # the latest one
    assert where(filename, 3) == f"{label}, line 3"
    # not a cell, and outside the working folder: its folder and name
    assert where("/tmp/k/unknown.py", 2) == "k/unknown.py, line 2"
    compiler.format_code_name = lambda name: 1 / 0  # whatever goes wrong, the message shows
    assert where(filename, 1).endswith(", line 1")


def test_a_long_message_is_cut_to_fifteen_lines():
    failure = ExerciseFailure("\n".join(f"line {i}" for i in range(40)))
    lines = failure._render_traceback_()
    assert len(lines) == 15 and "print the error" in lines[-1]


def test_outside_ipython_it_is_an_assertion_error_with_the_same_message():
    with pytest.raises(AssertionError) as info:
        check_softmax(wrong_axis)
    assert str(info.value).startswith("Case 'a (3, 4) matrix")


def test_a_nan_result_is_named_in_plain_words():
    def overflows(scores):  # the classic unstable softmax: NaN where exp overflows
        return scores.exp() / scores.exp().sum(dim=-1, keepdim=True)

    message = str(failure_of(check_softmax, overflows))
    assert "  your weights contain NaN at " in message and "your the" not in message
    one = torch.tensor([[0.5, float("nan")]])
    with pytest.raises(ExerciseFailure, match=r"your outputs contain NaN at 1 place\.$"):
        compare("c", "outputs", one, torch.zeros(1, 2))
    with pytest.raises(ExerciseFailure, match="your weights contain NaN at 2 places"):
        compare("c", "the weights", torch.full((2,), float("nan")), torch.zeros(2))
    assert [your(w) for w in ("the weights", "a mask", "an output", "outputs", "theta")] == [
        "your weights",
        "your mask",
        "your output",
        "your outputs",
        "your theta",
    ]
    assert (count(1, "place"), count(3, "place")) == ("1 place", "3 places")


def test_entries_that_differ_are_counted_in_plain_words():
    with pytest.raises(ExerciseFailure, match="differ from the reference at 1 place, first at"):
        differ("c", "the entries", torch.tensor([True, False]), torch.tensor([True, True]))


# ---------------------------------------------------------------- the exercise cell's last run


def broken_cell(name: str) -> None:
    source = f"# exercise: {name}\ndef {name}(scores:\n    return scores\n"
    try:
        compile(source, "<cell>", "exec")
    except SyntaxError as error:
        after_exercise_cell(source, error)


def test_a_check_after_a_cell_that_did_not_run_says_so(capsys):
    broken_cell("softmax")
    message = fails_with(check_softmax, softmax, "cell did not run: SyntaxError", "(line 2)")
    assert "`softmax` is still the earlier definition" in message
    assert "fix the cell, run it, then run this check again" in message
    assert len(message.splitlines()) <= 2
    passes(check_softmax, lambda s: torch.softmax(s, -1), capsys)  # another function: checked
    after_exercise_cell("# exercise: softmax\ndef softmax(scores):\n    return scores\n")
    passes(check_softmax, softmax, capsys)  # the cell ran again, fixed


def test_a_cell_that_stopped_with_an_error_may_have_replaced_the_definition():
    after_exercise_cell("# exercise: softmax\n1 / 0\n", ZeroDivisionError("division by zero"))
    fails_with(check_softmax, softmax, "stopped with ZeroDivisionError", "maybe still")


# ---------------------------------------------------------------- variables of the notebook


def test_a_number_from_another_cell_is_named_but_not_one_from_the_same_cell(capsys):
    cells = notebook_cell(NOTEBOOK_IMPORTS + "scale = 1.0\n", {}, 1)
    notebook_cell("def softmax(scores):\n    return torch.softmax(scores * scale, -1)\n", cells, 2)
    fails_with(check_softmax, cells["softmax"], "uses `scale` (= 1.0)", "<notebook cell 2>, line 2")

    notebook_cell(
        "temperature = 1.0\n\n\ndef softmax(scores):\n"
        "    return torch.softmax(scores / temperature, -1)\n",
        cells,
        3,
    )
    passes(check_softmax, cells["softmax"], capsys)  # saved with the answer: it goes along


def test_functions_classes_and_modules_from_other_cells_are_fine(capsys):
    cells = notebook_cell(
        NOTEBOOK_IMPORTS + "def stable(s):\n    return s - s.amax(-1, True)\n", {}, 1
    )
    notebook_cell(
        "def softmax(scores):\n    e = torch.exp(stable(scores))\n"
        "    return e / e.sum(-1, keepdim=True) * math.prod([])\n",
        cells,
        2,
    )
    passes(check_softmax, cells["softmax"], capsys)


def test_a_tensor_from_another_cell_is_named():
    cells = notebook_cell(NOTEBOOK_IMPORTS + "bias = torch.zeros(4)\n", {}, 1)
    notebook_cell("def softmax(scores):\n    return torch.softmax(scores + bias, -1)\n", cells, 2)
    fails_with(check_softmax, cells["softmax"], "uses `bias` (a tensor(4))")


# ---------------------------------------------------------------- the registry


def test_every_checker_is_named_as_the_learner_writes_it():
    for exercise in EXERCISES:
        assert exercise.check.exercise == exercise.name
        assert exercise.check_call == f"{exercise.check.__name__}({exercise.name})"
    assert by_name("MultiHeadAttention").check_call == (
        "check_multi_head_attention(MultiHeadAttention)"
    )


def skeleton(scores):
    raise NotImplementedError


def uses_a_name_it_never_defined(scores):
    return torch.softmax(scores / temperature, -1)  # noqa: F821


@pytest.mark.parametrize(
    "candidate, status, reason",
    [
        (softmax, "yours", ""),
        (skeleton, "not done yet", ""),
        (None, "not done yet", ""),
        (wrong_axis, "fails its check", "case 'a (3, 4) matrix': you normalised over the first"),
        (
            uses_a_name_it_never_defined,
            "raises NameError",
            "case 'a vector of 5 scores': NameError: name 'temperature' is not defined (at "
            "tests/test_checks_core.py, line",
        ),
    ],
)
def test_evaluate_gives_one_verdict(candidate, status, reason):
    verdict = evaluate(by_name("softmax"), candidate)
    assert verdict.status == status and verdict.passed == (status == "yours")
    assert verdict.reason.startswith(reason), verdict.reason
    assert len(verdict.reason) <= 200 and "\n" not in verdict.reason
    assert verdict.next_step == "Full message: run check_softmax(softmax) in lesson 00."


def test_evaluate_knows_a_cell_that_did_not_run():
    broken_cell("softmax")
    verdict = evaluate(check_softmax, softmax)
    assert verdict.status == "did not run" and "SyntaxError" in verdict.reason
    assert evaluate(check_softmax, softmax, cell=False).passed  # a saved answer: its own file


def test_evaluate_file(tmp_path):
    exercise, namespace = by_name("softmax"), {"torch": torch}
    assert evaluate_file(exercise, tmp_path / "softmax.py", namespace)[0].status == "not found"
    path = tmp_path / "softmax.py"
    path.write_text("# exercise: softmax\nx = 1\n\n\nsoftmax = undefined_name\n")
    verdict, answer = evaluate_file(exercise, path, namespace)
    assert answer is None and verdict.status == "raises NameError"
    assert "line 5: softmax = undefined_name" in verdict.reason
    path.write_text("# exercise: softmax\ndef softmax(scores:\n")
    assert "SyntaxError" in evaluate_file(exercise, path, namespace)[0].reason
    path.write_text("x = 1\n")
    assert evaluate_file(exercise, path, {})[0].status == "no softmax in softmax.py"
    path.write_text("def softmax(scores):\n    return torch.softmax(scores, -1)\n")
    verdict, answer = evaluate_file(exercise, path, namespace)
    assert verdict.passed and answer is namespace["softmax"]


def test_load_your_work_says_why_in_one_line_and_where_to_see_more(tmp_path, capsys):
    (tmp_path / "softmax.py").write_text(
        "# exercise: softmax\ndef softmax(scores):\n    return torch.softmax(scores, dim=0)\n"
    )
    (tmp_path / "scaled_dot_product_attention.py").write_text(
        "def scaled_dot_product_attention(query, key, value, attn_mask=None):\n"
        "    scores = query @ key.transpose(-2, -1) / math.sqrt(d_k)\n"
        "    return scores.softmax(-1) @ value, scores.softmax(-1)\n"
    )
    work = load_your_work(tmp_path, before="02")
    assert work.softmax is reference.softmax
    lines = capsys.readouterr().out.splitlines()
    i = next(i for i, line in enumerate(lines) if "00 softmax" in line)
    assert lines[i].endswith("course reference (yours: fails its check)")
    assert "case 'a (3, 4) matrix': you normalised over the first axis" in lines[i + 1]
    assert lines[i + 1].endswith("Full message: run check_softmax(softmax) in lesson 00.")
    j = next(j for j, line in enumerate(lines) if "01 scaled_dot_product_attention" in line)
    assert lines[j].endswith("course reference (yours: raises NameError)")
    assert "NameError: name 'd_k' is not defined" in lines[j + 1]
    assert "scaled_dot_product_attention.py, line 2: scores = query" in lines[j + 1]
    assert lines[j + 1].endswith(
        "check_scaled_dot_product_attention(scaled_dot_product_attention) in lesson 01."
    )


def test_yours_or_reference_says_why_and_what_to_do(capsys):
    assert yours_or_reference(check_softmax, wrong_axis, reference.softmax) is reference.softmax
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Your softmax does not pass check_softmax yet")
    assert "Run the check cell above for the full message" in out[0]
    assert out[1].startswith("  (case 'a (3, 4) matrix': you normalised over the first axis")
    broken_cell("softmax")
    assert yours_or_reference(check_softmax, softmax, reference.softmax) is reference.softmax
    out = capsys.readouterr().out
    assert "its exercise cell did not run" in out and "Fix the cell, run it" in out


def test_a_table_names_the_mistake_that_gives_the_answer():
    from mha_course.checks._core import Mistake
    from mha_course.checks._failure import require_shape
    from mha_course.checks._table import Case, Table, run

    doubled = Mistake("doubled", lambda x: 2 * x, "you doubled it")
    table = Table(
        cases=lambda: [Case("x = 1, 1", (torch.ones(2),))],
        reference=lambda x: x,
        mistakes=[doubled],
    )
    assert run(lambda x: x.clone(), table) == 1
    with pytest.raises(ExerciseFailure, match="Likely cause: you doubled it"):
        run(lambda x: 2 * x, table)
    compare("a case", "outputs", torch.ones(2), torch.ones(2))
    require_shape("a case", "the result", torch.ones(2, 3), (2, 3))
