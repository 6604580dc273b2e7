"""Assertions shared by the checker tests: a checker passes a candidate, or fails it with a message
that contains given phrases, or calls it not done yet. Also the lesson-02 skeleton's __init__,
which the learner-style answers in the tests build on."""

import pytest
from torch import nn

from mha_course.checks import ExerciseFailure


def passes(check, candidate, capsys) -> str:
    check(candidate)
    out = capsys.readouterr().out
    assert out.startswith("✅"), out
    assert check.passes(candidate) is True
    return out


def fails_with(check, candidate, *phrases) -> str:
    with pytest.raises(ExerciseFailure) as failure:
        check(candidate)
    assert isinstance(failure.value, AssertionError)
    message = str(failure.value)
    for phrase in phrases:
        assert phrase in message, f"{phrase!r} not in:\n{message}"
    return message


def not_done(check, candidate, capsys) -> None:
    assert check(candidate) is None
    assert "not done yet" in capsys.readouterr().out
    assert check.passes(candidate) is False


class Projections(nn.Module):
    """The lesson-02 exercise skeleton's __init__: four nn.Linear(embed_dim, embed_dim)."""

    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)


def skeleton(*args, **kwargs):
    """An unsolved function exercise: what the generated skeleton does when called."""
    raise NotImplementedError("Exercise: write this part, then run the check below.")


def notebook_cell(source: str, namespace: dict, number: int) -> dict:
    """Run ``source`` in ``namespace`` as a notebook cell would: compiled under a file name of
    its own whose lines are in linecache (which is how IPython keeps a cell's source)."""
    import linecache
    import textwrap

    source = textwrap.dedent(source)
    filename = f"<notebook cell {number}>"
    linecache.cache[filename] = (len(source), None, source.splitlines(True), filename)
    exec(compile(source, filename, "exec"), namespace)
    return namespace


NOTEBOOK_IMPORTS = (
    "import math\nimport torch\nimport torch.nn as nn\nimport torch.nn.functional as F\n"
)

# The lesson-02 exercise cell's __init__, as source for a simulated or real notebook cell.
MHA_INIT_SOURCE = """
class MultiHeadAttention(nn.Module):
    def __init__(self, embed_dim, num_heads):
        super().__init__()
        self.num_heads = num_heads
        self.q_proj = nn.Linear(embed_dim, embed_dim)
        self.k_proj = nn.Linear(embed_dim, embed_dim)
        self.v_proj = nn.Linear(embed_dim, embed_dim)
        self.out_proj = nn.Linear(embed_dim, embed_dim)
"""
