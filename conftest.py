"""Test-session set-up shared by the unit tests and the notebook runs (nbval).

Two rules protect a learner's work while the tests run in their checkout:

* only the course's own notebooks are collected (both versions of each lesson), never a learner's
  copy, a backup, or anything under ``my_work/``;
* every notebook runs against a private, freshly seeded work folder (``MHA_COURSE_WORK_DIR``), so
  the tests never read or write the learner's ``my_work/``, and each notebook runs the same
  whatever ran before it (which is what lets the notebooks run in parallel).
"""

import os
import shutil
import tempfile
from pathlib import Path

import matplotlib
import pytest

matplotlib.use("Agg")
# Build matplotlib's font cache now: on a fresh machine the first import prints a notice on
# stderr, which nbval would compare against the notebook's saved (clean) output.
import matplotlib.font_manager  # noqa: E402,F401
from hypothesis import settings  # noqa: E402

from tools import authoring  # noqa: E402

# Reproducible property tests: the same examples on every run, no time limit per example.
settings.register_profile("course", derandomize=True, deadline=None, print_blob=True)
settings.load_profile("course")

# Notebooks run offline: never reach for a model hub.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# The test run's quick mode: lesson 06 gives its benchmark sweep a smaller time budget (its timings
# are never compared, and what it concludes must hold at either budget). A learner's run, and the
# build that saves the notebooks, use the full budget.
os.environ.setdefault("MHA_COURSE_QUICK", "1")
# The tests run in parallel, one process per core (pytest-xdist), and each process, and each
# notebook kernel it starts, would otherwise use one torch thread per core: N x N threads on N
# cores, waiting on one another (lesson 05's head ablation ran ten times slower that way). So one
# thread each, unless OMP_NUM_THREADS says otherwise.
if (
    int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")) > 1
    and "OMP_NUM_THREADS" not in os.environ
):
    import torch

    os.environ["OMP_NUM_THREADS"] = "1"  # the notebook kernels this worker starts
    torch.set_num_threads(1)  # this worker

LESSON_NOTEBOOKS = {p.resolve() for p in authoring.lesson_notebooks()}
NOT_COLLECTED = {"my_work", ".history", ".ipynb_checkpoints"}


def pytest_ignore_collect(collection_path: Path, config):
    """Collect the course's notebooks only: not a learner's copy, a backup or my_work/."""
    if collection_path.name in NOT_COLLECTED:
        return True
    if collection_path.suffix == ".ipynb" and collection_path.resolve() not in LESSON_NOTEBOOKS:
        return True
    return None


_private_dirs: list[str] = []


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """Before a notebook's kernel starts (nbval starts it when the notebook's first cell is set
    up), point it at a private work folder seeded for that notebook."""
    notebook = getattr(item, "parent", None)
    if getattr(notebook, "path", Path()).suffix != ".ipynb" or notebook.kernel is not None:
        return
    _private_dirs.append(tempfile.mkdtemp(prefix="mha-course-"))
    folder = authoring.seed_work_dir(Path(_private_dirs[-1]) / "my_work", notebook.path)
    os.environ[authoring.WORK_DIR_VARIABLE] = str(folder)


def pytest_sessionfinish(session, exitstatus):
    os.environ.pop(authoring.WORK_DIR_VARIABLE, None)
    while _private_dirs:
        shutil.rmtree(_private_dirs.pop(), ignore_errors=True)
