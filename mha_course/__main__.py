"""``python -m mha_course doctor``: the pre-flight check (see :mod:`mha_course.doctor`)."""

import argparse
import sys


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m mha_course")
    sub = parser.add_subparsers(dest="command", required=True)
    sub.add_parser("doctor", help="check that this machine can run every lesson")
    args = parser.parse_args(argv)
    if args.command == "doctor":
        from .doctor import main as doctor

        return doctor()
    return 2


if __name__ == "__main__":
    sys.exit(main())
