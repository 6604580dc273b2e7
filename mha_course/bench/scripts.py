"""What the scripts in benchmarks/ share: their common options, and timing ours against theirs.

Each script times the course's module against the one it mirrors (torch's, or transformers'),
both in the same run, in alternating rounds (:func:`.measure.time_alternating`), and prints one
row per case with the two medians and their ratio, ours / theirs.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .measure import time_alternating

__all__ = ["script_parser", "Comparison", "device_name"]


def script_parser(description: str, quick_help: str) -> argparse.ArgumentParser:
    """The options every script takes (``--threads``, ``--rounds``, ``--quick``, ``--cpu-time``);
    a script adds its own. ``description`` is the script's docstring, shown as written."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--threads", type=int, default=torch.get_num_threads(), help="torch threads"
    )
    parser.add_argument("--rounds", type=int, default=5, help="alternating rounds per case")
    parser.add_argument("--quick", action="store_true", help=quick_help)
    parser.add_argument(
        "--cpu-time",
        action="store_true",
        help="time the process's CPU time (with --threads 1: robust to other programs)",
    )
    return parser


@dataclass(frozen=True)
class Comparison:
    """How a script times ours against theirs, from its command line (:func:`script_parser`)."""

    threads: int
    rounds: int
    min_run_time: float  # seconds of timed blocks per call and round
    cpu_time: bool

    @classmethod
    def from_args(cls, args: argparse.Namespace, min_run_time: float) -> Comparison:
        """``--quick``: one short round, a smoke run rather than a measurement."""
        rounds, min_run_time = (1, 0.05) if args.quick else (args.rounds, min_run_time)
        return cls(args.threads, rounds, min_run_time, args.cpu_time)

    def describe(self, dtype: str, where: str, inputs: str = "") -> str:
        """The line above a script's table: what was timed, where, and how."""
        clock = "CPU time" if self.cpu_time else "wall time"
        return (
            f"torch {torch.__version__}, {self.threads} thread(s), {dtype}, {where}, {clock}; "
            f"{inputs}median of {self.rounds} alternating round(s)\n"
        )

    def medians(self, theirs: Callable, ours: Callable) -> tuple[float, float]:
        """Seconds per call of ``theirs()`` and ``ours()``: each the median over rounds."""
        timings = self.timings({"theirs": theirs, "ours": ours})
        return timings["theirs"], timings["ours"]

    def timings(self, calls: dict[str, Callable]) -> dict[str, float]:
        """Seconds per call of each of ``calls`` (name -> call), timed in alternating rounds:
        each the median over rounds."""
        timings = time_alternating(
            calls,
            rounds=self.rounds,
            threads=self.threads,
            min_run_time=self.min_run_time,
            clock="cpu" if self.cpu_time else "wall",
        )
        return {name: timing.median for name, timing in timings.items()}


def device_name(device: torch.device) -> str:
    """What a script's header calls the device: the GPU's name, or "CPU"."""
    return torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
