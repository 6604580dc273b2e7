"""Every number a lesson's prose states as a measure (a decimal, a percentage, a number with a unit)
is in the stored output of one of the lesson's cells, which nbval re-runs, or it is listed here,
cell by cell, with where it comes from. A number a run produced and the prose copied goes stale
when the run changes; this test makes each such number a conscious one (tools/prose_numbers.py).
"""

from pathlib import Path

import pytest

from tools import authoring, prose_numbers

H200 = "the H200 run of the course at commit 0dbe237 (no GPU here to run it again)"
PUBLISHED = "a device's published figures, or a paper's"
BY_HAND = "worked by hand in the text, from numbers the text gives"
ONCE = "measured once where the text says (seeds, compile times), not by a cell of the lesson"
RUN_TIME = "the lesson's run time (python tools/authoring.py stats --run measures it)"
SETTING = "a setting of the lesson's own, not a result"
CHECKED = "held by an expect(...) check of the lesson, within its tolerance"

# lesson: {cell id: where its numbers come from}
SOURCES = {
    "00": {"softmax-intro": PUBLISHED},
    "01": {"hints-attention_scores": BY_HAND},
    "02": {
        "cell-075": SETTING,
        "l02-job-scores-intro": SETTING,
        "cell-082": ONCE,
        "l02-self-check": SETTING,
    },
    "03": {
        "layernorm-after": BY_HAND,
        "stack-intro": BY_HAND,
        "cell-027": SETTING,
        "cell-030": SETTING,
    },
    "04": {"cell-000": RUN_TIME, "cell-036": BY_HAND, "cell-going-further": SETTING},
    "05": {
        "cell-000": RUN_TIME,
        "cell-027": ONCE,
        "cell-038": SETTING,
        "cell-059": CHECKED,
        "cell-061": CHECKED,
        "cell-052": ONCE,
    },
    "06": {
        "gate-intro": BY_HAND,
        "cell-030": BY_HAND,
        "l06-on-a-gpu": H200,
        "going-further": PUBLISHED,
    },
    "07": {
        "cell-000": RUN_TIME,
        "data-intro": SETTING,
        "train-intro": SETTING,
        "sampling-intro": BY_HAND,
        "sampling-hints": BY_HAND,
        "fast-intro": H200,
        "batch-read": BY_HAND,
        "roofline-hints": BY_HAND,
        "roofline-predict": BY_HAND,
        "launch-intro": H200,
        "compile-intro": ONCE,
        "gpu-figures": H200,
    },
    "08": {
        "l08-rotary-exercise": BY_HAND,
        "alibi-intro": BY_HAND,
        "alibi-answer": BY_HAND,
        "alibi-effect-intro": BY_HAND,
        "train-after": ONCE,
        "gqa-proof-intro": SETTING,
    },
    "09": {
        "l09-why-tiles": PUBLISHED,
        "l09-launch-hints": BY_HAND,
        "l09-gpu-read": SETTING,
    },
}


@pytest.mark.parametrize("path", authoring.solution_paths(), ids=lambda p: p.name[:2])
def test_every_measured_number_of_the_prose_is_backed(path: Path):
    listed = SOURCES.get(path.name[:2], {})
    unbacked = prose_numbers.unbacked(path, set())
    unlisted = sorted({f"{cell}: {number}" for cell, number in unbacked if cell not in listed})
    assert not unlisted, (
        "numbers in the prose that no stored output holds; print them from the code, state them "
        "as an expect(...) check, or list their cell in tests/test_prose_numbers.py with where "
        "they come from:\n" + "\n".join(unlisted)
    )
    stale = sorted(set(listed) - {cell for cell, _ in unbacked})
    assert not stale, f"listed cells whose numbers are all backed now (remove them): {stale}"


@pytest.mark.parametrize(
    "markdown, numbers",
    [
        ("the loss falls to 1.42 after 300 steps", ["1.42", "300 steps"]),
        ("it is 4.8× faster, using 12 % of the time", ["4.8×", "12 %"]),
        ("torch 2.13, section 3.2.1, compute capability 8.0", []),
        ("the code `x = 0.5` and the math $e^{1.5}$", []),
        ("h = 8 heads of d_k = 64", []),
    ],
)
def test_what_counts_as_a_measured_number(markdown, numbers):
    assert prose_numbers.measured_numbers(markdown) == numbers
