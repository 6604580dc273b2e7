"""What the notebooks' shared first cell calls, and how a lesson builds on the learner's
answers from earlier lessons.

An exercise cell starts with the line ``# exercise: <name>``. Each time such a cell runs with an
answer in it, its code is saved to ``my_work/<name>.py`` next to the notebook (see
:mod:`mha_course.work` for how earlier versions are kept), so a later lesson can load it with
:func:`load_your_work`: the learner's own attention, multi-head attention and LayerNorm become
the parts of their encoder. The last run of every exercise cell is also remembered
(:func:`mha_course.work.last_run`), so a check can say when the cell it tests did not run.

A cell that is still the skeleton is never saved; when an answer to it was saved earlier, that
answer runs in the skeleton's place, so a lesson run again uses the learner's work. On Colab,
where every notebook runs on a machine of its own, ``start(work_dir="drive")`` keeps the answers
on the learner's Google Drive, where every lesson finds them.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

from .checks._failure import error_line
from .exercises import EXERCISES, Verdict, evaluate_file
from .utils import get_device, seed_everything
from .work import (
    ExerciseRun,
    choose_work_dir,
    exercise_name,
    is_answer,
    record_run,
    save_answer,
    work_dir,
)

__all__ = ["start", "expect", "load_your_work"]

# Imports available to saved answers when a later lesson loads them (the lessons' own imports).
_PREAMBLE = """\
import math
import torch
import torch.nn as nn
import torch.nn.functional as F
from einops import rearrange, einsum
"""


def start(seed: int = 0, work_dir: str | os.PathLike | None = None) -> torch.device:
    """Seed everything, pick the device (CUDA, MPS, CPU), set the plot style and start saving
    exercise answers. Returns the device.

    ``work_dir`` is where your answers are kept: None for ``my_work/`` beside the notebook,
    ``"drive"`` for your Google Drive on Colab (mounted here; ``MyDrive/mha-course/my_work``, the
    same folder from every notebook, so a later lesson finds an earlier one's answers), or any
    folder."""
    folder = None if work_dir is None else _use_work_dir(work_dir)
    seed_everything(seed)
    device = get_device()
    _set_plot_style()
    _watch_exercise_cells()
    answers = "" if folder is None else f", answers in {folder}"
    print(f"Ready: device = {device.type}, seed = {seed}{answers}")
    return device


def expect(statement: str, holds: bool) -> None:
    """Print a result the lesson's text relies on, as a check that holds on every machine.

    Training curves and timings differ in their last digits from one CPU to the next, so a
    lesson states what it concludes from them ("post-LN without warm-up is still above 1.0 after
    100 steps") with a tolerance, and prints the exact figures in a cell of their own whose output
    the course's tests do not compare."""
    print(f"✔ {statement}" if holds else f"✘ not so on this run: {statement}")


# ---------------------------------------------------------------- where answers are kept

DRIVE = Path("/content/drive")  # where Colab mounts Google Drive
DRIVE_WORK_DIR = Path("MyDrive") / "mha-course" / "my_work"  # the answers' folder on the Drive


def on_colab() -> bool:
    """Whether this runs on Colab (``google.colab`` is importable)."""
    if "google.colab" in sys.modules:  # Colab's kernel imports it at start
        return True
    try:
        return importlib.util.find_spec("google.colab") is not None
    except (ImportError, ValueError):  # no "google" package at all
        return False


def _use_work_dir(work_dir) -> Path:
    if isinstance(work_dir, str) and work_dir == "drive":
        return choose_work_dir(_mount_drive() / DRIVE_WORK_DIR)
    if not isinstance(work_dir, (str, os.PathLike)):
        raise TypeError(
            f'work_dir must be "drive", a folder (str or Path) or None, got '
            f"{type(work_dir).__name__} {work_dir!r}"
        )
    return choose_work_dir(work_dir)


def _mount_drive() -> Path:
    """Mount Google Drive (Colab asks for permission the first time); return where it is."""
    try:
        from google.colab import drive
    except ImportError:
        raise ValueError(
            'work_dir="drive" keeps your answers on Google Drive, which works only on Colab '
            "(google.colab cannot be imported here). Leave work_dir out to keep them in my_work/ "
            'beside the notebook, or name a folder: start(work_dir="path/to/folder").'
        ) from None
    if not (DRIVE / "MyDrive").is_dir():  # not mounted yet on this machine
        drive.mount(str(DRIVE))
    return DRIVE


def _set_plot_style() -> None:
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 90, "axes.grid": False, "figure.max_open_warning": 0})


# ---------------------------------------------------------------- exercise cells, as they run


def _describe(error: BaseException) -> str:
    if isinstance(error, SyntaxError):
        return f"{type(error).__name__}: {error.msg} (line {error.lineno})"
    return f"{type(error).__name__}: {error}"


def after_exercise_cell(
    source: str, error: BaseException | None = None, namespace: dict | None = None
) -> None:
    """Remember how an exercise cell's run went; save it to my_work/ when it ran and is an answer.

    A cell that is still the skeleton is never saved. If an answer to it was saved earlier, that
    answer runs in ``namespace`` (the notebook's) in the skeleton's place, so the check and the
    cells below use it, and one line says so and how to bring it into the cell."""
    name = exercise_name(source)
    if name is None:
        return
    record_run(ExerciseRun(name, error is None, None if error is None else _describe(error)))
    if error is not None:
        return
    if is_answer(source):
        save_answer(source)
        return
    path = work_dir() / f"{name}.py"
    if not path.is_file():
        return
    shown = path.as_posix()
    problem = "" if namespace is None else run_saved_answer(name, path, namespace)
    if problem is None:
        print(
            f"↩ Your answer saved in {shown} runs in place of this skeleton. To edit it here, "
            f"replace this cell's code with `%load {shown}` and run the cell."
        )
    else:
        print(
            f"Your answer saved in {shown} {problem or 'was not run'}, so {name} is this cell's "
            f"skeleton. To fix it here, replace this cell's code with `%load {shown}` and run the cell."
        )


