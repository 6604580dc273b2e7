"""The course's commands for learners and instructors.

python -m mha_course doctor          # pre-flight check: can this machine run every lesson?
python -m mha_course reset 01        # a fresh lesson-01 notebook (the old one is kept)
python -m mha_course history         # the earlier versions of your answers, kept in my_work/
python -m mha_course progress        # your exercises: ✅ / ❌ / ⏳, from the answers in my_work/
python -m mha_course grade PATH... --csv results.csv   # an instructor's table of a room
"""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m mha_course",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="check that this machine can run every lesson")
    reset = sub.add_parser(
        "reset", help="a fresh exercise notebook for one lesson; the old one is kept"
    )
    reset.add_argument("lesson", help="the lesson's number, e.g. 01")
    history = sub.add_parser(
        "history", help="list the earlier versions of your answers (my_work/.history/)"
    )
    history.add_argument("name", nargs="?", help="one exercise, e.g. softmax (default: all)")
    history.add_argument(
        "--dir", default=None, help="the my_work folder (default: notebooks/my_work of this course)"
    )
    from .grading.cli import add_commands, run_grade, run_progress

    add_commands(sub)
    args = parser.parse_args(argv)
    if args.command == "progress":
        return run_progress(args)
    if args.command == "grade":
        return run_grade(args)
    if args.command == "doctor":
        from .doctor import main as doctor

        return doctor()
    if args.command == "reset":
        from .lessons import reset as reset_lesson

        reset_lesson(args.lesson)
        return 0
    return _print_history(args.name, args.dir)


def _print_history(name, directory) -> int:
    import os
    from pathlib import Path

    from .lessons import course_directory
    from .work import WORK_DIR_VARIABLE, history

    if directory is None:  # the folder the notebooks use (start(work_dir=...) names it too)
        directory = (
            os.environ.get(WORK_DIR_VARIABLE) or course_directory() / "notebooks" / "my_work"
        )
    versions = history(name, Path(directory))
    if not versions:
        print(f"no earlier versions in {directory}/.history/")
        return 0
    print(f"earlier versions, oldest first (in {directory}/.history/):")
    for path in versions:
        print(f"  {path.name}")
    print(
        f"To use one again, replace its exercise cell's code with `%load {directory}/.history/"
        "<its name>` and run the cell twice: it is then your answer (and the current one is kept "
        "in the history too)."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
