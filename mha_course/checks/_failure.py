"""What a failed check raises, and how it shows: :class:`ExerciseFailure` (a wrong answer, or a
crash), :class:`CellDidNotRun` (a stale definition), :class:`NotDoneYet` (the unsolved skeleton),
and :func:`error_line`, the learner's error in one line.

A failure's message names the case, what was expected and what came, and, when the checker can
tell, ends on a line "Likely cause: ..."; the registry's one-line verdicts
(:meth:`ExerciseFailure.short`) are cut from it. In a notebook it shows as its message alone,
never the checker's own frames.
"""

from __future__ import annotations

import re

from ._inspect import learner_frames, source_line, where

__all__ = ["ExerciseFailure", "CellDidNotRun", "NotDoneYet", "error_line"]

MAX_LINES = 15  # what a failing check may show in a notebook, all told


class ExerciseFailure(AssertionError):
    """The candidate runs but gives a wrong answer (or crashes); the message says why.

    In IPython it renders as its message under one header line, without a traceback: the
    checker's frames would only hide the few lines that matter. When the learner's own code
    raised, the message already shows where (their file or cell, the line, the error).
    """

    check: str | None = None  # "check_softmax": set by the checker that raised it
    learner: str | None = None  # what the learner wrote: "softmax"

    @property
    def case(self) -> str | None:
        """The case that failed, as the message names it."""
        match = re.match(r"Case (['\"])(.*?)\1: ", str(self))
        return match.group(2) if match else None

    @property
    def likely_cause(self) -> str | None:
        match = re.search(r"^Likely cause: (.*)$", str(self), re.MULTILINE)
        return match.group(1) if match else None

    @property
    def raised(self) -> BaseException | None:
        """The learner's error, when their code crashed."""
        error = self.__cause__
        return None if error is None or isinstance(error, ExerciseFailure) else error

    def short(self, limit: int = 150) -> str:
        """One line: the case and the likely cause, or the learner's error and where it came from."""
        case = self.case
        prefix = "" if case is None else f"case {_case_label(case)!r}: "
        if self.raised is not None:
            return _clip(prefix + error_line(self.raised), limit + 40)
        text = self.likely_cause or re.sub(r"^Case (['\"]).*?\1: ", "", str(self)).split("\n")[0]
        return _clip(prefix + re.split(r"(?<=\.) ", text)[0], limit)

    def with_cause(self, cause: str) -> ExerciseFailure:
        """The same failure with another likely cause (raise it ``from`` the learner's error)."""
        return ExerciseFailure(str(self).split("\nLikely cause: ")[0] + f"\nLikely cause: {cause}")

    def _render_traceback_(self) -> list[str]:
        """What IPython shows instead of a traceback (see IPython's ``showtraceback``)."""
        what = f"{self.check}({self.learner})" if self.check and self.learner else "the check"
        lines = str(self).splitlines()
        if len(lines) > MAX_LINES - 1:
            lines = lines[: MAX_LINES - 2] + ["  ... (print the error for the rest of the message)"]
        return [f"\x1b[31mAssertionError\x1b[0m: {what} failed"] + lines


class CellDidNotRun(ExerciseFailure):
    """The exercise cell's last run failed, so the name still holds an earlier definition."""


class NotDoneYet(Exception):
    """The candidate is still the unsolved skeleton (it raised NotImplementedError)."""


def _case_label(case: str, limit: int = 40) -> str:
    """The start of a case's name, up to its first ":" or ";" and at most ``limit`` long, cut
    outside parentheses: "padding mask (2, 1, 1, 7), True = ..." -> "padding mask (2, 1, 1, 7)"."""
    depth, commas = 0, []
    for i, char in enumerate(case):
        depth += (char == "(") - (char == ")")
        if depth == 0 and char in ":;":
            case = case[:i]
            break
        if depth == 0 and case.startswith(", ", i) and i <= limit:
            commas.append(i)
    if len(case) <= limit:
        return case
    return case[: commas[-1]] if commas else _clip(case, limit)


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def _error_text(error: BaseException) -> str:
    if isinstance(error, SyntaxError):
        return f"{type(error).__name__}: {error.msg}"
    lines = str(error).strip().splitlines()
    return f"{type(error).__name__}: {lines[0] if lines else ''}".rstrip(": ")


def error_line(error: BaseException) -> str:
    """One line: the learner's error and the line of their code that raised it."""
    frames = [frame[:2] for frame in learner_frames(error)[-1:]]
    if isinstance(error, SyntaxError) and error.filename:
        frames = [(error.filename, error.lineno)]
    at = "".join(f" (at {where(file, line)}: {source_line(file, line)})" for file, line in frames)
    return _error_text(error) + at
