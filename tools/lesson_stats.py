"""What a learner reads and writes in each lesson, counted from the notebooks (no kernel needed).

* **Answer lines**: the code between ``# BEGIN SOLUTION`` and ``# END SOLUTION`` in an exercise
  cell of the solution notebook, comments and blank lines dropped. An exercise with three answer
  lines or fewer is *short*.
* **Shown above the check**: an answer line that appears word for word (spaces aside) in the
  exercise version anywhere above the exercise's check cell: in an earlier cell, in the skeleton's
  docstring or comments, in a hint. Lines of fewer than 12 characters (``return out``, ``else:``)
  and class boilerplate (``super().__init__()``) are not counted: they give nothing away.
* **Given in a hint**: an answer line that a hint of the lesson gives away, anywhere in the
  notebook (above the check or below it): the line itself, or a piece of code of 12 characters
  or more from a hint (a backticked span in a ``<details>`` block whose summary names a hint)
  found in it. The last hint may show the idea on another example, never the answer's own line.
* **Main-path words**: the markdown of the exercise version outside folded ``<details>`` blocks
  and outside the lesson's "Going further" part (from a ``## Going further`` heading to the next
  ``## `` heading that is not part of it, or to the end), without code blocks, HTML tags and
  link targets. A **long sentence** there has more than 35 words.

The targets are the course's (lessons 00-06 together, and per lesson); :func:`targets_report`
says which hold.
"""

from __future__ import annotations

import io
import re
import tokenize
from dataclasses import dataclass, field
from pathlib import Path

import nbformat

BEGIN, END = "# BEGIN SOLUTION", "# END SOLUTION"
EXERCISE_MARKER = re.compile(r"^\s*# exercise: (\w+)")

MIN_SHOWN_CHARS = 12
BOILERPLATE = {"super().__init__()"}
LONG_SENTENCE_WORDS = 35

# The course's targets for lessons 00-06 (the main arc); 07 and 08 keep the per-lesson ones.
TARGETS = {
    "answer_lines_total": 180,  # at least
    "short_exercises_total": 8,  # at most
    "shown_share_total": 0.05,  # at most
    "words_total": 18_000,  # at most, lessons 00-06
    "words_per_lesson": 3_500,  # at most
    "long_sentences_per_lesson": 8,  # at most
    "given_in_hints_total": 0,  # at most, every lesson
}
MAIN_ARC = {f"{n:02d}" for n in range(7)}


@dataclass
class ExerciseStats:
    name: str
    answer_lines: list[str]
    shown: list[str] = field(default_factory=list)  # answer lines shown above the check
    in_hints: list[str] = field(default_factory=list)  # answer lines a hint gives away

    @property
    def short(self) -> bool:
        return len(self.answer_lines) <= 3


@dataclass
class LessonStats:
    lesson: str  # "01"
    notebook: str
    exercises: list[ExerciseStats]
    words: int
    long_sentences: list[str]

    @property
    def answer_lines(self) -> int:
        return sum(len(e.answer_lines) for e in self.exercises)

    @property
    def short_exercises(self) -> list[str]:
        return [e.name for e in self.exercises if e.short]

    @property
    def shown(self) -> int:
        return sum(len(e.shown) for e in self.exercises)

    @property
    def in_hints(self) -> int:
        return sum(len(e.in_hints) for e in self.exercises)


# ---------------------------------------------------------------- code


def _normalise(line: str) -> str:
    return " ".join(line.split())


def _without_comments(block: list[str]) -> list[str]:
    """The block's code lines, comments and blank lines dropped, each normalised."""
    text = "\n".join(block)
    indent = min((len(x) - len(x.lstrip()) for x in block if x.strip()), default=0)
    text = "\n".join(x[indent:] for x in block)
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(text + "\n").readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        tokens = None
    lines = text.split("\n")
    if tokens is not None:
        for tok in reversed(tokens):  # cut each comment from its line, right to left
            if tok.type == tokenize.COMMENT:
                row, col = tok.start
                lines[row - 1] = lines[row - 1][:col]
    else:  # not valid on its own: drop whole comment lines only
        lines = [x for x in lines if not x.lstrip().startswith("#")]
    return [_normalise(x) for x in lines if x.strip()]


def solution_blocks(source: str) -> list[list[str]]:
    """The solution blocks of a code cell, each as its list of raw lines."""
    blocks, block = [], None
    for line in source.split("\n"):
        if line.strip() == BEGIN:
            block = []
        elif line.strip() == END:
            blocks.append(block or [])
            block = None
        elif block is not None:
            block.append(line)
    return blocks


