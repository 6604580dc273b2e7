"""Reading a sweep: a plain-text table, the lesson's headline numbers (:func:`summary`), what was
not measured and why (:func:`skipped`), time ratios and growth exponents, and CSV/JSON files that
:func:`load` reads back with their environment."""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import os
from collections.abc import Iterable, Sequence

from .records import (
    BASELINE,
    FORWARD,
    TOO_BIG,
    TOO_SLOW,
    Environment,
    Result,
    Sweep,
    format_bytes,
    format_time,
)

__all__ = [
    "ratio",
    "growth_exponent",
    "summary",
    "skipped",
    "skipped_report",
    "to_table",
    "to_csv",
    "to_json",
    "load",
]


def _select(
    results: Iterable[Result], implementation: str, mode: str | None, dtype: str | None
) -> dict[int, Result]:
    return {
        r.length: r
        for r in results
        if r.implementation == implementation
        and r.status == "ok"
        and (mode is None or r.mode == mode)
        and (dtype is None or r.dtype == dtype)
    }


def ratio(
    results: Iterable[Result],
    implementation: str,
    baseline: str = BASELINE,
    *,
    mode: str = FORWARD,
    dtype: str | None = None,
) -> dict[int, float]:
    """Time of ``implementation`` / time of ``baseline``, per length, same run (> 1 means slower)."""
    results = list(results)
    ours, theirs = (
        _select(results, implementation, mode, dtype),
        _select(results, baseline, mode, dtype),
    )
    return {L: ours[L].median_s / theirs[L].median_s for L in sorted(ours.keys() & theirs.keys())}


def growth_exponent(
    results: Iterable[Result],
    implementation: str,
    quantity: str = "peak_bytes",
    *,
    mode: str = FORWARD,
    dtype: str | None = None,
    min_length: int = 0,
) -> float | None:
    """The slope p of a least-squares fit log(quantity) = p·log(L) + c over lengths ≥ ``min_length``:
    2 means quadratic growth. ``quantity`` is a numeric :class:`Result` field such as "peak_bytes"
    or "median_s". At short lengths the linear terms (projections) still dominate, so the slope
    over the longest lengths is the one that shows the L² term."""
    points = [
        (math.log(L), math.log(getattr(r, quantity)))
        for L, r in sorted(_select(results, implementation, mode, dtype).items())
        if getattr(r, quantity) and L >= min_length
    ]
    if len(points) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def summary(results: Sequence[Result], *, dtype: str | None = None, fit_lengths: int = 3) -> str:
    """The lesson's headline numbers, per mode: package MHA over torch MHA, SDPA over the loop
    (time ratios per length, same run), and a table of how peak memory grows at the long end: the
    least-squares log-log slope over the ``fit_lengths`` longest lengths measured (2 is quadratic,
    1 linear). Then, if anything was not measured, what and why (:func:`skipped_report`)."""
    lines = []
    modes = list(dict.fromkeys(r.mode for r in results))
    for mode in modes:
        lines.append(f"{mode}:")
        for ours, theirs in (
            ("package MHA", BASELINE),
            ("package MHA, need_weights", f"{BASELINE}, need_weights"),
            ("SDPA", "loop over heads"),
        ):
            ratios = ratio(results, ours, theirs, mode=mode, dtype=dtype)
            if ratios:
                shown = ", ".join(f"{q:.2f} (L={L})" for L, q in ratios.items())
                lines.append(f"  time {ours} / {theirs}: {shown}")
        lengths = sorted({r.length for r in results if r.mode == mode and r.status == "ok"})
        if len(lengths) >= 2:
            fitted = lengths[-max(2, fit_lengths) :]
            slopes = {
                name: growth_exponent(
                    results, name, "peak_bytes", mode=mode, dtype=dtype, min_length=fitted[0]
                )
                for name in dict.fromkeys(r.implementation for r in results if r.mode == mode)
            }
            slopes = {name: p for name, p in slopes.items() if p is not None}
            if slopes:
                lines.append(
                    f"  peak memory ∝ L^p, p fitted over L = {', '.join(map(str, fitted))}:"
                )
                width = max(len(name) for name in slopes)
                lines += [f"    {name:<{width}}  p = {p:.2f}" for name, p in slopes.items()]
    not_measured = skipped_report([r for r in results if dtype is None or r.dtype == dtype])
    return "\n".join(lines + ([not_measured] if not_measured else []))


