"""``python -m mha_course progress`` and ``python -m mha_course grade``."""

from __future__ import annotations

import sys
import time
from pathlib import Path

__all__ = ["add_commands", "run_progress", "run_grade"]


def add_commands(sub) -> None:
    p = sub.add_parser(
        "progress", help="your exercises, each saved answer run through its check: ✅ / ❌ / ⏳"
    )
    p.add_argument("--dir", default=None, help="the my_work folder (default: this course's)")
    p.add_argument("--timeout", type=float, default=60.0, help="seconds per exercise")
    g = sub.add_parser(
        "grade",
        help="an instructor's table: every learner's exercises (their my_work/ folders or "
        "submitted notebooks) run through their checks",
    )
    g.add_argument("paths", nargs="+", type=Path, help="learners' folders or exercise notebooks")
    g.add_argument("--csv", type=Path, help="write the rows: learner, exercise, status, cause")
    g.add_argument("--html", type=Path, help="write a page of the results, to project")
    g.add_argument("--timeout", type=float, default=60.0, help="seconds per exercise (default 60)")
    g.add_argument("--jobs", type=int, default=None, help="learners at once (default: CPU cores)")


def run_progress(args) -> int:
    from .learner import progress

    progress(args.dir, timeout=args.timeout)
    return 0


def run_grade(args) -> int:
    from .answers import collect_submissions
    from .report import summary_lines, write_csv, write_html
    from .runner import grade_submissions

    if args.timeout <= 0:
        print(f"grade: --timeout must be positive, got {args.timeout}", file=sys.stderr)
        return 2
    try:
        submissions = collect_submissions(args.paths)
    except FileNotFoundError as error:
        print(f"grade: {error}", file=sys.stderr)
        return 2
    for target in (args.csv, args.html):
        if target is not None and not target.parent.exists():
            print(f"grade: no folder {target.parent} to write {target.name} in", file=sys.stderr)
            return 2
    start = time.monotonic()
    print(f"grading {len(submissions)} learner(s), {args.timeout:g} s per exercise at most")

    def done(submission, rows):
        passed = sum(r.status == "pass" for r in rows)
        print(f"  {submission.learner}: {passed} of {len(rows)} pass", flush=True)

    rows = grade_submissions(submissions, timeout=args.timeout, jobs=args.jobs, on_done=done)
    if args.csv is not None:
        write_csv(rows, args.csv)
        print(f"wrote {args.csv}")
    if args.html is not None:
        write_html(rows, args.html)
        print(f"wrote {args.html}")
    print("\n".join(summary_lines(rows)))
    print(f"graded in {time.monotonic() - start:.0f} s")
    return 0
