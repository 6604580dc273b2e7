"""Lesson 03's positional encoding: the sinusoidal table, PE(pos, 2i) = sin(pos / 10000^(2i/d_model))
and PE(pos, 2i+1) = cos of the same angle."""

from __future__ import annotations

import math

import torch

from .. import positional
from . import families
from ._core import exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table

POSITIONAL_ROUTINES = {  # what the exercise asks the learner to write themselves
    "the course's positional_encoding (mha_course)": positional.positional_encoding,
    "the course's PositionalEncoding (mha_course)": positional.PositionalEncoding,
}


def _sinusoids(
    max_len,
    d_model,
    *,
    base=10000.0,
    exponent=lambda j, d: 2 * (j // 2) / d,
    first=0,
    interleave=True,
    sin_even=True,
    multiply=False,
):
    """The table in float64, each classic mistake a switch."""
    position = torch.arange(first, first + max_len, dtype=torch.float64).unsqueeze(1)
    j = torch.arange(d_model, dtype=torch.float64)  # the column index
    if not interleave:  # the sines of every pair first, then the cosines
        angle = position / base ** (torch.arange(0, d_model, 2, dtype=torch.float64) / d_model)
        return torch.cat([angle.sin(), angle.cos()], dim=-1)[:, :d_model]
    freq = base ** (-exponent(j, d_model))  # one frequency per column
    angle = position / freq if multiply else position * freq
    return torch.where((j % 2 == 0) == sin_even, angle.sin(), angle.cos())


_PE_FLAWS = {  # flaw: how the table is built with it
    "sin and cos swapped": {"sin_even": False},
    "halves": {"interleave": False},
    "positions from 1": {"first": 1},
    "exponent i/d_model": {"exponent": lambda j, d: (j // 2) / d},
    "exponent 4i/d_model": {"exponent": lambda j, d: 4 * (j // 2) / d},
    "exponent j/d_model": {"exponent": lambda j, d: j / d},
    "exponent 2j/d_model": {"exponent": lambda j, d: 2 * j / d},
    "multiplied": {"multiply": True},
    "base 1000": {"base": 1000.0},
}
_ZERO_ROW = "row 0 (position 0) reads [0, 1, 0, 1, ...]"
_PE_WHY = {
    "transposed": "your table is transposed: rows are positions and columns are features, "
    "(max_len, d_model).",
    "sin and cos swapped": "sin and cos are swapped: the sines go in the even columns and the "
    f"cosines in the odd ones; {_ZERO_ROW}.",
    "halves": "all the sines are in the first half and all the cosines in the second; they "
    "alternate column by column, sin in the even columns and cos in the odd ones.",
    "positions from 1": f"the positions start at 1; they start at 0, so {_ZERO_ROW}.",
    "exponent i/d_model": "the exponent is i/d_model; it is 2i/d_model, 2i being the even column "
    "of the pair.",
    "exponent 4i/d_model": "the 2 is counted twice: the even column indices already are 2i, so "
    "the exponent is 2i/d_model, not 4i/d_model.",
    "exponent j/d_model": "each column got its own frequency; columns 2i and 2i+1 share one, "
    "1/10000^(2i/d_model): compute it for the even columns and use it for both the sine and the "
    "cosine.",
    "exponent 2j/d_model": "the exponent takes the column index for i; i counts pairs of "
    "columns: columns 2i and 2i+1 both use 10000^(2i/d_model).",
    "multiplied": "the position is multiplied by 10000^(2i/d_model); it is divided by it (so the "
    "frequencies fall from 1 to about 1/10000).",
    "base 1000": "the base is 1000; it is 10000 (ten thousand).",
}


def _flawed(flaw):
    if flaw == "transposed":
        return lambda max_len, d_model: _sinusoids(max_len, d_model).T
    return lambda max_len, d_model: _sinusoids(max_len, d_model, **_PE_FLAWS[flaw])


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
    if not math.isfinite(base) or not torch.allclose(
        pe, _sinusoids(max_len, d_model, base=base), atol=1e-3
    ):
        return None
    return f"your frequencies use the base {base:.4g}; the formula's is 10000."


def _floating(case: Case, got, expected) -> None:
    if isinstance(got, torch.Tensor) and not got.is_floating_point():
        raise ExerciseFailure(
            f"Case {case.name!r}: the table has dtype {got.dtype}; sines and cosines are float."
            "\nLikely cause: the table, or the positions it is built from, made of integers."
        )


def _pe_cases():
    yield Case("max_len=1, d_model=4: position 0 only, sin(0) = 0 and cos(0) = 1", (1, 4))
    yield Case("max_len=6, d_model=8", (6, 8))
    yield Case(
        "max_len=16, d_model=16 (square, so a transposed table has the right shape)", (16, 16)
    )
    yield Case("max_len=50, d_model=32", (50, 32))
    yield Case("max_len=20, d_model=128: the low frequencies of a wide model", (20, 128))


POSITIONAL_ENCODING = Table(
    cases=_pe_cases,
    reference=lambda max_len, d_model: positional.positional_encoding(
        max_len, d_model, dtype=torch.float64
    ),
    mistakes=families.mistakes(_flawed, _PE_WHY, **_PE_WHY),
    shape_checks=[_floating],
    outputs=[
        Out(
            "the encodings",
            shape_hint="one row per position and one column per feature: (max_len, d_model).",
            cause=_base_hint,
        )
    ],
    atol=1e-4,
    rtol=1e-4,
)
check_positional_encoding = exercise(
    "positional_encoding",
    "03",
    reference=positional.positional_encoding,
    todo="Replace `raise NotImplementedError` with the table of sines and cosines.",
    own_work=POSITIONAL_ROUTINES,
    table=POSITIONAL_ENCODING,
)