def answer_lines(source: str) -> list[str]:
    return [x for b in solution_blocks(source) for x in _without_comments(b)]


def _counts_as_shown(line: str) -> bool:
    return len(line) >= MIN_SHOWN_CHARS and line not in BOILERPLATE


# ---------------------------------------------------------------- prose


_DETAILS = re.compile(r"<details\b.*?</details>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```.*?```", re.DOTALL)
_TAG = re.compile(r"<[^>]+>")
_LINK = re.compile(r"\]\([^)]*\)")  # keep a link's text, drop its target
_IMAGE = re.compile(r"!\[[^\]]*\]\([^)]*\)")
_MATH_BLOCK = re.compile(r"\$\$.*?\$\$", re.DOTALL)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]*_]*\s+(?=[\"'(\[*_`]*[A-Z0-9])")


def main_path_text(markdown: str) -> str:
    """A markdown cell's text as a learner reads it on the main path."""
    text = _DETAILS.sub(" ", markdown)
    text = _FENCE.sub(" ", text)
    text = _MATH_BLOCK.sub(" MATH ", text)
    text = _IMAGE.sub(" ", text)
    text = _LINK.sub("]", text)
    text = _TAG.sub(" ", text)
    return text


def _going_further_cells(nb) -> set[int]:
    """Indices of the cells in the lesson's "Going further" part: from a ``## Going further``
    heading to the next ``## `` heading (or the end)."""
    inside, cells = False, set()
    for i, cell in enumerate(nb.cells):
        heading = (
            re.match(r"##\s+(.*)", cell.source.strip()) if cell.cell_type == "markdown" else None
        )
        if heading:
            inside = heading.group(1).strip().lower().startswith("going further")
        if inside:
            cells.add(i)
    return cells


def sentences(text: str) -> list[str]:
    """Split main-path text into sentences: paragraphs, list items and table rows end one too."""
    out = []
    for block in re.split(r"\n\s*\n|\n(?=\s*(?:[*\-+] |\d+\. |\|))", text):
        block = " ".join(block.split())
        if not block:
            continue
        out.extend(s for s in _SENTENCE_END.split(block) if s.strip())
    return out


def _words(text: str) -> list[str]:
    return [w for w in text.split() if re.search(r"\w", w)]


_HINT = re.compile(
    r"<details\b[^>]*>\s*<summary>(?:(?!</summary>).)*\bHint\b.*?</details>", re.S | re.I
)
_CODE_SPAN = re.compile(r"`([^`\n]+)`")


def hint_code(markdown: str) -> tuple[str, list[str]]:
    """The hints of a markdown cell: their text (normalised) and their code spans of 12
    characters or more (normalised)."""
    hints = _HINT.findall(markdown)
    spans = [_normalise(x) for h in hints for x in _CODE_SPAN.findall(h)]
    return _normalise(" ".join(hints)), [x for x in spans if len(x) >= MIN_SHOWN_CHARS]


def given_in_hints(answer: list[str], text: str, spans: list[str]) -> list[str]:
    """The answer lines that the hints' ``text`` holds whole, or that hold one of its ``spans``."""
    return [
        x for x in answer if _counts_as_shown(x) and (x in text or any(span in x for span in spans))
    ]


# ---------------------------------------------------------------- one lesson


def _check_cell_index(cells, name: str, after: int) -> int | None:
    call = re.compile(rf"\bcheck_\w+\(\s*{re.escape(name)}\s*[,)]")
    for i in range(after + 1, len(cells)):
        if cells[i].cell_type == "code" and call.search(cells[i].source):
            return i
    return None


def lesson_stats(solution_path: Path, exercise_path: Path) -> LessonStats:
    solution = nbformat.read(solution_path, as_version=4)
    exercise_nb = nbformat.read(exercise_path, as_version=4)
    cells = exercise_nb.cells

    exercises = []
    for cell in solution.cells:
        if cell.cell_type != "code":
            continue
        match = EXERCISE_MARKER.match(cell.source)
        if not match or BEGIN not in cell.source:
            continue
        exercises.append(ExerciseStats(match.group(1), answer_lines(cell.source)))

    names = [
        (EXERCISE_MARKER.match(c.source) or [None, None])[1] if c.cell_type == "code" else None
        for c in cells
    ]
    for ex in exercises:
        if ex.name not in names:
            continue
        start = names.index(ex.name)
        check = _check_cell_index(cells, ex.name, start)
        above = cells[: check if check is not None else start + 1]
        seen = "\n".join(_normalise(x) for c in above for x in c.source.split("\n"))
        ex.shown = [x for x in ex.answer_lines if _counts_as_shown(x) and x in seen]
    hints = [hint_code(c.source) for c in cells if c.cell_type == "markdown"]
    text = " ".join(t for t, _ in hints)
    spans = [x for _, found in hints for x in found]
    for ex in exercises:
        ex.in_hints = given_in_hints(ex.answer_lines, text, spans)

    further = _going_further_cells(exercise_nb)
    words, long = 0, []
    for i, cell in enumerate(cells):
        if cell.cell_type != "markdown" or i in further:
            continue
        if "exercise-note" in cell.metadata.get("tags", []):
            continue
        text = main_path_text(cell.source)
        words += len(_words(text))
        long += [s for s in sentences(text) if len(_words(s)) > LONG_SENTENCE_WORDS]
    return LessonStats(solution_path.name[:2], exercise_path.name, exercises, words, long)


def course_stats(root: Path) -> list[LessonStats]:
    solutions = sorted((root / "notebooks" / "solutions").glob("[0-9][0-9]_*.ipynb"))
    return [lesson_stats(p, root / "notebooks" / p.name) for p in solutions]


# ---------------------------------------------------------------- the targets


def targets_report(stats: list[LessonStats]) -> list[tuple[str, bool]]:
    """``[(statement, holds)]`` for each of the course's targets."""
    arc = [s for s in stats if s.lesson in MAIN_ARC]
    lines = sum(s.answer_lines for s in arc)
    short = sum(len(s.short_exercises) for s in arc)
    shown = sum(s.shown for s in arc)
    words = sum(s.words for s in arc)
    t = TARGETS
    report = [
        (
            f"00-06: {lines} answer lines (at least {t['answer_lines_total']})",
            lines >= t["answer_lines_total"],
        ),
        (
            f"00-06: {short} exercises of three lines or fewer (at most {t['short_exercises_total']})",
            short <= t["short_exercises_total"],
        ),
        (
            f"00-06: {shown} answer lines shown above their check, {shown / max(lines, 1):.1%} "
            f"(at most {t['shown_share_total']:.0%})",
            shown <= t["shown_share_total"] * lines,
        ),
        (f"00-06: {words} main-path words (at most {t['words_total']})", words <= t["words_total"]),
    ]
    given = sum(s.in_hints for s in stats)
    exercises = sum(len(s.exercises) for s in stats)
    report.append(
        (
            f"all lessons: {given} answer lines given away in a hint, {given / max(exercises, 1):.2f} "
            f"per exercise (at most {t['given_in_hints_total']})",
            given <= t["given_in_hints_total"],
        )
    )
    for s in stats:
        report.append(
            (
                f"{s.lesson}: {s.words} main-path words (at most {t['words_per_lesson']})",
                s.words <= t["words_per_lesson"],
            )
        )
        report.append(
            (
                f"{s.lesson}: {len(s.long_sentences)} sentences over {LONG_SENTENCE_WORDS} words "
                f"(at most {t['long_sentences_per_lesson']})",
                len(s.long_sentences) <= t["long_sentences_per_lesson"],
            )
        )
    return report


def table(stats: list[LessonStats]) -> str:
    head = f"{'lesson':<34} {'exercises':>9} {'answer lines':>12} {'short':>5} {'shown':>5} {'hints':>5} {'words':>6} {'long':>4}"
    rows = [head]
    for s in stats:
        rows.append(
            f"{s.notebook:<34} {len(s.exercises):>9} {s.answer_lines:>12} "
            f"{len(s.short_exercises):>5} {s.shown:>5} {s.in_hints:>5} {s.words:>6} "
            f"{len(s.long_sentences):>4}"
        )
    return "\n".join(rows)


def details(stats: list[LessonStats]) -> str:
    """Per exercise: answer lines, and the lines shown above the check; the long sentences."""
    out = []
    for s in stats:
        out.append(f"== {s.notebook}")
        for e in s.exercises:
            flag = " (short)" if e.short else ""
            out.append(f"  {e.name}: {len(e.answer_lines)} answer lines{flag}")
            out += [f"    shown above its check: {x}" for x in e.shown]
            out += [f"    given in a hint: {x}" for x in e.in_hints]
        out += [f"  long sentence ({len(_words(x))} words): {x[:140]}…" for x in s.long_sentences]
    return "\n".join(out)