def run_saved_answer(name: str, path: Path, namespace: dict) -> str | None:
    """Run the answer saved in ``path`` in ``namespace``: None when it ran and defined ``name``;
    otherwise what went wrong, in a few words, with ``namespace`` left as it was."""
    before = dict(namespace)
    try:
        code = compile(path.read_text(encoding="utf-8"), str(path.resolve()), "exec")
        exec(code, namespace)
        problem = None if namespace.get(name) is not before.get(name) else f"defines no {name}"
    except Exception as error:  # a broken answer is reported, never fatal
        problem = f"did not run ({error_line(error)})"
    if problem is not None:
        for key in set(namespace) - set(before):
            del namespace[key]
        namespace.update(before)
    return problem


def _watch_exercise_cells() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing to watch
        return
    shell = get_ipython()
    if shell is None:
        return

    def after_cell(result) -> None:
        after_exercise_cell(
            result.info.raw_cell, result.error_before_exec or result.error_in_exec, shell.user_ns
        )

    callbacks = shell.events.callbacks["post_run_cell"]
    if not any(
        getattr(cb, "__name__", "") == "after_cell" and cb.__module__ == __name__
        for cb in callbacks
    ):
        shell.events.register("post_run_cell", after_cell)
    shell.set_custom_exc((NameError,), _undefined_exercise)


def undefined_exercise_message(error: NameError) -> str | None:
    """What to do when a cell uses an exercise's answer that is not defined: after a restart,
    a check cell run before its exercise cell (None when the name is no exercise's)."""
    name = getattr(error, "name", None)
    if name not in {e.name for e in EXERCISES}:
        return None
    lesson = next(e.lesson for e in EXERCISES if e.name == name)
    return (
        f"NameError: `{name}` is not defined yet: this kernel has not run its exercise cell. Run "
        f"the cell that starts with `# exercise: {name}` (lesson {lesson}) first, then this one. "
        "(After a restart, a notebook's variables are gone until their cells run again: "
        "Run > Run All Above does it in one step.)"
    )


def _undefined_exercise(shell, etype, value, tb, tb_offset=None):
    """IPython's handler for NameError: shows the message above for an exercise's name, the
    usual traceback for any other name (IPython's run_code leaves the showing to the handler)."""
    message = undefined_exercise_message(value)
    if message is None:
        shown = shell.InteractiveTB.structured_traceback(etype, value, tb, tb_offset=tb_offset)
    else:
        shown = [message]
    shell._showtraceback(etype, value, shown)  # an error output in Jupyter, text in a terminal
    return shown


# ---------------------------------------------------------------- answers from earlier lessons


def load_your_work(
    directory: Path | str | None = None, *, before: str | None = None, quiet: bool = False
) -> SimpleNamespace:
    """Your answers from earlier lessons, each checked again; where one is missing or does not
    pass its checker, the course's reference takes its place. Prints which is which: one line
    per exercise and, under one that fails, one line saying why and where to see more.

    ``before="04"`` loads and lists only the exercises of lessons 00-03: the later ones are the
    course's references, unread (a lesson runs no check of a lesson still ahead, such as lesson
    09's Triton kernels in lesson 04).
    """
    directory = work_dir() if directory is None else Path(directory)
    namespace: dict = {}
    exec(_PREAMBLE, namespace)
    lines, missing = [], False
    for exercise in EXERCISES:
        if before is not None and exercise.lesson >= before:
            namespace[exercise.name] = exercise.reference
            continue
        verdict = _load_answer(exercise, directory / f"{exercise.name}.py", namespace)
        if not verdict.passed:
            namespace[exercise.name] = exercise.reference
        missing = missing or verdict.status == "not found"
        lines.append(
            f"  {exercise.lesson} {exercise.name:<30} "
            + ("yours ✅" if verdict.passed else f"course reference (yours: {verdict.status})")
        )
        if verdict.reason:
            lines.append(f"       {verdict.reason} {verdict.next_step}")
    if not quiet:
        print("Answers loaded from my_work/:")
        print("\n".join(lines))
        if missing and on_colab():
            print(_colab_note(directory))
    return SimpleNamespace(**{e.name: namespace[e.name] for e in EXERCISES})


def _colab_note(directory: Path) -> str:
    """Why an earlier answer is missing on Colab, and the way to keep answers across notebooks."""
    if Path(directory).resolve() == (DRIVE / DRIVE_WORK_DIR).resolve():
        return (
            f"(Answers are read from your Google Drive, in {DRIVE_WORK_DIR.as_posix()}. An answer "
            "is saved there when its exercise cell runs in a notebook set up with "
            'work_dir="drive": run the earlier lesson\'s exercise cell that way once.)'
        )
    return (
        "(On Colab every notebook runs on a machine of its own, so answers saved by another "
        "notebook are not here. To keep them across notebooks, make the set-up cell's last line "
        'device = start(seed=0, work_dir="drive") in every lesson: your answers then live on '
        f"your Google Drive, in {DRIVE_WORK_DIR.as_posix()}.)"
    )


def _load_answer(exercise, path: Path, namespace: dict) -> Verdict:
    """Run a saved answer in ``namespace`` and check it: the registry's verdict."""
    return evaluate_file(exercise, path, namespace)[0]
