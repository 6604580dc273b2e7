"""Assertions shared by the checker tests: a checker passes a candidate, or fails it with a message
that contains given phrases, or calls it not done yet."""

import pytest

from mha_course.checks import ExerciseFailure


def passes(check, candidate, capsys) -> str:
    check(candidate)
    out = capsys.readouterr().out
    assert out.startswith("✅"), out
    assert check.passes(candidate) is True
    return out


def fails_with(check, candidate, *phrases) -> str:
    with pytest.raises(ExerciseFailure) as failure:
        check(candidate)
    assert isinstance(failure.value, AssertionError)
    message = str(failure.value)
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in:\n{message}"
    return message


def not_done(check, candidate, capsys) -> None:
    assert check(candidate) is None
    assert "not done yet" in capsys.readouterr().out
    assert check.passes(candidate) is False
