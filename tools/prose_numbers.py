"""The numbers a lesson's prose states, held to the outputs stored beside them.

A number in a lesson's text that came from a run ("the loss falls to 1.42", "4.8× faster",
"60 steps") goes stale when a later run changes it. So every *measured-looking* number of a
lesson's markdown (one with a decimal point, or a percentage, or with a unit: ×, s, ms, MiB, GiB,
tokens/s, steps) must appear in the stored output of one of the lesson's code cells, where the
tests re-run it; or be a constant of the lesson's own, listed with why in
``tests/test_prose_numbers.py`` (a version, a paper's figure, a worked example computed by hand).
Folded depth counts too; code and math do not (they are examples, not claims of a run), nor do
versions and the sections of papers.
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat

NUMBER = re.compile(
    r"(?<![\w.^_/=-])(\d{1,3}(?:,\d{3})+|\d+\.\d+|\d+)"
    r"(\s?(?:%|×|x\b|ms\b|µs\b|s\b|MiB\b|GiB\b|KiB\b|MB\b|GB\b|TB/s\b|tokens/s\b|steps?\b))?"
)
_LINK = re.compile(r"\]\([^)]*\)|https?://\S+")
_CODE = re.compile(r"```.*?```|`[^`\n]*`|\$\$.*?\$\$|\$[^$\n]*\$", re.DOTALL)
_NAMED = re.compile(  # a version, a paper's section, a compute capability: names, not measures
    r"(?:torch|PyTorch|Python|CUDA|Triton|transformers|capability|section|sections|version)"
    r"\s+[\d.]+(?:\+\w+)?",
    re.IGNORECASE,
)


def measured_numbers(markdown: str) -> list[str]:
    """The numbers of ``markdown`` that look measured: with a decimal point, or a unit (code,
    math, versions and sections of papers left out: they are no claims of a run)."""
    text = _NAMED.sub(" ", _CODE.sub(" ", _LINK.sub(" ", markdown)))
    return [m.group(0).strip() for m in NUMBER.finditer(text) if m.group(2) or "." in m.group(1)]


def _digits(number: str) -> str:
    return re.match(r"[\d,.]+", number).group(0).replace(",", "")


def outputs_text(nb) -> str:
    """Every stored output's text in ``nb`` (streams, results, errors), commas dropped."""
    parts = []
    for cell in nb.cells:
        if cell.cell_type != "code":
            continue
        for output in cell.get("outputs", []):
            parts.append(output.get("text", ""))
            parts.append(str(output.get("data", {}).get("text/plain", "")))
    return " ".join(parts).replace(",", "")


def unbacked(path: Path, allowed: set[str]) -> list[tuple[str, str]]:
    """``(cell id, number)`` for each measured-looking number of ``path``'s prose that no stored
    output holds and ``allowed`` does not list."""
    nb = nbformat.read(path, as_version=4)
    outputs = outputs_text(nb)
    found = []
    for cell in nb.cells:
        if cell.cell_type != "markdown":
            continue
        for number in measured_numbers(cell.source):
            digits = _digits(number)
            if number in allowed or digits in allowed:
                continue
            if re.search(rf"(?<![\d.]){re.escape(digits)}(?![\d])", outputs):
                continue
            found.append((cell.get("id", "?"), number))
    return found
