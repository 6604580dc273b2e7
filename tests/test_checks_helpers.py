"""An answer that uses another exercise's answer: when that one is not done yet or wrong, the
check names it, instead of blaming the answer under test for code that is not in its cell."""

import pytest
import torch

from mha_course import reference
from mha_course.checks import (
    ExerciseFailure,
    check_multi_head_attention,
    check_scaled_dot_product_attention,
)
from mha_course.checks._core import call_candidate, checker
from mha_course.checks._failure import compare
from mha_course.checks._registry import REGISTRY
from mha_course.exercises import Exercise, evaluate, yours_or_reference

from checker_helpers import MHA_INIT_SOURCE, NOTEBOOK_IMPORTS, fails_with, notebook_cell, passes

# ---------------------------------------------------------------- a small synthetic family

X = torch.arange(4.0)


def _times(candidate, factor: int) -> int:
    got = call_candidate(candidate, "x = [0, 1, 2, 3]", X)
    compare("x = [0, 1, 2, 3]", "the values", got, factor * X)
    return 1


@checker("double", "Write double.")
def check_double(candidate) -> int:
    return _times(candidate, 2)


@checker("quadruple", "Write quadruple.")
def check_quadruple(candidate) -> int:
    return _times(candidate, 4)


@checker("octuple", "Write octuple.")
def check_octuple(candidate) -> int:
    return _times(candidate, 8)


@pytest.fixture(autouse=True)
def registered():
    """double, quadruple and octuple registered as exercises of a lesson "99"."""
    extra = [
        Exercise("double", "99", check_double, None),
        Exercise("quadruple", "99", check_quadruple, None),
        Exercise("octuple", "99", check_octuple, None),
    ]
    REGISTRY.extend(extra)
    yield
    for exercise in extra:
        REGISTRY.remove(exercise)


TODO = 'raise NotImplementedError("Exercise: write this part, then run the check below.")'
DOUBLE = {
    "unsolved": f"def double(x):\n    {TODO}\n",
    "wrong": "def double(x):\n    return x + 2\n",
    "right": "def double(x):\n    return x + x\n",
}
QUADRUPLE = "def quadruple(x):\n    return double(double(x))\n"
OCTUPLE = "def octuple(x):\n    return double(quadruple(x))\n"


def cells(*sources: str) -> dict:
    """A notebook whose cells are ``sources``, run in turn."""
    namespace = {}
    for number, source in enumerate((NOTEBOOK_IMPORTS, *sources)):
        notebook_cell(source, namespace, number)
    return namespace


def test_a_helper_not_done_yet_is_named(capsys):
    nb = cells(DOUBLE["unsolved"], QUADRUPLE)
    assert check_quadruple(nb["quadruple"]) is None
    out = capsys.readouterr().out
    assert out.startswith("⏳ Your quadruple calls double, which is not done yet. Write double")
    verdict = evaluate(check_quadruple, nb["quadruple"])
    assert verdict.status == "not done yet" and "calls double" in verdict.reason
    assert check_quadruple.passes(nb["quadruple"]) is False


def test_an_answer_that_is_itself_unsolved_is_not_done_yet_whatever_it_calls(capsys):
    nb = cells(DOUBLE["unsolved"], f"def quadruple(x):\n    y = double\n    {TODO}\n")
    check_quadruple(nb["quadruple"])
    assert capsys.readouterr().out.startswith("⏳ quadruple: not done yet. Write quadruple.")


def test_a_wrong_helper_is_named_with_its_own_cause():
    nb = cells(DOUBLE["wrong"], QUADRUPLE)
    message = fails_with(
        check_quadruple,
        nb["quadruple"],
        "Your quadruple calls double, which does not pass check_double.",
        "  double: case 'x = [0, 1, 2, 3]'",
        "Likely cause: double, not your quadruple: fix double first (check_double(double)",
    )
    assert len(message.splitlines()) <= 4
    verdict = evaluate(check_quadruple, nb["quadruple"])
    assert verdict.status == "fails its check"
    assert verdict.reason.startswith("double, not your quadruple: fix double first")


def test_a_helper_of_a_helper_is_named_with_the_way_it_is_reached(capsys):
    nb = cells(DOUBLE["wrong"], "def quadruple(x):\n    return 4 * x\n", OCTUPLE)
    fails_with(check_octuple, nb["octuple"], "Your octuple calls double, which does not pass")
    nb = cells(DOUBLE["unsolved"], QUADRUPLE, "def octuple(x):\n    return 2 * quadruple(x)\n")
    check_octuple(nb["octuple"])
    out = capsys.readouterr().out
    assert "Your octuple calls double (through your quadruple), which is not done yet" in out