NOT_MEASURED = {
    "unsupported": "unsupported on this device",
    "oom": "out of memory",
    "unavailable": "not installed",
}
"""Why a result has no time, by status (status "skipped" says why in its message)."""


def skipped(results: Iterable[Result]) -> dict[str, list[Result]]:
    """The results that were not measured, by reason, in order of first appearance: "too slow for
    the budget" and "would not fit in memory" (never run), "unsupported on this device" (a kernel
    or dtype the device lacks), "out of memory" (tried and ran out, or a longer length after that)
    and "not installed". Each result's ``message`` has the details."""
    reasons: dict[str, list[Result]] = {}
    for r in results:
        if r.status == "skipped":
            reason = next(
                (why for why in (TOO_SLOW, TOO_BIG) if r.message.startswith(why)), "skipped"
            )
        elif r.status in NOT_MEASURED:
            reason = NOT_MEASURED[r.status]
        else:
            continue
        reasons.setdefault(reason, []).append(r)
    return reasons


def _lengths_by_series(rows: Sequence[Result]) -> str:
    """``float32 forward L = 512, 1024; float32 forward+backward L = 256, ...``: per dtype (in order
    of appearance), the forward first (a sweep runs both modes of a length before the next)."""
    series: dict[tuple[str, str], list[int]] = {}
    for r in rows:
        series.setdefault((r.dtype, r.mode), []).append(r.length)
    dtypes = list(dict.fromkeys(dtype for dtype, _ in series))
    order = sorted(series, key=lambda key: (dtypes.index(key[0]), key[1] != FORWARD))
    return "; ".join(
        f"{dtype} {mode} L = {', '.join(map(str, sorted(series[dtype, mode])))}"
        for dtype, mode in order
    )


def skipped_report(results: Iterable[Result]) -> str:
    """What :func:`skipped` finds, as text: per reason, one line per implementation with the lengths
    it was not measured at (or "every case"), and the device's reason when it gave one. Empty
    when everything was measured."""
    results = list(results)
    lines = []
    for reason, rows in skipped(results).items():
        lines.append(f"  {reason}:")
        names = list(dict.fromkeys(r.implementation for r in rows))
        width = max(len(name) for name in names)
        for name in names:
            mine = [r for r in rows if r.implementation == name]
            every = len(mine) == sum(r.implementation == name for r in results)
            detail = "every case" if every else _lengths_by_series(mine)
            messages = list(dict.fromkeys(r.message for r in mine))
            if reason in (NOT_MEASURED["unsupported"], NOT_MEASURED["unavailable"]):
                detail += f" ({messages[0][:100]})" if len(messages) == 1 else ""
            lines.append(f"    {name:<{width}}  {detail}")
    return "\n".join(["not measured:", *lines]) if lines else ""


def _ceiling(rows: Sequence[Result]) -> str:
    """The matmul rates measured during a block of results, and a warning when they moved."""
    rates = [r.matmul_flop_rate for r in rows if r.matmul_flop_rate]
    if not rates:
        return ""
    low, high = min(rates) / 1e9, max(rates) / 1e9
    text = (
        f", matmul {high:.1f} GFLOP/s"
        if f"{low:.1f}" == f"{high:.1f}"
        else f", matmul {low:.1f} to {high:.1f} GFLOP/s"
    )
    if (
        high > 1.5 * low
    ):  # small matmuls vary by tens of percent on their own; contention costs far more
        text += "\nWARNING: the matmul rate moved during this block: something else was running; rerun for clean numbers"
    return text


