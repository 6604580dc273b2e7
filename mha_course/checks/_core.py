"""The checker protocol, shared by every exercise.

``check_X(candidate)``:

* prints one success line when the candidate matches the reference on every case;
* prints "not done yet" when the candidate still raises NotImplementedError (the unsolved
  skeleton), so an unsolved notebook still runs top to bottom;
* raises :class:`ExerciseFailure` (an ``AssertionError``) otherwise, saying which case failed,
  what was expected, what came, and the likely cause in plain words.

A checker is a function that runs cases and raises ``ExerciseFailure`` itself; :func:`checker`
wraps it with the protocol above. Likely causes come from *diagnosis*: the checker also runs the
classic wrong versions of the exercise on the same inputs and names the one the candidate matches.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .._validate import shape_str

__all__ = [
    "ExerciseFailure",
    "NotDoneYet",
    "Mistake",
    "checker",
    "call_candidate",
    "require_shape",
    "compare",
    "diagnose",
]


class ExerciseFailure(AssertionError):
    """The candidate runs but gives a wrong answer (or crashes); the message says why."""


class NotDoneYet(Exception):
    """The candidate is still the unsolved skeleton (it raised NotImplementedError)."""


@dataclass(frozen=True)
class Mistake:
    """A classic wrong version of an exercise and what to tell the learner who made it."""

    name: str
    run: Callable  # same signature as the candidate's call in the case
    explanation: str


def checker(exercise: str, what_to_do: str) -> Callable:
    """Turn ``run_cases(candidate) -> number of cases`` into a checker with the protocol above.

    The checker itself returns None (so a notebook cell shows only its message);
    ``check.passes(candidate)`` is the quiet form for code: True when it passes, False when it is
    not done yet, and it raises :class:`ExerciseFailure` when it is wrong.
    """

    def decorate(run_cases: Callable[..., int]) -> Callable[..., None]:
        def passes(candidate) -> bool:
            __tracebackhide__ = True  # noqa: F841  (IPython and pytest hide this frame)
            try:
                run_cases(candidate)
            except NotDoneYet:
                return False
            return True

        @functools.wraps(run_cases)
        def check(candidate) -> None:
            __tracebackhide__ = True  # noqa: F841
            try:
                n_cases = run_cases(candidate)
            except NotDoneYet:
                print(f"⏳ {exercise}: not done yet. {what_to_do} Then re-run this cell.")
                return
            print(f"✅ {exercise}: all {n_cases} cases match the reference. Well done!")

        check.exercise = exercise
        check.passes = passes
        return check

    return decorate


def call_candidate(candidate: Callable, case: str, *args, crash_hint: str = "", **kwargs):
    """Call the learner's code; turn NotImplementedError into NotDoneYet and a crash into a
    failure that says which case crashed, with what inputs, and (``crash_hint``) what to look at."""
    __tracebackhide__ = True  # noqa: F841
    try:
        return candidate(*args, **kwargs)
    except NotImplementedError:
        raise NotDoneYet() from None
    except Exception as error:  # the learner's bug: report it with the case that triggered it
        inputs = ", ".join(
            [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
        )
        hint = crash_hint or "a shape mix-up; print the shapes inside your code, step by step."
        raise ExerciseFailure(
            f"Case {case!r}: your code raised {type(error).__name__}: {error}\n"
            f"  inputs: {inputs}\n"
            f"Likely cause: {hint}"
        ) from error


def _describe(x) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor{shape_str(x.shape)}" + ("" if x.is_floating_point() else f" {x.dtype}")
    return repr(x) if x is None or isinstance(x, (int, float, bool, str)) else type(x).__name__


def require_shape(case: str, what: str, got, expected: Sequence[int], hint: str = "") -> None:
    """Fail with a clear message unless ``got`` is a tensor of shape ``expected``."""
    if not isinstance(got, torch.Tensor):
        raise ExerciseFailure(
            f"Case {case!r}: {what} should be a torch.Tensor, got {type(got).__name__}."
        )
    if tuple(got.shape) != tuple(expected):
        raise ExerciseFailure(
            f"Case {case!r}: {what} has shape {shape_str(got.shape)}, expected {shape_str(expected)}."
            + (f"\nLikely cause: {hint}" if hint else "")
        )


def _close(
    got: torch.Tensor, expected: torch.Tensor, atol: float, rtol: float, equal_nan: bool = False
) -> bool:
    if not isinstance(got, torch.Tensor) or got.shape != expected.shape:
        return False
    got, expected = got.detach().double().cpu(), expected.detach().double().cpu()
    return bool(torch.allclose(got, expected, atol=atol, rtol=rtol, equal_nan=equal_nan))


def diagnose(
    mistakes: Sequence[Mistake], got: torch.Tensor, pick: Callable, *args, atol=1e-4, rtol=1e-3
) -> str | None:
    """The explanation of the first classic mistake whose result matches the candidate's, if any.

    ``pick`` selects the compared tensor from a mistake's result (e.g. the weights of a tuple).
    """
    for mistake in mistakes:
        try:
            with torch.no_grad():
                wrong = pick(mistake.run(*args))
        except Exception:  # a mistake that cannot run on these shapes cannot be the cause
            continue
        if _close(got, wrong, atol, rtol, equal_nan=True):  # a mistake can produce NaN, too
            return mistake.explanation
    return None


def compare(
    case: str,
    what: str,
    got: torch.Tensor,
    expected: torch.Tensor,
    *,
    atol: float = 1e-5,
    rtol: float = 1e-4,
    cause: str | None = None,
    fallback_cause: str = "",
) -> None:
    """Fail unless ``got`` equals ``expected`` to the tolerance; show where they differ."""
    __tracebackhide__ = True  # noqa: F841
    if _close(got, expected, atol, rtol):
        return
    g, e = got.detach().double().cpu(), expected.detach().double().cpu()
    message = [f"Case {case!r}: {what} differ from the reference."]
    if torch.isnan(g).any():
        message.append(f"  your {what} contain NaN at {int(torch.isnan(g).sum())} places.")
    else:
        diff = (g - e).abs()
        index = tuple(int(i) for i in torch.unravel_index(diff.argmax(), diff.shape))
        message.append(f"  largest difference {diff.max().item():.3g} at index {list(index)}.")
        if g.dim() >= 1:
            row = index[:-1]
            message.append(f"  expected {_row(e, row)}")
            message.append(f"  got      {_row(g, row)}")
    reason = cause or fallback_cause
    if reason:
        message.append(f"Likely cause: {reason}")
    raise ExerciseFailure("\n".join(message))


def _row(t: torch.Tensor, row: tuple[int, ...]) -> str:
    values = t[row] if row else t
    shown = ", ".join(f"{v:.3f}" for v in values.flatten()[:8].tolist())
    more = ", ..." if values.numel() > 8 else ""
    where = f"[{', '.join(map(str, row))}, :]" if row else "[:]"
    return f"{where} = [{shown}{more}]"
