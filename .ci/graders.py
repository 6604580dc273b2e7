"""The proof behind .ci/graders: nbgrader and otter-grader accept the course's exports and grade
a solved and an unsolved copy of every lesson with full and zero points.

    python .ci/graders.py --work DIR --nbgrader VENV --otter VENV

Each VENV holds the tool, the course package and torch: its own Python runs the notebooks (the
kernel named python3 there). For every lesson with exercises:

* nbgrader: ``generate_assignment``; then two learners submit the released notebook, one with
  the course's answers written into its exercise cells ("solved"), one as released
  ("unsolved"); ``autograde`` grades both and ``export`` writes the grades;
* otter: ``otter assign`` builds the student notebook and the autograder; ``otter run`` grades
  a solved and an unsolved copy of the student notebook.

And the hub link (``--hub VENV``, a venv with nbgitpuller and a Jupyter server): nbgitpuller's
own handler reads the link that ``hub-link`` prints, then nbgitpuller pulls a copy of this
repository twice (the second pull is the one a tag fails), and the notebook the link opens is there.

It also checks that each tool's learner notebook holds the course's own skeletons (the exercise
cells of the course's exercise notebook). Exits 1, naming the lesson, on anything else.
"""

from __future__ import annotations

import argparse
import csv
import html
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from mha_course import lessons  # noqa: E402
from mha_course.exercises import EXERCISES  # noqa: E402
from mha_course.work import exercise_name  # noqa: E402
from tools import authoring, exports  # noqa: E402

PROBLEMS: list[str] = []


def problem(text: str) -> None:
    print(f"FAILED: {text}", flush=True)
    PROBLEMS.append(text)


def tool_env(venv: Path) -> dict:
    """The tool's venv first on PATH, its python3 kernel first on JUPYTER_PATH, the notebooks
    in quick mode, and no work folder of the caller's (each run saves answers beside its
    notebook)."""
    env = {k: v for k, v in os.environ.items() if k != "MHA_COURSE_WORK_DIR"}
    env["PATH"] = f"{venv / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["JUPYTER_PATH"] = str(venv / "share" / "jupyter")
    env["VIRTUAL_ENV"] = str(venv)
    env.update(MHA_COURSE_QUICK="1", MPLBACKEND="Agg", PYTHONWARNINGS="ignore")
    return env


def run(command: list, cwd: Path, env: dict) -> subprocess.CompletedProcess:
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        print(done.stdout[-4000:], done.stderr[-8000:], sep="\n", flush=True)
    return done


def answers() -> dict[str, str]:
    """The course's answer of each exercise, as a learner would write it (no markers)."""
    markers = (lessons.BEGIN, lessons.END)
    return {
        name: "\n".join(line for line in source.split("\n") if line.strip() not in markers)
        for name, source in authoring.solution_answers().items()
    }


def solved(nb):
    """A copy of a learner's notebook with the course's answers in its exercise cells."""
    nb = nbformat.from_dict(json.loads(json.dumps(nb)))
    written = answers()
    for cell in nb.cells:
        name = exercise_name(cell.source) if cell.cell_type == "code" else None
        if name is not None:
            cell.source = written[name].rstrip("\n")
    return nb


def same_skeletons(tool: str, learner_nb, lesson: Path) -> None:
    """The exercise cells a tool gives learners are the course's own."""
    course = nbformat.read(lessons.exercise_path(lesson), as_version=4)

    def skeletons(nb):
        return {
            exercise_name(c.source): c.source
            for c in nb.cells
            if c.cell_type == "code" and exercise_name(c.source)
        }

    if skeletons(learner_nb) != skeletons(course):
        problem(f"{tool} {lesson.stem}: the learner's exercise cells are not the course's")


def expected_points(lesson: Path) -> int:
    return sum(exports.points(e.name) for e in EXERCISES if e.lesson == lesson.name[:2])


# ---------------------------------------------------------------- nbgrader


def fresh_export(folder: Path, export, graded: list[Path]) -> Path:
    shutil.rmtree(folder, ignore_errors=True)
    export(folder, [p.name[:2] for p in graded])
    return folder