def to_table(results: Sequence[Result], environment: Environment | None = None) -> str:
    """A plain-text table, one block per (device, dtype, mode), rows by length then implementation.

    "× torch" is the time over ``torch MHA``'s at the same length; "% matmul" the achieved FLOP/s
    over the square-matmul rate measured in the same run, just before that length.
    """
    environment = environment or getattr(results, "environment", None)
    lines = []
    if environment is not None:
        e = environment
        lines.append(
            f"torch {e.torch_version} | {e.device}: {e.device_name} | {e.threads} thread{'s' if e.threads != 1 else ''} | {e.timestamp}"
        )
        lines.append(f"peak memory: {e.memory_method}")
    header = (
        f"{'implementation':<28}{'L':>6}{'median':>11}{'IQR':>10}{'× torch':>9}{'GFLOP/s':>9}"
        f"{'% matmul':>9}{'peak mem':>11}{'scores':>11}  status"
    )
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        groups.setdefault((r.device, r.dtype, r.mode, r.batch, r.embed_dim, r.heads), []).append(r)
    for (device, dtype, mode, B, E, H), rows in groups.items():
        lines += [
            "",
            f"{mode}, {dtype} on {device}, B={B} E={E} H={H}{_ceiling(rows)}",
            header,
            "-" * len(header),
        ]
        baseline = {
            r.length: r.median_s for r in rows if r.implementation == BASELINE and r.status == "ok"
        }
        order = {name: i for i, name in enumerate(dict.fromkeys(r.implementation for r in rows))}
        for r in sorted(rows, key=lambda r: (r.length, order[r.implementation])):
            vs = (
                f"{r.median_s / baseline[r.length]:.2f}"
                if r.median_s and baseline.get(r.length)
                else "-"
            )
            gflops = f"{r.flop_rate / 1e9:.1f}" if r.flop_rate else "-"
            frac = f"{100 * r.matmul_fraction:.0f}%" if r.matmul_fraction else "-"
            status = f"{r.status}: {r.message}"[:80] if r.message else r.status
            lines.append(
                f"{r.implementation:<28}{r.length:>6}{format_time(r.median_s):>11}{format_time(r.iqr_s):>10}"
                f"{vs:>9}{gflops:>9}{frac:>9}{format_bytes(r.peak_bytes):>11}{format_bytes(r.score_bytes):>11}  {status}"
            )
    return "\n".join(lines)


def _environment_of(results, environment):
    environment = environment or getattr(results, "environment", None)
    if environment is None:
        raise ValueError("no environment: pass environment=, or results from run_sweep (a Sweep)")
    return environment


def to_csv(results: Sequence[Result], path, environment: Environment | None = None) -> None:
    """Tidy CSV: one row per result, the environment's fields repeated on every row."""
    env = dataclasses.asdict(_environment_of(results, environment))
    names = [f.name for f in dataclasses.fields(Result)] + list(env)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for r in results:
            writer.writerow({**dataclasses.asdict(r), **env})


def to_json(results: Sequence[Result], path, environment: Environment | None = None) -> None:
    """``{"environment": {...}, "results": [{...}, ...]}``."""
    env = _environment_of(results, environment)
    with open(path, "w") as f:
        json.dump(
            {
                "environment": dataclasses.asdict(env),
                "results": [dataclasses.asdict(r) for r in results],
            },
            f,
            indent=1,
        )


def _parse(cls, row: dict) -> object:
    """Rebuild a dataclass from CSV strings, using its annotations ("" is None for optional fields)."""
    values = {}
    for f in dataclasses.fields(cls):
        text, kind = row[f.name], str(f.type)
        if text == "" and "None" in kind:
            values[f.name] = None
        elif kind.startswith("int"):
            values[f.name] = int(text)
        elif kind.startswith("float"):
            values[f.name] = float(text)
        else:
            values[f.name] = text
    return cls(**values)


def load(path) -> Sweep:
    """Read a sweep written by :func:`to_csv` or :func:`to_json` (chosen by the file's suffix)."""
    path = os.fspath(path)
    if path.endswith(".json"):
        with open(path) as f:
            data = json.load(f)
        return Sweep([Result(**r) for r in data["results"]], Environment(**data["environment"]))
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    environment = _parse(Environment, rows[0]) if rows else None
    return Sweep([_parse(Result, row) for row in rows], environment)
