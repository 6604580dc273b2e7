"""Grading a room: each learner's answers in a subprocess of their own, with a time limit.

:func:`grade_submissions` runs one worker (:mod:`mha_course.grading.worker`) per learner, as many
at once as there are CPU cores, and watches each worker's results file. An exercise that runs
past ``timeout`` seconds is recorded as ``timeout``; a worker that dies (``os._exit``, a crash)
leaves ``error`` on the exercise it was running; either way a fresh worker goes on with the
learner's remaining exercises. A worker killed outside any exercise (while it starts, or between
two: out of memory on a busy machine) blames no answer: it is started again. The learner's own output (prints, warnings) is discarded.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from ..exercises import EXERCISES
from .answers import Submission

__all__ = ["Row", "grade_submissions", "STATUSES"]

STATUSES = ("pass", "fail", "not_done", "error", "timeout")
STARTUP_LIMIT = 180.0  # seconds for a worker to import torch and the package, on a busy machine
RETRIES = 2  # a worker killed outside any exercise is started again this many times in a row


@dataclass(frozen=True)
class Row:
    learner: str
    exercise: str
    lesson: str
    status: str  # one of STATUSES
    cause: str = ""


def _read_events(results: Path) -> list[dict]:
    if not results.exists():
        return []
    lines = results.read_text(encoding="utf-8").splitlines()
    events = []
    for line in lines:
        try:
            events.append(json.loads(line))
        except json.JSONDecodeError:  # a line being written: read it next time
            break
    return events


def _kill(process: subprocess.Popen) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError, AttributeError):
        process.kill()
    process.wait()


def _run_worker(job: dict, timeout: float, folder: Path, attempt: int) -> tuple[list[dict], str]:
    """One worker on ``job``: its events, and how it ended ("done", "timeout", "died N")."""
    job_path, results = folder / f"job{attempt}.json", folder / f"results{attempt}.jsonl"
    job_path.write_text(json.dumps(job), encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, "-m", "mha_course.grading.worker", str(job_path), str(results)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=folder,
        start_new_session=True,  # its own process group: a kill takes its children too
        env={**os.environ, "MPLBACKEND": "Agg", "OMP_NUM_THREADS": "1"},
    )
    started, seen, ending = time.monotonic(), 0, "done"
    while True:
        code = process.poll()
        events = _read_events(results)
        if len(events) != seen:
            seen, started = len(events), time.monotonic()
        running = events and "event" in events[-1]
        limit = timeout if running else STARTUP_LIMIT
        if code is not None:
            if running:
                ending = f"died {code}"
            elif code != 0:  # killed while starting or between exercises: no answer to blame
                ending = f"died between exercises {code}"
            break
        if time.monotonic() - started > limit:
            _kill(process)
            ending = "timeout" if running else "died (no start within the time limit)"
            break
        time.sleep(0.05)
    return _read_events(results), ending


def grade_submission(submission: Submission, timeout: float = 60.0, names=None) -> list[Row]:
    """Every exercise of one learner (``names``: only those), as :class:`Row` s."""
    lessons = {e.name: e.lesson for e in EXERCISES}
    todo = [e.name for e in EXERCISES if names is None or e.name in names]
    known: dict[str, tuple[str, str]] = {}
    with tempfile.TemporaryDirectory(prefix="mha-grade-") as tmp:
        attempt, quiet_deaths = 0, 0
        while [n for n in todo if n not in known]:
            remaining = [n for n in todo if n not in known]
            job = {
                "answers": submission.answers,
                "exercises": remaining,
                "known": {n: s for n, (s, _) in known.items()},
            }
            events, ending = _run_worker(job, timeout, Path(tmp), attempt)
            attempt += 1
            if any("status" in event for event in events):
                quiet_deaths = 0
            for event in events:
                if "status" in event:
                    known[event["exercise"]] = (event["status"], event["cause"])
            if ending == "done":
                continue
            stuck = next((n for n in remaining if n not in known), None)
            if stuck is None:
                break
            if ending == "timeout":
                known[stuck] = ("timeout", f"still running after {timeout:g} s")
            elif ending.startswith("died between exercises"):
                # the machine's doing (out of memory, a signal), not the learner's: try again,
                # up to RETRIES times in a row
                quiet_deaths += 1
                if quiet_deaths <= RETRIES:
                    continue
                for name in remaining:
                    known.setdefault(name, ("error", "the grader's worker kept stopping"))
            elif ending.startswith("died (no start"):
                for name in remaining:  # the worker never got going: nothing to blame a learner for
                    known.setdefault(name, ("error", "the grader's worker did not start"))
            else:
                code = ending.split()[-1]
                known[stuck] = ("error", f"the Python process exited (code {code}) while it ran")
    return [
        Row(submission.learner, n, lessons[n], *known.get(n, ("error", "not graded"))) for n in todo
    ]


def grade_submissions(
    submissions: list[Submission],
    timeout: float = 60.0,
    jobs: int | None = None,
    names=None,
    on_done: Callable[[Submission, list[Row]], None] | None = None,
) -> list[Row]:
    """Every learner's rows, learners in the order given; ``jobs`` workers at once (default:
    the number of CPU cores). ``on_done(submission, rows)`` is called as each learner finishes."""
    jobs = jobs or os.cpu_count() or 1

    def one(submission: Submission) -> list[Row]:
        rows = grade_submission(submission, timeout, names)
        if on_done is not None:
            on_done(submission, rows)
        return rows

    with ThreadPoolExecutor(max_workers=jobs) as pool:
        results = list(pool.map(one, submissions))
    return [row for rows in results for row in rows]
