"""What a failed check raises, and how a wrong result shows: :class:`ExerciseFailure` (a wrong
answer, or a crash: the case, what was expected and what came, and, when the checker can tell, a
last line "Likely cause: ..."), :class:`CellDidNotRun`, :class:`NotDoneYet`, and the messages'
pieces (:func:`differ`, :func:`require_shape`, :func:`error_line`...)."""

from __future__ import annotations

import re

import torch

from .._validate import shape_str
from ._inspect import learner_frames, source_line, where

MAX_LINES = 15  # what a failing check may show in a notebook, all told


class ExerciseFailure(AssertionError):
    """A wrong answer (or a crash); the message says why. IPython shows the message alone, under
    one header line: the checker's frames would only hide it (a crash's message shows where)."""

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


def close(got, expected, atol: float, rtol: float, equal_nan: bool = False) -> bool:
    """``got`` is a tensor of ``expected``'s shape and values, to the tolerance (in float64)."""
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return False
    got, expected = got.detach().double().cpu(), expected.detach().double().cpu()
    return bool(torch.allclose(got, expected, atol=atol, rtol=rtol, equal_nan=equal_nan))


def count(n: int, thing: str) -> str:
    """``count(1, "place")`` -> "1 place", ``count(2, "place")`` -> "2 places"."""
    return f"{n} {thing}" if n == 1 else f"{n} {thing}s"


def your(what: str) -> str:
    """ "the weights" -> "your weights": a message's words for the learner's result."""
    return "your " + re.sub(r"(?i)^(the|an?) ", "", what)


def _likely(cause: str | None) -> str:
    return f"\nLikely cause: {cause}" if cause else ""


def not_a_tensor(case: str, what: str, got) -> ExerciseFailure:
    made = type(got).__name__
    tip = {
        "list": " A list of tensors is not one tensor: stack them.",
        "tuple": " Return only this result, not a tuple.",
        "float": " .item() turns a tensor into a Python number: keep the tensor.",
        "NoneType": " A function that ends without `return` gives None.",
    }.get(made, "")
    return ExerciseFailure(f"Case {case!r}: {what} should be a torch.Tensor, got {made}.{tip}")


def require_shape(case: str, what: str, got, shape, hint: str = "") -> None:
    """Fail unless ``got`` is a tensor of shape ``shape``."""
    if not isinstance(got, torch.Tensor):
        raise not_a_tensor(case, what, got)
    if tuple(got.shape) == tuple(shape):
        return
    verb = "have" if what.endswith("s") else "has"
    raise ExerciseFailure(
        f"Case {case!r}: {your(what)} {verb} shape {shape_str(got.shape)}, expected "
        f"{shape_str(shape)}." + _likely(hint)
    )


def require_dtype(case: str, what: str, got, expected, cause: str | None = None) -> None:
    """Fail unless ``got`` has ``expected``'s dtype (a bool one: say if the pattern is right)."""
    if got.dtype == expected.dtype:
        return
    if expected.dtype == torch.bool:
        right = " (its True/False pattern is right)" if bool(((got != 0) == expected).all()) else ""
        raise ExerciseFailure(
            f"Case {case!r}: {what} are {got.dtype}{right}; expected a bool tensor."
            + _likely(cause)
        )
    cause = cause or "a tensor made inside your function with the default dtype, not the inputs'."
    raise ExerciseFailure(
        f"Case {case!r}: {what} are {got.dtype}, expected {expected.dtype} (the dtype of the "
        f"inputs)." + _likely(cause)
    )


def differ(case: str, what: str, got: torch.Tensor, expected: torch.Tensor, cause="") -> None:
    """Fail, showing where ``got`` and ``expected`` differ most (or, for bool tensors, first)."""
    __tracebackhide__ = True  # noqa: F841
    g, e = got.detach().cpu(), expected.detach().cpu()
    head, nan = f"Case {case!r}: {what} differ from the reference", g.double().isnan()
    lines = [f"{head}."]
    if e.dtype == torch.bool:
        wrong = g != e
        index = tuple(int(i) for i in wrong.nonzero()[0])
        lines = [f"{head} at {count(int(wrong.sum()), 'place')}, first at {list(index)}."]
    elif nan.any():
        index = ()
        lines.append(f"  {your(what)} contain NaN at {count(int(nan.sum()), 'place')}.")
    else:
        diff = (g.double() - e.double()).abs()
        index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        lines.append(f"  largest difference {diff.max().item():.3g} at index {list(index)}.")
    if index and g.dim() >= 1:
        lines += [f"  expected {_row(e, index[:-1])}", f"  got      {_row(g, index[:-1])}"]
    raise ExerciseFailure("\n".join(lines) + _likely(cause))


def compare(case: str, what: str, got, expected, *, atol=1e-5, rtol=1e-4, cause="") -> None:
    """Fail unless ``got`` equals ``expected`` to the tolerance (see :func:`differ`)."""
    __tracebackhide__ = True  # noqa: F841
    if not close(got, expected, atol, rtol):
        differ(case, what, got, expected, cause)


def _row(t: torch.Tensor, row: tuple[int, ...]) -> str:
    values = t[row] if row else t
    if values.dtype == torch.bool:
        shown = ", ".join(str(v) for v in values.flatten()[:8].tolist())
    else:
        shown = ", ".join(f"{v:.3f}" for v in values.double().flatten()[:8].tolist())
    more = ", ..." if values.numel() > 8 else ""
    return f"{f'row {list(row)}' if row else 'all'} = [{shown}{more}]"
