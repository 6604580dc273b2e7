"""Whether an answer is used, and if not, why, in one line (:func:`evaluate`): what the lessons
print when they fall back on the reference, what ``progress`` and the grader report."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ._failure import CellDidNotRun, ExerciseFailure, NotDoneYet, error_line
from ._registry import REGISTRY, Exercise


@dataclass(frozen=True)
class Verdict:
    """``status``: "yours" (it passes), "not done yet", "fails its check", "raises <Error>" (it
    crashed, on loading or in the check), "did not run" (its cell's last run failed), "not found"
    (no saved answer), or "no <name> in <file>"; ``reason``: the case and the likely cause, or
    the error and the line that raised it."""

    exercise: Exercise
    status: str
    reason: str = ""

    @property
    def passed(self) -> bool:
        return self.status == "yours"

    @property
    def next_step(self) -> str:
        """How to see the whole message."""
        lesson = f" in lesson {self.exercise.lesson}" if self.exercise.lesson else ""
        return f"Full message: run {self.exercise.check_call}{lesson}."


def exercise_of(check_or_exercise) -> Exercise:
    """The registered exercise of a checker (or a stand-in for an unregistered one)."""
    if isinstance(check_or_exercise, Exercise):
        return check_or_exercise
    found = next((e for e in REGISTRY if e.check is check_or_exercise), None)
    name = getattr(check_or_exercise, "exercise", "your code")
    return found or Exercise(name, "", check_or_exercise, None)


def evaluate(check_or_exercise, candidate, *, cell: bool = True) -> Verdict:
    """Run ``candidate`` through its exercise's checker, quietly. ``cell``: the candidate is what
    the notebook's exercise cell defined (so a failed last run of that cell makes it stale)."""
    exercise = exercise_of(check_or_exercise)
    if candidate is None:
        return Verdict(exercise, "not done yet")
    try:
        exercise.check.run(candidate, cell=cell)
    except NotDoneYet as not_done:  # its message, if any, names the exercise it waits for
        return Verdict(exercise, "not done yet", str(not_done))
    except CellDidNotRun as failure:
        return Verdict(exercise, "did not run", str(failure).split("\n")[0])
    except ExerciseFailure as failure:
        raised = failure.raised
        status = "fails its check" if raised is None else f"raises {type(raised).__name__}"
        return Verdict(exercise, status, failure.short())
    return Verdict(exercise, "yours")


def evaluate_file(exercise: Exercise, path: Path, namespace: dict) -> tuple[Verdict, object]:
    """Run a saved answer in ``namespace``, then :func:`evaluate` what it defines. Returns the
    verdict and the answer (None when there is none)."""
    if not path.exists():
        return Verdict(exercise, "not found"), None
    try:
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
    except Exception as error:  # a broken answer is reported, never fatal
        return Verdict(exercise, f"raises {type(error).__name__}", error_line(error)), None
    candidate = namespace.get(exercise.name)
    if candidate is None:
        return Verdict(exercise, f"no {exercise.name} in {path.name}"), None
    return evaluate(exercise, candidate, cell=False), candidate
