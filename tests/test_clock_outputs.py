"""No stored output that nbval compares may depend on a clock (tools/clock_cells.py): a timing
claim in a compared output fails on a busy machine. The rule is held over every lesson, and the
rule itself is tested on small notebooks."""

from pathlib import Path

import nbformat
import pytest

from tools import authoring, clock_cells


@pytest.mark.parametrize(
    "path", authoring.lesson_notebooks(), ids=lambda p: str(p.relative_to(authoring.ROOT))
)
def test_no_compared_output_depends_on_a_clock(path):
    found = clock_cells.violations(path)
    assert not found, "\n".join(map(str, found))


def _notebook(tmp_path: Path, *cells: str) -> Path:
    path = tmp_path / "lesson.ipynb"
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    nbformat.write(nb, path)
    return path


TIMED = "import time\nstart = time.perf_counter()\nrun()\nseconds = time.perf_counter() - start"

# (what the cells do, the cells, how many violations)
CASES = [
    ("a timed claim, compared", [TIMED, 'expect("fast", seconds < 1)'], 1),
    ("a timed claim, ignored", [TIMED, '# NBVAL_IGNORE_OUTPUT\nexpect("fast", seconds < 1)'], 0),
    ("a timed print, skipped", [TIMED, "# NBVAL_SKIP\nprint(seconds)"], 0),
    ("a timing shown as the last expression", [TIMED, "seconds * 1e3"], 1),
    ("a timing plotted (images are not compared)", [TIMED, "plt.plot([seconds])"], 0),
    ("a timer read in the showing cell itself", ["print(time.perf_counter())"], 1),
    ("torch's Timer", ["t = benchmark.Timer('f()').blocked_autorange()", "print(t.median)"], 1),
    ("the course's harness", ["r = bench.time_alternating(calls)", "expect('x', r['a'] < 1)"], 1),
    (
        "through a function that reads the timer",
        [
            "def timed(f):\n    s = time.perf_counter()\n    f()\n    return time.perf_counter() - s",
            "ratio = timed(a) / timed(b)",
            "expect('faster', ratio < 1)",
        ],
        1,
    ),
    (
        "through a dict filled in a timed loop",
        [
            "times = {}\nfor n in (1, 2):\n    times[n] = bench.time_call(n)",
            "expect('grows', times[2] > times[1])",
        ],
        1,
    ),
    ("an untimed result", [TIMED, "losses = train()", "expect('learns', losses[-1] < 1)"], 0),
    (
        "a name timed, then computed again without a clock",
        [TIMED, "seconds = 3", "print(seconds)"],
        0,
    ),
    (
        "a loop that prints its time keeps its results clock-free",
        [
            "# NBVAL_IGNORE_OUTPUT\nlosses, start = [], time.perf_counter()\nfor step in range(3):\n"
            "    losses.append(step)\n    print(time.perf_counter() - start)",
            "expect('done', len(losses) == 3)",
        ],
        0,
    ),
    (
        "a comprehension's own variable",
        [TIMED, "for seconds in range(3):\n    pass", "print([seconds for seconds in range(2)])"],
        0,
    ),
]


@pytest.mark.parametrize("cells, expected", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_the_rule(tmp_path, cells, expected):
    assert len(clock_cells.violations(_notebook(tmp_path, *cells))) == expected