def prove_nbgrader(venv: Path, work: Path, graded: list[Path]) -> None:
    course = fresh_export(work / "nbgrader", exports.export_nbgrader, graded)
    env = tool_env(venv)
    for lesson in graded:
        start = time.monotonic()
        name = lesson.stem
        done = run(["nbgrader", "generate_assignment", name, "--force"], course, env)
        if done.returncode != 0:
            problem(f"nbgrader generate_assignment {name} exited {done.returncode}")
            continue
        release = nbformat.read(course / "release" / name / lesson.name, as_version=4)
        same_skeletons("nbgrader", release, lesson)
        for learner, nb in (("solved", solved(release)), ("unsolved", release)):
            target = course / "submitted" / learner / name / lesson.name
            target.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, target)
        done = run(["nbgrader", "autograde", name, "--create", "--force"], course, env)
        if done.returncode != 0:
            problem(f"nbgrader autograde {name} exited {done.returncode}")
        print(f"nbgrader {name}: {time.monotonic() - start:.0f} s", flush=True)
    done = run(["nbgrader", "export", "--to", "grades.csv"], course, env)
    if done.returncode != 0:
        problem(f"nbgrader export exited {done.returncode}")
        return
    with open(course / "grades.csv", newline="", encoding="utf-8") as f:
        grades = {(r["assignment"], r["student_id"]): r for r in csv.DictReader(f)}
    for lesson in graded:
        full = expected_points(lesson)
        for learner, want in (("solved", full), ("unsolved", 0)):
            row = grades.get((lesson.stem, learner))
            if row is None:
                problem(f"nbgrader {lesson.stem}: no grade for the {learner} copy")
                continue
            got, possible = float(row["score"]), float(row["max_score"])
            print(f"nbgrader {lesson.stem} {learner}: {got:g} / {possible:g}")
            if possible != full or got != want:
                problem(
                    f"nbgrader {lesson.stem} {learner}: {got:g} / {possible:g} points, "
                    f"expected {want} / {full}"
                )


# ---------------------------------------------------------------- otter


def otter_scores(results: Path) -> dict[str, tuple[float, float]]:
    data = json.loads(results.read_text(encoding="utf-8"))
    return {t["name"]: (t["score"], t["max_score"]) for t in data["tests"] if "max_score" in t}


def prove_otter(venv: Path, work: Path, graded: list[Path]) -> None:
    masters = fresh_export(work / "otter", exports.export_otter, graded)
    env = tool_env(venv)
    for lesson in graded:
        start = time.monotonic()
        folder = masters / lesson.stem
        # its own test run of the autograder notebook is left out: the solved copy below is
        # the same check on what a learner would submit
        done = run(["otter", "assign", "--no-run-tests", lesson.name, "dist"], folder, env)
        if done.returncode != 0:
            problem(f"otter assign {lesson.stem} exited {done.returncode}")
            continue
        student = nbformat.read(folder / "dist" / "student" / lesson.name, as_version=4)
        same_skeletons("otter", student, lesson)
        (autograder,) = (folder / "dist" / "autograder").glob("*-autograder_*.zip")
        names = [e.name for e in EXERCISES if e.lesson == lesson.name[:2]]
        for learner, nb in (("solved", solved(student)), ("unsolved", student)):
            copy = folder / learner / lesson.name
            copy.parent.mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, copy)
            command = ["otter", "run", "--no-logo", "-a", str(autograder), "-o", ".", lesson.name]
            done = run(command, copy.parent, env)
            if done.returncode != 0:
                problem(f"otter run {lesson.stem} {learner} exited {done.returncode}")
                continue
            scores = otter_scores(copy.parent / "results.json")
            got = sum(s for s, _ in scores.values())
            possible = sum(p for _, p in scores.values())
            print(f"otter {lesson.stem} {learner}: {got:g} / {possible:g}")
            want = expected_points(lesson) if learner == "solved" else 0
            if (
                sorted(scores) != sorted(names)
                or possible != expected_points(lesson)
                or got != want
            ):
                problem(
                    f"otter {lesson.stem} {learner}: {got:g} / {possible:g} points over "
                    f"{sorted(scores)}, expected {want} / {expected_points(lesson)} over {sorted(names)}"
                )
        print(f"otter {lesson.stem}: {time.monotonic() - start:.0f} s", flush=True)


# ---------------------------------------------------------------- nbgitpuller


