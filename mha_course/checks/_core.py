"""The checker protocol (:class:`Checker`) and the declaration of an exercise (:func:`exercise`).

``check_X(candidate)`` prints one success line when the candidate matches the reference on every
case, "not done yet" while it is the unsolved skeleton (it raises NotImplementedError), and
otherwise raises :class:`ExerciseFailure`: which case failed, what was expected and what came, the
likely cause. Before its cases it looks at the answer itself: did its cell run, does it call the
routine it replaces, does it use a variable of the notebook; a failing answer that uses another
exercise's failing answer is blamed on that one.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable

import torch

from ..work import last_run
from ._calls import _describe, call_candidate, call_with_mask, crashed
from ._failure import CellDidNotRun, ExerciseFailure, NotDoneYet, error_line
from ._inspect import Helper, exercise_helpers, library_call, notebook_variable
from ._registry import REGISTRY, Exercise, find, register
from ._table import Mistake, run
from ._verdict import evaluate

__all__ = ["ExerciseFailure", "CellDidNotRun", "NotDoneYet", "Mistake", "Checker", "checker"]
__all__ += ["exercise", "call_candidate", "crashed", "error_line", "call_with_mask"]
_FROM_INIT = "from what __init__ was given (kept on self) and "


class Checker:
    """A checker: ``check(candidate)`` prints ✅ or ⏳, or raises ExerciseFailure (see above)."""

    def __init__(self, run_cases: Callable[..., int], exercise: str, what_to_do: str, own_work):
        functools.update_wrapper(self, run_cases)
        self._run_cases, self.what_to_do = run_cases, what_to_do
        self.exercise = exercise  # what the learner writes, as the registry names it
        self.own_work = dict(own_work or {})  # {"torch's ...": routine the learner must not call}
        self.table = None  # the case table, for a checker declared with one

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
        candidate is what the notebook's exercise cell defined (stale if that cell's last run
        failed). The learner's random stream is left as it was."""
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
            hint = f"compare your {self.exercise} with the exercise's skeleton."
            failure = crashed(None, error, hint)
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
        name, found = self.exercise, library_call(candidate, self.own_work)
        if found is not None:
            verb = "calls" if found.lineno else "subclasses"
            why = (
                "The exercise is to write it yourself (it is fine to compare with it afterwards, "
                f"outside your {name})."
            )
            raise ExerciseFailure(
                "\n".join([f"Your {name} {verb} {found.name}:", *found.lines(), why])
            )
        found = notebook_variable(candidate)
        if found is not None:
            value = _describe(found.value, equals=True)
            head = (
                f"Your {name} uses `{found.name}` ({value}), a variable of the notebook, defined "
                f"outside your {name}'s cell:"
            )
            inside = _FROM_INIT if isinstance(candidate, type) else ""
            why = (
                f"Later lessons load your {name} without the notebook's variables, and the check "
                f"uses other sizes. Take sizes {inside}from the inputs' shapes instead."
            )
            raise ExerciseFailure("\n".join([head, *found.lines(), why]))


_BEING_CHECKED: set[str] = set()  # the exercises whose helpers are being checked (no cycles)
_PROBLEMS = {
    "not done yet": "which is not done yet",
    "did not run": "whose exercise cell did not run",
}


def _helpers(exercise: str, candidate) -> list[Helper]:
    """The learner's answers to other registered exercises that ``candidate`` uses."""
    names = {e.name for e in REGISTRY} - {exercise}
    try:
        return exercise_helpers(candidate, names)
    except Exception:  # reading the answer's code must never hide the answer's own failure
        return []


def _helpers_not_done(exercise: str, candidate, error: BaseException) -> NotDoneYet:
    """NotDoneYet: plain for ``candidate``'s own skeleton, naming the helper whose skeleton raised,
    or a checker's own that says why (it cannot check on this machine) as it is."""
    if isinstance(error, NotDoneYet) and str(error):
        return error
    while error is not None and not isinstance(error, NotImplementedError):
        error = error.__cause__ or error.__context__
    helpers = [] if error is None else _helpers(exercise, candidate)
    helper = next((h for h in helpers if h.raised(error)), None)
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
    problem = _PROBLEMS.get(verdict.status, f"which does not pass {check_call.split('(')[0]}")
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


def exercise(name: str, lesson: str, *, reference, todo: str, points=1, own_work=None, table=None):
    """Declare an exercise: ``name`` is what the learner writes in lesson ``lesson``,
    ``reference`` is used in its place until it passes, ``todo`` says what to write (shown while
    it is not done yet), ``points`` count in the grader, ``own_work`` names the library routines
    the exercise replaces ({"torch's ...": routine}: an answer that calls one fails at once).
    With ``table`` it returns the registered :class:`Checker` (``check_<name in snake case>``);
    without, it decorates ``run_cases(candidate) -> number of cases``."""

    def decorate(run_cases: Callable[..., int]) -> Checker:
        check = Checker(run_cases, name, todo, own_work)
        register(Exercise(name, lesson, check, reference, points))
        return check

    if table is None:
        return decorate

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
