"""The mistake families: a causal mask with its diagonal where each flaw puts it, and the
families' explanations behind every flaw a checker may name."""

import pytest
import torch

from mha_course.checks import families


@pytest.mark.parametrize(
    "flaw, offset, diagonal",
    [
        ("", 0, 0),
        ("", 2, 2),  # the last 3 of 5 positions: bottom-right
        ("causal without the diagonal", 2, 1),
        ("off-by-one diagonal", 0, 1),
        ("off-by-one diagonal", 2, 3),
        ("causal top-left", 2, 0),
        ("causal bottom-right", 0, 2),
    ],
)
def test_causal_puts_the_diagonal_where_the_flaw_says(flaw, offset, diagonal):
    expected = torch.ones(3, 5, dtype=torch.bool).tril(diagonal)
    assert torch.equal(families.causal(3, 5, flaw, offset=offset), expected)


def test_causal_upper_triangle_keeps_the_future():
    assert torch.equal(
        families.causal(3, 5, "causal upper triangle", offset=2),
        torch.ones(3, 5, dtype=torch.bool).triu(2),
    )


def test_mistakes_take_a_flaw_of_the_exercise_with_its_own_text():
    found = families.mistakes(
        lambda flaw: lambda: flaw,
        ["state not reset", "a flaw of its own"],
        **{"a flaw of its own": "why"},
    )
    assert [m.explanation for m in found] == [families.STATE["state not reset"], "why"]
    assert [m.run() for m in found] == ["state not reset", "a flaw of its own"]
    with pytest.raises(KeyError):
        families.mistakes(lambda flaw: None, ["a flaw nobody explains"])


def test_flawed_hands_each_flaw_to_the_reference_as_a_keyword():
    def reference(x, scale=1, flaw=""):
        return (x * scale, flaw)

    found = families.flawed(reference, ["no scale", "off-by-one diagonal"])
    assert [m.run(2, scale=3) for m in found] == [(6, "no scale"), (6, "off-by-one diagonal")]
    assert found[1].explanation == families.CAUSAL["off-by-one diagonal"]