PULL = """
import sys
from nbgitpuller.pull import GitPuller

for _ in range(2):  # a first click clones, a second one updates
    for line in GitPuller(sys.argv[1], sys.argv[2], branch=sys.argv[3]).pull():
        pass
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _repository_copy(folder: Path, branch: str) -> None:
    """A git repository of this checkout's tracked files, with ``branch``: the repository the
    link names, as the hub would clone it."""
    listed = (
        subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
        .stdout.decode()
        .split("\0")
    )
    for name in filter(None, listed):
        if (ROOT / name).is_file():
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, folder / name)
    git = ["git", "-c", "user.name=ci", "-c", "user.email=ci@localhost"]
    subprocess.run([*git, "init", "-q", "-b", branch], cwd=folder, check=True)
    subprocess.run([*git, "add", "-A"], cwd=folder, check=True)
    subprocess.run([*git, "commit", "-q", "-m", "course"], cwd=folder, check=True)


def prove_hub_link(venv: Path, work: Path) -> None:
    start = time.monotonic()
    home, remote = work / "hub-home", work / "hub-remote"
    for folder in (home, remote):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    port, branch = _free_port(), "room"
    lesson = exports.graded_lessons()[0].name[:2]
    link = exports.hub_link(f"http://127.0.0.1:{port}/", lesson, branch)
    env = tool_env(venv)
    server = subprocess.Popen(
        [
            "jupyter",
            "server",
            "--no-browser",
            f"--port={port}",
            f"--ServerApp.root_dir={home}",
            "--IdentityProvider.token=ci",
            "--allow-root",  # a CI container may run as root
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # the hub redirects /hub/user-redirect/git-pull?... to the user's server's /git-pull?...
        query = link.split("/hub/user-redirect/git-pull?", 1)[1]
        page = None
        for _ in range(120):
            try:
                url = f"http://127.0.0.1:{port}/git-pull?{query}&token=ci"
                page = urllib.request.urlopen(url, timeout=10).read().decode()
                break
            except OSError:
                time.sleep(0.5)
    finally:
        server.terminate()
        server.wait(timeout=30)
    if page is None:
        problem("nbgitpuller: the Jupyter server with nbgitpuller did not answer")
        return
    data = {
        k: urllib.parse.unquote(html.unescape(v))
        for k, v in re.findall(r'data-([a-z-]+)="([^"]*)"', page)
    }
    print(f"nbgitpuller reads the link as {data}")
    if data.get("repo") != authoring.repository_url() or data.get("branch") != branch:
        problem(f"nbgitpuller: the link names {data.get('repo')} at {data.get('branch')}")
        return
    # the repository the link names, here: a local copy at the same last path part
    copy = remote / data["targetpath"]
    copy.mkdir()
    _repository_copy(copy, branch)
    done = run(["python", "-c", PULL, str(copy), str(home / data["targetpath"]), branch], home, env)
    if done.returncode != 0:
        problem("nbgitpuller: pulling the branch twice failed")
        return
    opened = home / data["path"].removeprefix("lab/tree/")
    if not data["path"].startswith("lab/tree/") or not opened.is_file():
        problem(f"nbgitpuller: the link opens {data['path']}, which is not in the clone")
    else:
        print(
            f"nbgitpuller: the link opens {opened.relative_to(home)} ({time.monotonic() - start:.0f} s)"
        )


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--work", type=Path, required=True)
    parser.add_argument("--nbgrader", type=Path, help="the nbgrader venv")
    parser.add_argument("--otter", type=Path, help="the otter-grader venv")
    parser.add_argument("--hub", type=Path, help="a venv with nbgitpuller and a Jupyter server")
    parser.add_argument("--lesson", action="append", help="only this lesson (repeatable)")
    args = parser.parse_args(argv)
    graded = exports.graded_lessons(args.lesson)
    start = time.monotonic()
    if args.hub:
        prove_hub_link(args.hub.resolve(), args.work.resolve())
    if args.nbgrader:
        prove_nbgrader(args.nbgrader.resolve(), args.work.resolve(), graded)
    if args.otter:
        prove_otter(args.otter.resolve(), args.work.resolve(), graded)
    print(f"graders: {len(graded)} lessons, {time.monotonic() - start:.0f} s")
    if PROBLEMS:
        print(
            "\n".join(
                ["", "The grading tools rejected an export or gave the wrong points:", *PROBLEMS]
            )
        )
        return 1
    print("the tools accept every export (full points solved, zero unsolved) and the hub link")
    return 0


if __name__ == "__main__":
    sys.exit(main())
