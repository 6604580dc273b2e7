"""Checkers for lesson 00's warm-ups: the two matmuls of attention, on their own.

``pairwise_dot`` is every query against every key (the scores before the scale); ``weighted_average``
mixes the values with rows of weights (the output). Both take any number of leading axes, as
attention does with its batch and heads.
"""

from __future__ import annotations

import torch

from .. import reference
from ._core import Mistake, checker
from ._steps import check_cases, randn, reverse_axes

__all__ = ["check_pairwise_dot", "check_weighted_average"]


# ---------------------------------------------------------------- pairwise_dot

_LAST_TWO = "transpose only b's last two axes: a @ b.transpose(-2, -1), or a @ b.mT"

_DOT_MISTAKES = [
    Mistake(
        "b.T on a batch",
        lambda a, b: a @ reverse_axes(b),
        f"b.T reverses *every* axis of a batched tensor ((B, S, E) becomes (E, S, B)); {_LAST_TWO}.",
    ),
    Mistake(
        "transposed result",
        lambda a, b: b @ a.transpose(-2, -1),
        "your result is transposed: rows belong to a's vectors and columns to b's, so "
        "a @ b.transpose(-2, -1), not b @ a.transpose(-2, -1).",
    ),
    Mistake(
        "elementwise",
        lambda a, b: (a * b).sum(-1),
        "(a * b).sum(-1) pairs row i of a with row i of b only (and needs L == S); you need "
        f"every row of a against every row of b, an (..., L, S) table: {_LAST_TWO}.",
    ),
    Mistake(
        "a @ b",
        lambda a, b: a @ b,
        "a @ b multiplies (L, E) by (S, E): the inner sizes do not match. Transpose b's last "
        "two axes first: a @ b.transpose(-2, -1), or a @ b.mT.",
    ),
    Mistake(
        "2-D only: b.t()",
        lambda a, b: a @ b.t(),
        f"b.t() works on 2-D matrices only; the inputs may have leading batch axes: {_LAST_TWO}.",
    ),
    Mistake(
        "2-D only: einsum without ...",
        lambda a, b: torch.einsum("le,se->ls", a, b),
        "your einsum pattern is for 2-D inputs only; let '...' stand for the leading axes: "
        "torch.einsum('...le,...se->...ls', a, b).",
    ),
]


def _dot_cases():
    g = torch.Generator().manual_seed(10)
    yield "a (3, 4), b (5, 4): 3 vectors against 5", randn(g, 3, 4), randn(g, 5, 4)
    yield "a batch: a (2, 3, 4), b (2, 5, 4)", randn(g, 2, 3, 4), randn(g, 2, 5, 4)
    yield "L = S: a (4, 3), b (4, 3)", randn(g, 4, 3), randn(g, 4, 3)
    yield (
        "two leading axes: a (2, 3, 4, 6), b (2, 3, 5, 6)",
        randn(g, 2, 3, 4, 6),
        randn(g, 2, 3, 5, 6),
    )
    yield (
        "float64: a (2, 3), b (6, 3)",
        randn(g, 2, 3, dtype=torch.float64),
        randn(g, 6, 3, dtype=torch.float64),
    )
    yield (
        "a non-contiguous a (a transposed view) (5, 3), b (2, 3)",
        randn(g, 3, 5).T,
        randn(g, 2, 3),
    )
    yield "one vector each: a (1, 6), b (1, 6)", randn(g, 1, 6), randn(g, 1, 6)


@checker(
    "pairwise_dot",
    "Replace `raise NotImplementedError` with one matmul of a and b's rows turned into columns.",
)
def check_pairwise_dot(candidate) -> int:
    """Check ``candidate(a (..., L, E), b (..., S, E)) -> (..., L, S)``: every dot product."""
    return check_cases(
        candidate,
        _dot_cases(),
        reference.pairwise_dot,
        _DOT_MISTAKES,
        what="the dot products",
        crash_hint="your code must work with any number of leading axes, a (..., L, E) and "
        f"b (..., S, E): {_LAST_TWO}. b.T and b.t() are for 2-D matrices.",
        shape_hint="entry [..., i, j] is a[..., i, :] · b[..., j, :], so the result is "
        f"(..., L, S): {_LAST_TWO}.",
        fallback_cause=f"each entry is the dot product of a row of a and a row of b: {_LAST_TWO}.",
    )


