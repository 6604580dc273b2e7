"""What the notebooks' shared first cell calls, and how a lesson builds on the learner's
answers from earlier lessons.

An exercise cell starts with the line ``# exercise: <name>``. Each time such a cell runs, its
code is saved to ``my_work/<name>.py`` next to the notebook, so a later lesson can load it with
:func:`load_your_work`: the learner's own attention, multi-head attention and LayerNorm become
the parts of their encoder.
"""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import torch

from .exercises import EXERCISES
from .utils import get_device, seed_everything

__all__ = ["start", "load_your_work", "WORK_DIR", "EXERCISE_MARKER"]

WORK_DIR = Path("my_work")
EXERCISE_MARKER = re.compile(r"^\s*# exercise: (\w+)")

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


def _set_plot_style() -> None:
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": 90, "axes.grid": False, "figure.max_open_warning": 0})


def save_exercise_cell(source: str, directory: Path = WORK_DIR) -> Path | None:
    """Save a cell that starts with ``# exercise: <name>`` to ``<directory>/<name>.py``."""
    match = EXERCISE_MARKER.match(source)
    if match is None:
        return None
    directory.mkdir(exist_ok=True)
    path = directory / f"{match.group(1)}.py"
    path.write_text(source if source.endswith("\n") else source + "\n", encoding="utf-8")
    return path


def _watch_exercise_cells() -> None:
    try:
        from IPython import get_ipython
    except ImportError:  # plain Python: nothing to watch
        return
    shell = get_ipython()
    if shell is None:
        return

    def after_cell(result) -> None:
        if result.success:
            save_exercise_cell(result.info.raw_cell)

    callbacks = shell.events.callbacks["post_run_cell"]
    if not any(
        getattr(cb, "__name__", "") == "after_cell" and cb.__module__ == __name__
        for cb in callbacks
    ):
        shell.events.register("post_run_cell", after_cell)


def load_your_work(
    directory: Path | str = WORK_DIR, *, before: str | None = None, quiet: bool = False
) -> SimpleNamespace:
    """Your answers from earlier lessons, each checked again; where one is missing or does not
    pass its checker, the course's reference takes its place. Prints which is which.

    ``before="04"`` lists only the exercises of lessons 00-03 (all of them are loaded either way).
    """
    directory = Path(directory)
    namespace: dict = {}
    exec(_PREAMBLE, namespace)
    lines = []
    for exercise in EXERCISES:
        status = _load_answer(exercise, directory / f"{exercise.name}.py", namespace)
        if status != "yours":
            namespace[exercise.name] = exercise.reference
        if before is None or exercise.lesson < before:
            lines.append(
                f"  {exercise.lesson} {exercise.name:<30} "
                + ("yours ✅" if status == "yours" else f"course reference (yours: {status})")
            )
    if not quiet:
        print(f"Answers loaded from {directory}/:")
        print("\n".join(lines))
        if any("not found" in line for line in lines):
            print(
                "(An answer is saved when its exercise cell runs, in the notebook's folder. On Colab "
                "every notebook runs on a machine of its own: run the earlier lesson's exercise cell "
                "in this notebook to use your answer here.)"
            )
    return SimpleNamespace(**{e.name: namespace[e.name] for e in EXERCISES})


def _load_answer(exercise, path: Path, namespace: dict) -> str:
    """Run a saved answer in ``namespace``: "yours" when it passes its check, else what is wrong."""
    if not path.exists():
        return "not found"
    try:
        exec(compile(path.read_text(encoding="utf-8"), str(path), "exec"), namespace)
        candidate = namespace.get(exercise.name)
        if candidate is None:
            return f"no {exercise.name} in {path.name}"
        return "yours" if exercise.check.passes(candidate) else "not done yet"
    except AssertionError:
        return "fails its check"
    except Exception as error:  # a broken answer is reported, never fatal
        return f"raises {type(error).__name__}"
