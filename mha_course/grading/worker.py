"""The subprocess that runs one learner's answers: ``python -m mha_course.grading.worker JOB RESULTS``.

JOB is a JSON file ``{"answers": {name: source}, "exercises": [name, ...], "known": {name:
status}}``; the worker runs the exercises in the registry's order, each answer executed in one
namespace (as the lessons load them: a later answer may call an earlier one; an answer that does
not pass is replaced by the course's reference there), and checks each one it is asked for. For
each, it appends two JSON lines to RESULTS: ``{"exercise": name, "event": "start"}`` before it
runs the learner's code, then ``{"exercise": name, "status": ..., "cause": ...}``. The parent
(:mod:`mha_course.grading.runner`) watches the file, enforces the time limit, and restarts a worker
for the rest after a timeout or a crash, passing what it already knows in ``known`` (answers that
passed are executed again, unchecked, so later ones can use them).

Statuses: ``pass``, ``fail`` (runs, gives a wrong answer or crashes on a case), ``not_done`` (no
answer, the skeleton, or it raises NotImplementedError), ``error`` (the code does not run: a
syntax error, an exception or ``SystemExit`` when executed or checked).
"""

from __future__ import annotations

import contextlib
import io
import json
import linecache
import os
import sys
from pathlib import Path


def _emit(results: Path, record: dict) -> None:
    with open(results, "a", encoding="utf-8") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _compiled(source: str, name: str):
    """The answer's code, under the file name ``<name>.py``, its lines in linecache as IPython
    keeps a cell's: so that what reads an answer's source (tracebacks, Triton's ``@triton.jit``)
    finds it."""
    filename = f"{name}.py"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    return compile(source, filename, "exec")


def grade_one(exercise, source: str | None, namespace: dict) -> tuple[str, str]:
    """(status, cause) of one answer, executed in ``namespace`` and checked."""
    from ..checks._failure import ExerciseFailure, NotDoneYet, error_line
    from .answers import is_skeleton

    name = exercise.name
    if source is None:
        return "not_done", "no answer saved"
    if is_skeleton(source):
        return "not_done", "still the skeleton"
    try:
        exec(_compiled(source, name), namespace)
    except BaseException as error:  # SyntaxError, an exception at import, SystemExit
        return "error", error_line(error)
    candidate = namespace.get(name)
    if candidate is None:
        return "error", f"the answer defines no {name}"
    try:
        exercise.check.run(candidate, cell=False)
    except NotDoneYet:
        return "not_done", "raises NotImplementedError"
    except ExerciseFailure as failure:
        return "fail", failure.short()
    except BaseException as error:  # SystemExit, KeyboardInterrupt from the learner's code
        return "error", error_line(error)
    return "pass", ""


def run(job: dict, results: Path) -> None:
    from ..exercises import EXERCISES
    from ..notebook import _PREAMBLE

    answers, wanted, known = job["answers"], set(job["exercises"]), job.get("known", {})
    namespace: dict = {"__name__": "__main__"}
    exec(_PREAMBLE, namespace)
    quiet = io.StringIO()
    for exercise in EXERCISES:
        name = exercise.name
        source = answers.get(name)
        if name in known:  # graded by an earlier worker: rebuild the namespace only
            if known[name] == "pass":
                with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
                    exec(_compiled(source, name), namespace)
            else:
                namespace[name] = exercise.reference
            continue
        if name not in wanted:
            namespace[name] = exercise.reference
            continue
        _emit(results, {"exercise": name, "event": "start"})
        with contextlib.redirect_stdout(quiet), contextlib.redirect_stderr(quiet):
            status, cause = grade_one(exercise, source, namespace)
        if status != "pass":
            namespace[name] = exercise.reference
        _emit(results, {"exercise": name, "status": status, "cause": cause})
        quiet.seek(0), quiet.truncate()


def main(argv: list[str]) -> int:
    job_path, results = Path(argv[0]), Path(argv[1])
    import matplotlib
    import torch

    matplotlib.use("Agg")  # an answer that plots must not open a window
    if not torch.cuda.is_available():  # lesson 09's kernels run in Triton's interpreter, which is
        os.environ.setdefault("TRITON_INTERPRET", "1")  # read when Triton is first imported
    run(json.loads(job_path.read_text(encoding="utf-8")), results)
    return 0


if __name__ == "__main__":
    code = main(sys.argv[1:])
    sys.stdout.flush()
    os._exit(code)  # now: a thread the learner's code started must not keep the worker alive
