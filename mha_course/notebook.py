"""What the notebooks' shared first cell calls, and how a lesson builds on the learner's
answers from earlier lessons.

An exercise cell starts with the line ``# exercise: <name>``. Each time such a cell runs with an
answer in it, its code is saved to ``my_work/<name>.py`` next to the notebook (see
:mod:`mha_course.work` for how earlier versions are kept), so a later lesson can load it with
:func:`load_your_work`: the learner's own attention, multi-head attention and LayerNorm become
the parts of their encoder. The last run of every exercise cell is also remembered
(:func:`mha_course.work.last_run`), so a check can say when the cell it tests did not run.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import torch

from .exercises import EXERCISES, Verdict, evaluate_file
from .utils import get_device, seed_everything
from .work import ExerciseRun, exercise_name, is_answer, record_run, save_answer, work_dir

__all__ = ["start", "expect", "load_your_work"]

# Imports available to saved answers when a later lesson loads them (the lessons' own imports).
_PREAMBLE = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange, einsum
"""


def start(seed: int = 0) -> torch.device:
    """Seed everything, pick the device (CUDA, MPS, CPU), set the plot style and start saving
    exercise answers. Returns the device."""
    seed_everything(seed)
    device = get_device()
    _set_plot_style()
    _watch_exercise_cells()
    print(f"Ready: device = {device.type}, seed = {seed}")
    return device


def expect(statement: str, holds: bool) -> None:
    """Print a result the lesson's text relies on, as a check that holds on every machine.

    Training curves and timings differ in their last digits from one CPU to the next, so a
    lesson states what it concludes from them ("post-LN without warm-up is still above 1.0 after
    100 steps") with a tolerance, and prints the exact figures in a cell of their own whose output
    the course's tests do not compare."""
    print(f"✔ {statement}" if holds else f"✘ not so on this run: {statement}")


def _set_plot_style() -> None:
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 90, "axes.grid": False, "figure.max_open_warning": 0})


# ---------------------------------------------------------------- exercise cells, as they run


def _describe(error: BaseException) -> str:
    if isinstance(error, SyntaxError):
        return f"{type(error).__name__}: {error.msg} (line {error.lineno})"
    return f"{type(error).__name__}: {error}"


def after_exercise_cell(source: str, error: BaseException | None = None) -> None:
    """Remember how an exercise cell's run went; save it to my_work/ when it ran and is an answer.

    A cell that is still the skeleton is never saved. If an answer to it was saved earlier, say
    where it is, so a learner with a fresh notebook can bring it back."""
    name = exercise_name(source)
    if name is None:
        return
    record_run(ExerciseRun(name, error is None, None if error is None else _describe(error)))
    if error is not None:
        return
    if is_answer(source):
        save_answer(source)
    elif (work_dir() / f"{name}.py").exists():
        print(
            f"(Your earlier answer is kept in my_work/{name}.py; this cell is still the skeleton. "
            f"To bring your answer back, replace this cell's code with `%load my_work/{name}.py`, "
            f"run it, then run it once more.)"
        )


def _watch_exercise_cells() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing to watch
        return
    shell = get_ipython()
    if shell is None:
        return

    def after_cell(result) -> None:
        after_exercise_cell(result.info.raw_cell, result.error_before_exec or result.error_in_exec)

    callbacks = shell.events.callbacks["post_run_cell"]
    if not any(
        getattr(cb, "__name__", "") == "after_cell" and cb.__module__ == __name__
        for cb in callbacks
    ):
        shell.events.register("post_run_cell", after_cell)


# ---------------------------------------------------------------- answers from earlier lessons


def load_your_work(
    directory: Path | str | None = None, *, before: str | None = None, quiet: bool = False
) -> SimpleNamespace:
    """Your answers from earlier lessons, each checked again; where one is missing or does not
    pass its checker, the course's reference takes its place. Prints which is which: one line
    per exercise and, under one that fails, one line saying why and where to see more.

    ``before="04"`` lists only the exercises of lessons 00-03 (all of them are loaded either way).
    """
    directory = work_dir() if directory is None else Path(directory)
    namespace: dict = {}
    exec(_PREAMBLE, namespace)
    lines = []
    for exercise in EXERCISES:
        verdict = _load_answer(exercise, directory / f"{exercise.name}.py", namespace)
        if not verdict.passed:
            namespace[exercise.name] = exercise.reference
        if before is None or exercise.lesson < before:
            lines.append(
                f"  {exercise.lesson} {exercise.name:<30} "
                + ("yours ✅" if verdict.passed else f"course reference (yours: {verdict.status})")
            )
            if verdict.reason:
                lines.append(f"       {verdict.reason} {verdict.next_step}")
    if not quiet:
        print("Answers loaded from my_work/:")
        print("\n".join(lines))
        if any("not found" in line for line in lines):
            print(
                "(An answer is saved when its exercise cell runs, in the notebook's folder. On Colab "
                "every notebook runs on a machine of its own: run the earlier lesson's exercise cell "
                "in this notebook to use your answer here.)"
            )
    return SimpleNamespace(**{e.name: namespace[e.name] for e in EXERCISES})


def _load_answer(exercise, path: Path, namespace: dict) -> Verdict:
    """Run a saved answer in ``namespace`` and check it: the registry's verdict."""
    return evaluate_file(exercise, path, namespace)[0]
