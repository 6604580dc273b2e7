"""Lesson 03's positional encoding: the sinusoids, PE(pos, 2i) = sin(pos / 10000^(2i/d_model)),
PE(pos, 2i+1) = cos of the same angle."""

from __future__ import annotations

import functools
import math

import torch

from .. import positional
from . import families
from ._core import exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table


def _sinusoids(max_len, d_model, flaw="", base=10000.0):
    """The table in float64, or with a flaw of :data:`_PE_WHY`."""
    position = torch.arange(max_len, dtype=torch.float64)[:, None] + (flaw == "positions from 1")
    j = torch.arange(d_model, dtype=torch.float64)  # the column; i = j // 2 its pair
    halves = flaw == "halves"  # the sines of every pair first, then the cosines
    i = j % (d_model // 2) if halves else j // 2
    two_i = {"exponent i/d_model": i, "exponent 4i/d_model": 4 * i, "exponent j/d_model": j}
    two_i = two_i.get(flaw, 2 * j if flaw == "exponent 2j/d_model" else 2 * i)
    freq = (1000.0 if flaw == "base 1000" else base) ** (-two_i / d_model)
    angle = position / freq if flaw == "multiplied" else position * freq
    sine = j < d_model // 2 if halves else (j % 2 == 0) != (flaw == "sin and cos swapped")
    table = torch.where(sine, angle.sin(), angle.cos())
    return table.T if flaw == "transposed" else table


_ZERO_ROW = "row 0 (position 0) reads [0, 1, 0, 1, ...]"
_PE_WHY = {
    "transposed": "your table is transposed: rows are positions, columns features.",
    "sin and cos swapped": "sin and cos are swapped: sines in the even columns, cosines in the "
    f"odd ones; {_ZERO_ROW}.",
    "halves": "all the sines are in the first half, the cosines in the second; they alternate.",
    "positions from 1": f"the positions start at 1; they start at 0, so {_ZERO_ROW}.",
    "exponent i/d_model": "the exponent is i/d_model; it is 2i/d_model, 2i the pair's even column.",
    "exponent 4i/d_model": "the 2 is counted twice: the even columns' indices already are 2i.",
    "exponent j/d_model": "each column got its own frequency; columns 2i and 2i+1 share one, "
    "1/10000^(2i/d_model), for the sine and the cosine.",
    "exponent 2j/d_model": "the exponent takes the column index for i; i counts pairs of columns.",
    "multiplied": "the position is multiplied by 10000^(2i/d_model); it is divided by it.",
    "base 1000": "the base is 1000; it is 10000 (ten thousand).",
}


def _base_hint(got: torch.Tensor, case: Case) -> str | None:
    """When the table is right but for its base, the base it used."""
    max_len, d_model = case.args
    if max_len < 2 or d_model < 4 or tuple(got.shape) != (max_len, d_model):
        return None
    pe = got.detach().double()
    if not torch.allclose(pe[0], _sinusoids(1, d_model)[0], atol=1e-4):
        return None
    freq = torch.asin(pe[1, 2].clamp(-1, 1))  # 1 / base^(2/d_model) when the rest is right
    base = freq.item() ** (-d_model / 2) if 0 < freq < 1 else math.inf
    right = math.isfinite(base) and torch.allclose(pe, _sinusoids(*case.args, base=base), atol=1e-3)
    return f"your frequencies use the base {base:.4g}; the formula's is 10000." if right else None


def _floating(case: Case, got, expected) -> None:
    if isinstance(got, torch.Tensor) and not got.is_floating_point():
        raise ExerciseFailure(
            f"Case {case.name!r}: the table has dtype {got.dtype}; sines and cosines are float."
            "\nLikely cause: the table, or the positions it is built from, made of integers."
        )


_PE_CASES = [
    Case("max_len=1, d_model=4: position 0 only, sin(0) = 0 and cos(0) = 1", (1, 4)),
    Case("max_len=6, d_model=8", (6, 8)),
    Case("max_len=16, d_model=16 (square: a transposed table has the right shape)", (16, 16)),
    Case("max_len=50, d_model=32", (50, 32)),
    Case("max_len=20, d_model=128: the low frequencies of a wide model", (20, 128)),
]
_ONE_ROW = "one row per position and one column per feature: (max_len, d_model)."
POSITIONAL_ENCODING = Table(
    cases=lambda: _PE_CASES,
    reference=functools.partial(positional.positional_encoding, dtype=torch.float64),
    mistakes=families.flawed(_sinusoids, _PE_WHY, **_PE_WHY),
    shape_checks=[_floating],
    outputs=[Out("the encodings", shape_hint=_ONE_ROW, cause=_base_hint)],
    atol=1e-4,
    rtol=1e-4,
)
check_positional_encoding = exercise(
    "positional_encoding",
    "03",
    reference=positional.positional_encoding,
    todo="Replace `raise NotImplementedError` with the table of sines and cosines.",
    own_work={  # what the exercise asks the learner to write themselves
        "the course's positional_encoding (mha_course)": positional.positional_encoding,
        "the course's PositionalEncoding (mha_course)": positional.PositionalEncoding,
    },
    table=POSITIONAL_ENCODING,
)