# ---------------------------------------------------------------- weighted_average

_AVG_MISTAKES = [
    Mistake(
        "weights.mT @ values",
        lambda w, v: w.transpose(-2, -1) @ v,
        "you transposed the weights, so each output row mixes with a column of weights; row i of "
        "the output mixes the values with row i of the weights: weights @ values.",
    ),
    Mistake(
        "values.mT @ weights.mT",
        lambda w, v: v.transpose(-2, -1) @ w.transpose(-2, -1),
        "values.mT @ weights.mT is the transpose of the answer, (..., E, L); weights @ values "
        "gives (..., L, E) directly.",
    ),
    Mistake(
        "unweighted mean",
        lambda w, v: v.mean(-2, keepdim=True).expand(*w.shape[:-1], v.size(-1)),
        "every row of yours is the plain mean of the values; value j must count with its weight "
        "weights[..., i, j]: weights @ values.",
    ),
    Mistake(
        "unweighted mean, one row",
        lambda w, v: v.mean(-2),
        "you took the plain mean of the values, one row for all; each query i has its own "
        "weights, row i: weights @ values -> (..., L, E).",
    ),
    Mistake(
        "divided by S",
        lambda w, v: (w @ v) / v.size(-2),
        "each row of weights already sums to 1, so weights @ values is already an average: do "
        "not divide by S, the number of values, again.",
    ),
]


def _rows_summing_to_one(g, *shape, dtype=torch.float32):
    e = randn(g, *shape, dtype=dtype).exp()
    return e / e.sum(dim=-1, keepdim=True)


def _avg_cases():
    g = torch.Generator().manual_seed(11)
    yield "weights (3, 5), values (5, 4)", _rows_summing_to_one(g, 3, 5), randn(g, 5, 4)
    picks = torch.tensor([[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]])
    yield (
        "one-hot rows: weights (2, 3) pick value 2, then value 0 of values (3, 4)",
        picks,
        randn(g, 3, 4),
    )
    yield "L = S: weights (4, 4), values (4, 3)", _rows_summing_to_one(g, 4, 4), randn(g, 4, 3)
    yield (
        "a batch: weights (2, 3, 5), values (2, 5, 6)",
        _rows_summing_to_one(g, 2, 3, 5),
        randn(g, 2, 5, 6),
    )
    yield (
        "two leading axes: weights (2, 2, 3, 4), values (2, 2, 4, 5)",
        _rows_summing_to_one(g, 2, 2, 3, 4),
        randn(g, 2, 2, 4, 5),
    )
    yield (
        "float64: weights (3, 2), values (2, 3)",
        _rows_summing_to_one(g, 3, 2, dtype=torch.float64),
        randn(g, 2, 3, dtype=torch.float64),
    )
    yield (
        "non-contiguous weights (a transposed view) (4, 5), values (5, 2)",
        _rows_summing_to_one(g, 4, 5).T.contiguous().T,  # the same numbers, stored by column
        randn(g, 5, 2),
    )


@checker(
    "weighted_average",
    "Replace `raise NotImplementedError` with the weighted sum of the values, one row per row of weights.",
)
def check_weighted_average(candidate) -> int:
    """Check ``candidate(weights (..., L, S), values (..., S, E)) -> (..., L, E)``, row i =
    sum_j weights[..., i, j] * values[..., j, :]."""
    return check_cases(
        candidate,
        _avg_cases(),
        reference.weighted_average,
        _AVG_MISTAKES,
        what="the averages",
        crash_hint="weights (..., L, S) @ values (..., S, E) -> (..., L, E); the S of the "
        "weights' columns meets the S of the values' rows, no transpose needed.",
        shape_hint="one averaged value per row of weights: (..., L, E) = weights @ values.",
        fallback_cause="row i is sum over j of weights[..., i, j] * values[..., j, :]: "
        "weights @ values.",
    )