def test_a_wrong_answer_with_right_helpers_gets_its_own_message(capsys):
    nb = cells(DOUBLE["right"], "def quadruple(x):\n    return double(x) + 1\n")
    message = fails_with(check_quadruple, nb["quadruple"], "Case 'x = [0, 1, 2, 3]'")
    assert "calls double" not in message
    passes(check_quadruple, cells(DOUBLE["right"], QUADRUPLE)["quadruple"], capsys)


def test_the_reference_in_place_of_a_helper_is_never_blamed():
    nb = cells(QUADRUPLE.replace("return", "return 1 +"))
    nb["double"] = reference.softmax  # the course's code: not the learner's
    message = fails_with(check_quadruple, nb["quadruple"], "Case 'x = [0, 1, 2, 3]'")
    assert "calls double" not in message


def test_answers_that_call_each_other_are_checked_once():
    nb = cells("def double(x):\n    return quadruple(x) / 2\n", QUADRUPLE)
    with pytest.raises(ExerciseFailure, match="calls double"):  # a RecursionError: no hang
        check_quadruple(nb["quadruple"])


# ---------------------------------------------------------------- lesson 02's MHA on lesson 01's attention


MHA_FORWARD = """
    def forward(self, query, key, value, attn_mask=None):
        B, L, E = query.shape
        S, H = key.size(1), self.num_heads
        q = self.q_proj(query).view(B, L, H, E // H).transpose(1, 2)
        k = self.k_proj(key).view(B, S, H, E // H).transpose(1, 2)
        v = self.v_proj(value).view(B, S, H, E // H).transpose(1, 2)
        if attn_mask is not None and attn_mask.dim() == 3:
            attn_mask = attn_mask.unsqueeze(1)  # (B, L, S) -> (B, 1, L, S): every head
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out_proj(out.transpose(1, 2).reshape(B, L, E)), weights
"""
ATTENTION = {
    "unsolved": f"def scaled_dot_product_attention(query, key, value, attn_mask=None):\n    {TODO}\n",
    "unscaled": (
        "def scaled_dot_product_attention(query, key, value, attn_mask=None):\n"
        "    scores = query @ key.transpose(-2, -1)\n"
        "    if attn_mask is not None:\n"
        "        scores = scores.masked_fill(~attn_mask, float('-inf'))\n"
        "    weights = scores.softmax(dim=-1)\n"
        "    return weights @ value, weights\n"
    ),
    "right": (
        "def scaled_dot_product_attention(query, key, value, attn_mask=None):\n"
        "    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))\n"
        "    if attn_mask is not None:\n"
        "        scores = scores.masked_fill(~attn_mask, float('-inf'))\n"
        "    weights = scores.softmax(dim=-1)\n"
        "    return weights @ value, weights\n"
    ),
}


def lesson_02(attention: str) -> dict:
    return cells(ATTENTION[attention], MHA_INIT_SOURCE + MHA_FORWARD)


def test_multi_head_attention_on_an_unsolved_attention(capsys):
    nb = lesson_02("unsolved")
    check_multi_head_attention(nb["MultiHeadAttention"])
    out = capsys.readouterr().out
    assert out.startswith(
        "⏳ Your MultiHeadAttention calls scaled_dot_product_attention, which is not done yet."
    )
    assert "__init__" not in out
    used = yours_or_reference(
        check_multi_head_attention, nb["MultiHeadAttention"], reference.MultiHeadAttention
    )
    assert used is reference.MultiHeadAttention
    assert "(Your MultiHeadAttention calls scaled_dot_product_attention" in capsys.readouterr().out


def test_multi_head_attention_on_a_wrong_attention():
    message = fails_with(
        check_multi_head_attention,
        lesson_02("unscaled")["MultiHeadAttention"],
        "Your MultiHeadAttention calls scaled_dot_product_attention, which does not pass "
        "check_scaled_dot_product_attention.",
        "  scaled_dot_product_attention: case",
        "Likely cause: scaled_dot_product_attention, not your MultiHeadAttention: fix "
        "scaled_dot_product_attention first",
    )
    assert len(message.splitlines()) <= 15


def test_multi_head_attention_on_a_right_attention_passes(capsys):
    nb = lesson_02("right")
    passes(check_multi_head_attention, nb["MultiHeadAttention"], capsys)
    passes(check_scaled_dot_product_attention, nb["scaled_dot_product_attention"], capsys)
