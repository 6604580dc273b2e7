"""The checker protocol, shared by every exercise.

``check_X(candidate)``:

* prints one success line when the candidate matches the reference on every case;
* prints "not done yet" when the candidate still raises NotImplementedError (the unsolved
  skeleton), so an unsolved notebook still runs top to bottom;
* raises :class:`ExerciseFailure` (an ``AssertionError``) otherwise, saying which case failed,
  what was expected, what came, and the likely cause in plain words. In a notebook it shows only
  that message (a few lines), never the checker's own code.

A checker is a function that runs cases and raises ``ExerciseFailure`` itself; :func:`checker`
wraps it with the protocol above, after three looks at the answer itself: did its exercise cell
run, does it call the library routine it is meant to replace, does it use a variable of the
notebook. Likely causes come from *diagnosis*: the checker also runs the classic wrong versions
of the exercise on the same inputs and names the one the candidate matches.

The failures themselves are in :mod:`mha_course.checks._failure` (importable from here too).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .._validate import shape_str
from ..work import last_run
from ._failure import CellDidNotRun, ExerciseFailure, NotDoneYet, _error_text, error_line
from ._inspect import Helper, exercise_helpers, frame_lines, library_call, notebook_variable
from ._registry import REGISTRY, Exercise, find, register
from ._verdict import evaluate

__all__ = [
    "ExerciseFailure",
    "CellDidNotRun",
    "NotDoneYet",
    "Mistake",
    "Checker",
    "checker",
    "exercise",
    "call_candidate",
    "crashed",
    "error_line",
    "call_with_mask",
]


@dataclass(frozen=True)
class Mistake:
    """A classic wrong version of an exercise and what to tell the learner who made it."""

    name: str
    run: Callable  # same signature as the candidate's call in the case
    explanation: str


class Checker:
    """A checker: ``check(candidate)`` prints ✅ or ⏳, or raises ExerciseFailure (see above)."""

    def __init__(self, run_cases: Callable[..., int], exercise: str, what_to_do: str, own_work):
        functools.update_wrapper(self, run_cases)
        self._run_cases, self._exercise, self.what_to_do = run_cases, exercise, what_to_do
        self.own_work = dict(own_work or {})  # {"torch's ...": routine the learner must not call}
        self.table = None  # the case table, for a checker declared with one

    @property
    def exercise(self) -> str:
        """What the learner writes (``MultiHeadAttention``), as the registry names it too."""
        return self._exercise

    def __call__(self, candidate) -> None:
        try:
            n_cases = self.run(candidate)
        except NotDoneYet as not_done:
            if str(not_done):  # another exercise it uses is not done yet
                print(f"⏳ {not_done}")
            else:
                print(f"⏳ {self.exercise}: not done yet. {self.what_to_do} Then re-run this cell.")
            return
        print(f"✅ {self.exercise}: all {n_cases} cases match the reference. Well done!")

    def passes(self, candidate) -> bool:
        """The quiet form, for code: True when it passes, False when it is not done yet; raises
        :class:`ExerciseFailure` when it is wrong."""
        try:
            self.run(candidate, cell=False)
        except NotDoneYet:
            return False
        return True

    def run(self, candidate, *, cell: bool = True) -> int:
        """The number of cases passed; raises NotDoneYet or ExerciseFailure. ``cell``: the
        candidate is what the notebook's exercise cell defined, so a failed last run of that
        cell means it is stale.

        When the answer fails and it uses another exercise's answer that is not done yet or
        does not pass its own check (a MultiHeadAttention calling the learner's split_heads),
        the failure names that one instead. The learner's random stream is left as it was."""
        with torch.random.fork_rng(devices=[]):
            return self._run(candidate, cell)

    def _run(self, candidate, cell: bool) -> int:
        try:
            if cell:
                self._require_cell_ran(candidate)
            self._require_own_work(candidate)
            try:
                return self._run_cases(candidate)
            except (NotDoneYet, NotImplementedError) as error:
                raise _helpers_not_done(self.exercise, candidate, error) from None
            except Exception:
                _raise_for_failing_helper(self.exercise, candidate, cell)
                raise
        except ExerciseFailure as failure:
            failure.check, failure.learner = self.__name__, self.exercise
            raise
        except NotDoneYet:
            raise
        except NotImplementedError:
            raise NotDoneYet() from None
        except Exception as error:  # the answer broke the checker's own steps: say how
            failure = crashed(
                None, error, f"compare your {self.exercise} with the exercise's skeleton."
            )
            failure.check, failure.learner = self.__name__, self.exercise
            raise failure from error

    def _require_cell_ran(self, candidate) -> None:
        name, run = self.exercise, last_run(self.exercise)
        if run is None or run.succeeded or getattr(candidate, "__name__", None) != name:
            return
        before_running = run.error.split(":")[0] in ("SyntaxError", "IndentationError", "TabError")
        raise CellDidNotRun(
            f"Your `# exercise: {name}` cell "
            + (f"did not run: {run.error}." if before_running else f"stopped with {run.error}.")
            + f"\nSo `{name}` is {'still' if before_running else 'maybe still'} the earlier "
            f"definition: fix the cell, run it, then run this check again."
        )

    def _require_own_work(self, candidate) -> None:
        name = self.exercise
        found = library_call(candidate, self.own_work)
        if found is not None:
            raise ExerciseFailure(
                "\n".join(
                    [f"Your {name} {'calls' if found.lineno else 'subclasses'} {found.name}:"]
                    + found.lines()
                    + [
                        "The exercise is to write it yourself (it is fine to compare with it "
                        f"afterwards, outside your {name})."
                    ]
                )
            )
        found = notebook_variable(candidate)
        if found is not None:
            inside = "from what __init__ was given (kept on self) and "
            raise ExerciseFailure(
                "\n".join(
                    [
                        f"Your {name} uses `{found.name}` ({_describe(found.value, equals=True)}), "
                        f"a variable of the notebook, defined outside your {name}'s cell:"
                    ]
                    + found.lines()
                    + [
                        f"Later lessons load your {name} without the notebook's variables, and the "
                        f"check uses other sizes. Take sizes "
                        f"{inside if isinstance(candidate, type) else ''}from the inputs' shapes "
                        "instead."
                    ]
                )
            )


# ---------------------------------------------------------------- answers that use other answers

_BEING_CHECKED: set[str] = set()  # the exercises whose helpers are being checked (no cycles)


def _helpers(exercise: str, candidate) -> list[Helper]:
    """The learner's answers to other registered exercises that ``candidate`` uses."""
    names = {e.name for e in REGISTRY} - {exercise}
    try:
        return exercise_helpers(candidate, names)
    except Exception:  # reading the answer's code must never hide the answer's own failure
        return []


def _helpers_not_done(exercise: str, candidate, error: BaseException) -> NotDoneYet:
    """NotDoneYet for ``candidate``: plain when its own code is the skeleton, naming the helper
    when the skeleton that raised is another exercise's that it uses; a checker's own NotDoneYet
    that says why (it cannot check on this machine) as it is."""
    if isinstance(error, NotDoneYet) and str(error):
        return error
    while error is not None and not isinstance(error, NotImplementedError):
        error = error.__cause__ or error.__context__
    if error is None:
        return NotDoneYet()
    helper = next((h for h in _helpers(exercise, candidate) if h.raised(error)), None)
    if helper is None:
        return NotDoneYet()
    return NotDoneYet(
        f"Your {exercise} calls {helper.name}{_through(helper)}, which is not done yet. Write "
        f"{helper.name} first (its exercise cell, then its check), then re-run this cell."
    )


def _raise_for_failing_helper(exercise: str, candidate, cell: bool) -> None:
    """Raise the failure that names the first helper of ``candidate`` that does not pass its
    own check, if there is one (``candidate`` itself has just failed)."""
    if exercise in _BEING_CHECKED:
        return
    _BEING_CHECKED.add(exercise)
    try:
        for helper in _helpers(exercise, candidate):
            verdict = evaluate(find(helper.name), helper.value, cell=cell)
            if not verdict.passed:
                raise ExerciseFailure(_helper_message(exercise, helper, verdict)) from None
    finally:
        _BEING_CHECKED.discard(exercise)


def _through(helper: Helper) -> str:
    return "" if helper.via is None else f" (through your {helper.via})"


def _helper_message(exercise: str, helper: Helper, verdict) -> str:
    name, check_call = helper.name, verdict.exercise.check_call
    problem = {
        "not done yet": "which is not done yet",
        "did not run": "whose exercise cell did not run",
    }.get(verdict.status, f"which does not pass {check_call.split('(')[0]}")
    lines = [f"Your {exercise} calls {name}{_through(helper)}, {problem}."]
    if verdict.reason:
        lines.append(f"  {name}: {verdict.reason}")
    lines.append(
        f"Likely cause: {name}, not your {exercise}: fix {name} first ({check_call} shows "
        "why), then run this check again."
    )
    return "\n".join(lines)


def checker(exercise: str, what_to_do: str, *, own_work: dict | None = None) -> Callable:
    """Turn ``run_cases(candidate) -> number of cases`` into a :class:`Checker` (not registered:
    :func:`exercise` declares one)."""

    def decorate(run_cases: Callable[..., int]) -> Checker:
        return Checker(run_cases, exercise, what_to_do, own_work)

    return decorate


def exercise(
    name: str,
    lesson: str,
    *,
    reference,
    todo: str,
    points: int = 1,
    own_work: dict | None = None,
    table=None,
):
    """Declare an exercise: ``name`` is what the learner writes in lesson ``lesson``,
    ``reference`` is used in its place until it passes, ``todo`` says what to write (shown while
    it is not done yet), ``points`` count in the grader, ``own_work`` names the library routines
    the exercise replaces ({"torch's ...": routine}: an answer that calls one fails at once).

    With ``table`` (a :class:`~._table.Table`) it returns the registered :class:`Checker`, named
    ``check_<name in snake case>``; without, it decorates ``run_cases(candidate) -> number of
    cases``."""

    def decorate(run_cases: Callable[..., int]) -> Checker:
        check = Checker(run_cases, name, todo, own_work)
        register(Exercise(name, lesson, check, reference, points))
        return check

    if table is None:
        return decorate
    from ._table import run  # the table's loop (it imports this module's primitives)

    def run_table(candidate) -> int:
        return run(candidate, table, name)

    run_table.__name__ = run_table.__qualname__ = f"check_{snake_case(name)}"
    run_table.__doc__ = f"Check ``{name}`` against its reference, case by case."
    check = decorate(run_table)
    check.table = table  # what it checks, as data: cases, tolerances, mistakes
    return check


def snake_case(name: str) -> str:
    """``MultiHeadAttention`` -> ``multi_head_attention``; an acronym is one word:
    ``RMSNorm`` -> ``rms_norm``."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


_KNOWN_CRASHES = (
    (
        "before Module.__init__() call",
        "your __init__ does not call super().__init__() before creating its layers: make "
        "super().__init__() the first line of __init__.",
    ),
    (
        "on a bool tensor is not supported",
        "a minus sign does not invert a bool mask: the logical not does (the ~ operator).",
    ),
    (
        "with a bool tensor is not supported",
        "one minus a bool mask is no inverted mask: the logical not is (the ~ operator).",
    ),
)


def _known_crash(error: BaseException) -> str | None:
    return next((why for text, why in _KNOWN_CRASHES if text in str(error)), None)


def crashed(case: str | None, error: BaseException, hint: str = "", inputs: str = ""):
    """The failure to raise (``from error``) when the learner's code raised ``error``: the case,
    the error, the learner's line that raised it, the inputs and the likely cause."""
    hint = (
        _known_crash(error)
        or hint
        or "a shape mix-up; print the shapes inside your code, step by step."
    )
    lines = [
        ("" if case is None else f"Case {case!r}: ") + f"your code raised {_error_text(error)}"
    ]
    lines += frame_lines(error)
    if inputs:
        lines.append(f"  inputs: {inputs}")
    lines.append(f"Likely cause: {hint}")
    return ExerciseFailure("\n".join(lines))


def call_candidate(candidate: Callable, case: str, *args, crash_hint: str = "", **kwargs):
    """Call the learner's code; turn NotImplementedError into NotDoneYet and a crash into a
    failure that says which case crashed, where, with what inputs, and (``crash_hint``) what to
    look at."""
    try:
        return candidate(*args, **kwargs)
    except NotImplementedError:
        raise NotDoneYet() from None
    except Exception as error:  # the learner's bug: report it with the case that triggered it
        inputs = ", ".join(
            [_describe(a) for a in args] + [f"{k}={_describe(v)}" for k, v in kwargs.items()]
        )
        raise crashed(case, error, crash_hint, inputs) from error


def call_with_mask(candidate, case: str, *args, attn_mask, crash_hint: str, mask_hint: str):
    """:func:`call_candidate` with ``attn_mask=attn_mask``; when the learner's code crashes with
    the mask and runs without it, the likely cause is ``mask_hint``."""
    try:
        return call_candidate(candidate, case, *args, attn_mask=attn_mask, crash_hint=crash_hint)
    except ExerciseFailure as failure:
        error = failure.raised
        if attn_mask is None or error is None or _known_crash(error) or not _runs(candidate, *args):
            raise
        raise failure.with_cause(mask_hint) from error


def _runs(candidate: Callable, *args) -> bool:
    try:
        with torch.no_grad():
            candidate(*args)
    except Exception:
        return False
    return True


def _describe(x, equals: bool = False) -> str:
    """``tensor(2, 4)``, ``8``, ``Linear``; with ``equals``: ``a tensor(2, 4)``, ``= 8``, ``a Linear``."""
    if isinstance(x, torch.Tensor):
        text = f"tensor{shape_str(x.shape)}" + ("" if x.is_floating_point() else f" {x.dtype}")
    elif x is None or isinstance(x, (int, float, bool, str)):
        return f"= {x!r}" if equals else repr(x)
    else:
        text = type(x).__name__
    return f"a {text}" if equals else text
