"""The command line: ``python -m mha_course.bench [--quick] [--budget SECONDS] [...]``.

It runs :func:`.sweep.standard_sweep` (or :func:`.sweep.quick_sweep`) within a time budget,
shows a progress bar, then prints the table and the summary (with what was not measured, and
why), and optionally writes CSV, JSON and a plot.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence

import torch

from .implementations import standard_implementations
from .plot import plot_sweep
from .records import BACKWARD, FORWARD
from .report import summary, to_csv, to_json, to_table
from .sweep import BUDGET_S, QUICK_BUDGET_S, quick_sweep, standard_sweep

DESCRIPTION = (
    "An honest benchmark of multi-head attention: correctness first, then time, memory and FLOP/s."
)


def _lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(n) for n in text.split(","))
    except ValueError:
        lengths = ()
    if not lengths or min(lengths) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected positive integers separated by commas, got {text!r}"
        )
    return lengths


def _modes(text: str) -> tuple[str, ...]:
    modes = tuple(BACKWARD if m.strip() == "backward" else m.strip() for m in text.split(","))
    if not set(modes) <= {FORWARD, BACKWARD}:
        raise argparse.ArgumentTypeError(
            f"modes are {FORWARD!r} and {BACKWARD!r} (or 'backward'), got {text!r}"
        )
    return modes


def _dtypes(text: str) -> tuple[torch.dtype, ...]:
    dtypes = tuple(getattr(torch, name.strip(), None) for name in text.split(","))
    if not all(isinstance(d, torch.dtype) and d.is_floating_point for d in dtypes):
        raise argparse.ArgumentTypeError(
            f"expected floating dtypes such as float32,bfloat16, got {text!r}"
        )
    return dtypes


def _budget(text: str) -> float | str:
    if text.strip().lower() == "none":
        return "none"
    try:
        seconds = float(text)
    except ValueError:
        seconds = 0.0
    if not seconds > 0:
        raise argparse.ArgumentTypeError(
            f"expected a positive number of seconds or 'none', got {text!r}"
        )
    return seconds


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m mha_course.bench", description=DESCRIPTION)
    p.add_argument(
        "--quick", action="store_true", help="a small sweep: a few seconds on two CPU cores"
    )
    p.add_argument(
        "--budget",
        type=_budget,
        help="seconds the sweep may take, or 'none' to run every case (default: "
        f"{BUDGET_S['cpu']:g} s on a CPU, {BUDGET_S['cuda']:g} s on a GPU; with --quick "
        f"{QUICK_BUDGET_S['cpu']:g} s and {QUICK_BUDGET_S['cuda']:g} s)",
    )
    p.add_argument("--device", help="cpu or cuda (default: cuda when there is one)")
    p.add_argument(
        "--threads", type=int, help="torch.set_num_threads for the sweep (default: torch's current)"
    )
    p.add_argument(
        "--lengths", type=_lengths, help="comma-separated sequence lengths, e.g. 128,512,2048"
    )
    p.add_argument(
        "--modes", type=_modes, help=f"comma-separated: {FORWARD},{BACKWARD} (or 'backward')"
    )
    p.add_argument("--dtypes", type=_dtypes, help="comma-separated, e.g. float16,bfloat16")
    p.add_argument("--batch", type=int)
    p.add_argument("--embed-dim", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument(
        "--min-run-time",
        type=float,
        help="at least this many seconds of timed calls per measurement",
    )
    p.add_argument(
        "--max-run-time", type=float, help="at most this many timed seconds per measurement"
    )
    p.add_argument(
        "--compile", action="store_true", help="also time torch.compile versions (meant for a GPU)"
    )
    p.add_argument("--csv", help="write the results to this CSV file")
    p.add_argument("--json", help="write the results to this JSON file")
    p.add_argument("--plot", help="save the forward-pass plot to this image file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    overrides = {}
    for name in (
        "budget",
        "lengths",
        "modes",
        "dtypes",
        "batch",
        "embed_dim",
        "heads",
        "min_run_time",
        "max_run_time",
    ):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if "budget" in overrides:
        overrides["budget_s"] = None if overrides.pop("budget") == "none" else args.budget
    if args.compile:
        overrides["implementations"] = standard_implementations(compile=True)

    sweep = (quick_sweep if args.quick else standard_sweep)(
        device=args.device, threads=args.threads, **overrides
    )
    print(to_table(sweep))
    dtypes = list(dict.fromkeys(r.dtype for r in sweep))
    for dtype in dtypes:  # one summary per dtype: its ratios compare like with like
        print(f"\n{dtype}:" if len(dtypes) > 1 else "")
        print(summary(sweep, dtype=dtype))
    if args.csv:
        to_csv(sweep, args.csv)
    if args.json:
        to_json(sweep, args.json)
    if args.plot:
        plot_sweep(sweep).savefig(args.plot, dpi=120)
    return 0
