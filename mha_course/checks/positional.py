"""Checker for lesson 03's second exercise: the sinusoidal positional encoding."""

from __future__ import annotations

import math

import torch

from .. import positional, reference
from ._core import Mistake, call_candidate, checker, compare, require_shape
from ._failure import ExerciseFailure

__all__ = ["check_positional_encoding"]

# What the exercise asks the learner to write themselves (the checker names the one called).
POSITIONAL_ROUTINES = {
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
    """The positional-encoding table with each classic mistake as a switch (float64)."""
    position = torch.arange(first, first + max_len, dtype=torch.float64).unsqueeze(1)
    j = torch.arange(d_model, dtype=torch.float64)  # the column index
    if interleave:
        freq = base ** (-exponent(j, d_model))  # one frequency per column
        angle = position * freq if not multiply else position / freq
        even = (j % 2 == 0) == sin_even
        return torch.where(even, torch.sin(angle), torch.cos(angle))
    # halves: the sines of every pair first, then the cosines
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / base ** (two_i / d_model)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)[:, :d_model]


def _pe_mistakes() -> list[Mistake]:
    return [
        Mistake(
            "transposed",
            lambda n, d: _sinusoids(n, d).T,
            "your table is transposed: rows are positions and columns are features, shape "
            "(max_len, d_model).",
        ),
        Mistake(
            "sin and cos swapped",
            lambda n, d: _sinusoids(n, d, sin_even=False),
            "sin and cos are swapped: sin goes in the even columns (pe[:, 0::2]) and cos in the odd "
            "ones (pe[:, 1::2]); row 0 (position 0) should read [0, 1, 0, 1, ...].",
        ),
        Mistake(
            "halves",
            lambda n, d: _sinusoids(n, d, interleave=False),
            "you put all the sines in the first half and all the cosines in the second; they are "
            "interleaved: pe[:, 0::2] = sin(...), pe[:, 1::2] = cos(...).",
        ),
        Mistake(
            "positions from 1",
            lambda n, d: _sinusoids(n, d, first=1),
            "the positions start at 1; they start at 0 (torch.arange(max_len)), so row 0 is [0, 1, 0, 1, ...].",
        ),
        Mistake(
            "exponent i/d_model",
            lambda n, d: _sinusoids(n, d, exponent=lambda j, d: (j // 2) / d),
            "the exponent is i/d_model; it is 2i/d_model, where 2i is the even column of the pair: "
            "torch.arange(0, d_model, 2) / d_model.",
        ),
        Mistake(
            "exponent 4i/d_model",
            lambda n, d: _sinusoids(n, d, exponent=lambda j, d: 4 * (j // 2) / d),
            "the 2 is counted twice: torch.arange(0, d_model, 2) already gives 2i, so the exponent is "
            "torch.arange(0, d_model, 2) / d_model, not 2 * torch.arange(0, d_model, 2) / d_model.",
        ),
        Mistake(
            "exponent j/d_model",
            lambda n, d: _sinusoids(n, d, exponent=lambda j, d: j / d),
            "each column got its own frequency; columns 2i and 2i+1 share one: both use "
            "10000^(2i/d_model). Compute the frequencies for the even columns only "
            "(torch.arange(0, d_model, 2)) and use them for sin and for cos.",
        ),
        Mistake(
            "exponent 2j/d_model",
            lambda n, d: _sinusoids(n, d, exponent=lambda j, d: 2 * j / d),
            "the exponent uses the column index as i; i counts pairs of columns: columns 2i and 2i+1 "
            "both use 10000^(2i/d_model), i.e. torch.arange(0, d_model, 2) / d_model.",
        ),
        Mistake(
            "multiplied",
            lambda n, d: _sinusoids(n, d, multiply=True),
            "the position is multiplied by 10000^(2i/d_model); it is divided: pos / 10000^(2i/d_model) "
            "(so the frequencies fall from 1 down to about 1/10000).",
        ),
        Mistake(
            "base 1000",
            lambda n, d: _sinusoids(n, d, base=1000.0),
            "the base is 1000; it is 10000 (ten thousand): pos / 10000 ** (2i / d_model).",
        ),
    ]


def _base_hint(got: torch.Tensor, max_len: int, d_model: int) -> str | None:
    """When the table is right but for its base, say which base it used."""
    if max_len < 2 or d_model < 4 or tuple(got.shape) != (max_len, d_model):
        return None
    pe = got.detach().double()
    if not torch.allclose(
        pe[0], _sinusoids(1, d_model)[0], atol=1e-4
    ):  # row 0 must be [0, 1, 0, 1, ...]
        return None
    freq = torch.asin(pe[1, 2].clamp(-1, 1))  # = 1 / base^(2/d_model) when the rest is right
    if not 0 < freq < 1:
        return None
    base = freq.item() ** (-d_model / 2)
    if not math.isfinite(base) or not torch.allclose(
        pe, _sinusoids(max_len, d_model, base=base), atol=1e-3
    ):
        return None
    return (
        f"your frequencies use the base {base:.4g}; the formula uses 10000: "
        f"pos / 10000 ** (2i / d_model)."
    )


def _pe_cases():
    yield "max_len=1, d_model=4: position 0 only, sin(0) = 0 and cos(0) = 1", 1, 4
    yield "max_len=6, d_model=8", 6, 8
    yield "max_len=16, d_model=16 (square, so a transposed table has the right shape)", 16, 16
    yield "max_len=50, d_model=32", 50, 32
    yield "max_len=20, d_model=128: the low frequencies of a wide model", 20, 128


@checker(
    "positional_encoding",
    "Replace `raise NotImplementedError` with the table of sines and cosines.",
    own_work=POSITIONAL_ROUTINES,
)
def check_positional_encoding(candidate) -> int:
    """Check ``candidate(max_len, d_model) -> (max_len, d_model)`` against the sinusoidal table:
    PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same angle)."""
    mistakes = _pe_mistakes()
    n = 0
    for case, max_len, d_model in _pe_cases():
        got = call_candidate(candidate, case, max_len, d_model)
        expected = reference.positional_encoding(max_len, d_model).double()
        transposed = isinstance(got, torch.Tensor) and tuple(got.shape) == (d_model, max_len)
        require_shape(
            case,
            "the table",
            got,
            expected.shape,
            "your table is transposed: rows are positions, columns are features, shape "
            "(max_len, d_model)."
            if transposed
            else "one row per position and one column per feature: shape (max_len, d_model).",
        )
        if not got.is_floating_point():
            raise ExerciseFailure(
                f"Case {case!r}: the table has dtype {got.dtype}; it should be float "
                f"(sines and cosines). Did you build it with an integer torch.arange?"
            )
        compare(
            case,
            "encodings",
            got,
            expected,
            atol=1e-4,
            rtol=1e-4,
            mistakes=mistakes,
            args=(max_len, d_model),
            cause=_base_hint(got, max_len, d_model),
        )
        n += 1
    return n
