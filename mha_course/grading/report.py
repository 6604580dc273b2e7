"""The grader's outputs: the CSV table, the per-exercise summary, and an HTML page of both."""

from __future__ import annotations

import csv
import html
from collections import Counter
from pathlib import Path

from .runner import Row

__all__ = ["write_csv", "summary_lines", "write_html", "SYMBOLS"]

SYMBOLS = {"pass": "✅", "fail": "❌", "not_done": "⏳", "error": "💥", "timeout": "⌛"}
COLUMNS = ("learner", "exercise", "status", "cause")


def write_csv(rows: list[Row], path: Path) -> None:
    with open(path, "w", newline="", encoding="utf-8") as f:
        writer = csv.writer(f)
        writer.writerow(COLUMNS)
        for row in rows:
            writer.writerow([row.learner, row.exercise, row.status, row.cause])


def _per_exercise(rows: list[Row]) -> dict[str, Counter]:
    counts: dict[str, Counter] = {}
    for row in rows:
        counts.setdefault(row.exercise, Counter())[row.status] += 1
    return counts


def summary_lines(rows: list[Row]) -> list[str]:
    """Per exercise: passed / attempted (attempted = every status but not_done)."""
    learners = len({row.learner for row in rows})
    lessons = {row.exercise: row.lesson for row in rows}
    lines = [f"{learners} learner(s); per exercise, passed / attempted:"]
    for exercise, count in _per_exercise(rows).items():
        attempted = learners - count["not_done"]
        extra = ", ".join(f"{count[s]} {s}" for s in ("fail", "error", "timeout") if count[s])
        lines.append(
            f"  {lessons[exercise]} {exercise:<30} {count['pass']:>3} / {attempted:<3}"
            + (f"  ({extra})" if extra else "")
        )
    return lines


def write_html(rows: list[Row], path: Path, title: str = "mha-course: exercise results") -> None:
    """A page to project: learners down, exercises across, a symbol per cell (the cause on
    hover), then the summary."""
    learners = list(dict.fromkeys(row.learner for row in rows))
    exercises = list(dict.fromkeys(row.exercise for row in rows))
    cells = {(row.learner, row.exercise): row for row in rows}
    esc = html.escape
    head = "".join(f"<th><span>{esc(e)}</span></th>" for e in exercises)
    body = []
    for learner in learners:
        tds = []
        for exercise in exercises:
            row = cells.get((learner, exercise))
            if row is None:
                tds.append("<td></td>")
                continue
            tip = esc(f"{row.status}: {row.cause}" if row.cause else row.status, quote=True)
            tds.append(f'<td class="{row.status}" title="{tip}">{SYMBOLS[row.status]}</td>')
        passed = sum(
            cells[(learner, e)].status == "pass" for e in exercises if (learner, e) in cells
        )
        body.append(
            f"<tr><th>{esc(learner)}</th>{''.join(tds)}<td>{passed}/{len(exercises)}</td></tr>"
        )
    counts = _per_exercise(rows)
    totals = "".join(
        f"<td>{counts[e]['pass']}/{len(learners) - counts[e]['not_done']}</td>" for e in exercises
    )
    legend = " ".join(f"{symbol} {status}" for status, symbol in SYMBOLS.items())
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{esc(title)}</title>
<style>
body {{ font-family: system-ui, sans-serif; margin: 1.5em; }}
table {{ border-collapse: collapse; }}
td, th {{ border: 1px solid #ccc; padding: 0.2em 0.4em; text-align: center; }}
thead th {{ height: 9em; vertical-align: bottom; }}
thead th span {{ writing-mode: vertical-rl; transform: rotate(180deg); }}
td.pass {{ background: #e6f4ea; }} td.fail {{ background: #fce8e6; }}
td.error, td.timeout {{ background: #fef7e0; }}
</style></head><body>
<h1>{esc(title)}</h1>
<p>{esc(legend)}. Hover over a cell for the cause; the last row is passed / attempted.</p>
<table><thead><tr><th>learner</th>{head}<th>passed</th></tr></thead>
<tbody>
{chr(10).join(body)}
<tr><th>passed / attempted</th>{totals}<td></td></tr>
</tbody></table>
</body></html>
"""
    Path(path).write_text(page, encoding="utf-8")
