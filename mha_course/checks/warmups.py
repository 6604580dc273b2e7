"""Checkers for lesson 00's warm-ups: the two matmuls of attention, and the soft lookup that
puts them together.

``pairwise_dot`` is every query against every key (the scores before the scale); ``weighted_average``
mixes the values with rows of weights (the output). ``soft_lookup`` is both with a softmax between
them, at a temperature (0: the hard lookup, the limit). All take any number of leading axes, as
attention does with its batch and heads.
"""

from __future__ import annotations

import torch

from .. import reference
from .._validate import shape_str
from ._core import Mistake, call_candidate, checker, compare, require_shape
from ._failure import ExerciseFailure
from ._steps import call_diagnosed, check_cases, randn, reverse_axes

__all__ = ["check_pairwise_dot", "check_weighted_average", "check_soft_lookup"]


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


# ---------------------------------------------------------------- soft_lookup


def _soft_weights(scores, temperature):
    return _shared_best(scores) if temperature == 0 else torch.softmax(scores / temperature, -1)


def _weighted(weights, values):
    return weights @ values, weights


def _lookup(weights_of):
    """A soft lookup whose weights are ``weights_of(scores, temperature)``."""

    def lookup(query, keys, values, temperature=1.0):
        weights = weights_of(query @ keys.transpose(-2, -1), temperature)
        return weights @ values, weights

    return lookup


def _shared_best(scores):
    best = (scores == scores.amax(dim=-1, keepdim=True)).to(scores.dtype)
    return best / best.sum(dim=-1, keepdim=True)


def _soft_or(hard):
    """Right for a temperature above 0; ``hard(scores)`` at temperature 0."""
    return _lookup(lambda s, t: hard(s) if t == 0 else torch.softmax(s / t, dim=-1))


def _first_best(scores):
    first = scores.argmax(dim=-1)
    return torch.nn.functional.one_hot(first, scores.size(-1)).to(scores.dtype)


def _bool_shares(scores):  # bool / long is float32, whatever the scores' dtype
    best = scores == scores.amax(dim=-1, keepdim=True)
    return best / best.sum(dim=-1, keepdim=True)


_AT_ZERO = (
    "at temperature 0 there is nothing to divide by. It stands for the limit of ever smaller "
    "temperatures: handle it on its own. Which keys get the weight then?"
)

_LOOKUP_MISTAKES = [
    Mistake(
        "temperature ignored",
        _lookup(lambda s, t: torch.softmax(s, dim=-1)),
        "the temperature is ignored: divide the matches by it before the softmax "
        "(a high temperature blends the values, a low one picks the best match).",
    ),
    Mistake(
        "multiplied by the temperature",
        _lookup(lambda s, t: torch.softmax(s * t, dim=-1)),
        "you multiplied the matches by the temperature; divide by it: a high temperature must "
        "blend the values evenly, a low one pick the best match.",
    ),
    Mistake(
        "softmax over the queries",
        _lookup(lambda s, t: torch.softmax(s / t, dim=-2) if t else _shared_best(s)),
        "the softmax runs over the queries: each query's weights must sum to 1 over the keys, "
        "the last axis (dim=-1).",
    ),
    Mistake(
        "the first best key only",
        _soft_or(_first_best),
        "a tie at temperature 0: when several keys match best, they share the weight equally "
        "(that is the limit of the softmax), not the first of them alone (argmax).",
    ),
    Mistake(
        "tied keys not shared",
        _soft_or(lambda s: (s == s.amax(dim=-1, keepdim=True)).to(s.dtype)),
        "at temperature 0 each row of weights must still sum to 1: the best-matching keys share "
        "it equally (two tied keys get 1/2 each).",
    ),
    Mistake("bool shares", _soft_or(_bool_shares), ""),  # found by its crash, below
    Mistake(
        "1 / temperature",
        _lookup(lambda s, t: torch.softmax(s * (1 / t), dim=-1)),
        _AT_ZERO,
    ),
    Mistake(
        "keys.T on a batch",
        lambda q, k, v, t=1.0: _weighted(_soft_weights(q @ reverse_axes(k), t), v),
        "keys.T reverses *every* axis of a batched tensor; swap only the last two: "
        "keys.transpose(-2, -1), or keys.mT.",
    ),
    Mistake(
        "transposed weights",
        lambda q, k, v, t=1.0: (lambda r: (r[1].transpose(-2, -1) @ v, r[1]))(
            reference.soft_lookup(q, k, v, t)
        ),
        "result row i mixes the values with row i of the weights: weights @ values, no transpose.",
    ),
    Mistake(
        "plain mean",
        lambda q, k, v, t=1.0: (
            v.mean(dim=-2, keepdim=True).expand(*q.shape[:-1], v.size(-1)),
            reference.soft_lookup(q, k, v, t)[1],
        ),
        "every result is the plain mean of the values: value j must count with its weight, "
        "weights[..., i, j].",
    ),
]
_BOOL_SHARES = (
    "True/False divided by a count is float32, whatever the inputs' dtype: make the shares in "
    "the scores' dtype (.to(scores.dtype)) before you divide."
)


def _picked(i: int) -> list[Mistake]:
    """The lookup's mistakes, each giving only its result (i = 0) or its weights (i = 1)."""
    return [
        Mistake(m.name, lambda *a, run=m.run: run(*a)[i], m.explanation)
        for m in _LOOKUP_MISTAKES
        if m.explanation
    ]


def _integer_randn(g, *shape, dtype=torch.float32):
    """Small whole numbers: their dot products are exact, so ties are ties in every style."""
    return torch.randint(-2, 3, shape, generator=g).to(dtype)


def _lookup_cases():
    """``(case, args)``; a case without a temperature tests its default, 1."""
    g = torch.Generator().manual_seed(13)
    example = (
        torch.tensor([[2.0, 0.0]]),
        torch.tensor([[1.0, 0.0], [0.0, 1.0]]),
        torch.tensor([[10.0], [20.0]]),
    )
    yield "the docstring's example, temperature 1", (*example, 1.0)
    yield "the docstring's example, temperature 0: a hard lookup", (*example, 0.0)
    yield (
        "3 queries, 5 keys (E = 4), values of size 3, the default temperature",
        (randn(g, 3, 4), randn(g, 5, 4), randn(g, 5, 3)),
    )
    yield (
        "a batch: query (2, 3, 4), keys (2, 5, 4), values (2, 5, 6), temperature 0.5",
        (randn(g, 2, 3, 4), randn(g, 2, 5, 4), randn(g, 2, 5, 6), 0.5),
    )
    yield (
        "two leading axes: query (2, 2, 3, 4), keys (2, 2, 4, 4), values (2, 2, 4, 2), "
        "temperature 3",
        (randn(g, 2, 2, 3, 4), randn(g, 2, 2, 4, 4), randn(g, 2, 2, 4, 2), 3.0),
    )
    tied_keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [-1.0, 0.0]])
    yield (
        "temperature 0 with a tie: keys 0 and 2 are equal and match query 0 best",
        (torch.tensor([[3.0, 1.0], [0.0, 2.0]]), tied_keys, randn(g, 4, 3), 0.0),
    )
    yield (
        "temperature 0, a batch of whole numbers (2, 4, 3), (2, 6, 3), (2, 6, 2)",
        (_integer_randn(g, 2, 4, 3), _integer_randn(g, 2, 6, 3), randn(g, 2, 6, 2), 0.0),
    )
    yield (
        "huge matches (query × 300), temperature 1: needs a stable softmax",
        (300 * randn(g, 3, 4), randn(g, 5, 4), randn(g, 5, 2), 1.0),
    )
    yield (
        "a small temperature, 0.01",
        (randn(g, 3, 4), randn(g, 5, 4), randn(g, 5, 2), 0.01),
    )
    yield (
        "float64, temperature 0 with ties",
        (
            _integer_randn(g, 3, 2, dtype=torch.float64),
            _integer_randn(g, 5, 2, dtype=torch.float64),
            randn(g, 5, 3, dtype=torch.float64),
            0.0,
        ),
    )


def _invalid_lookup_cases():
    """``(case, args, words the ValueError names one of, why it must raise)``."""
    g = torch.Generator().manual_seed(14)
    yield (
        "temperature -1",
        (randn(g, 2, 4), randn(g, 3, 4), randn(g, 3, 2), -1.0),
        ("temperature",),
        "a negative temperature turns the lookup upside down (the worst match would weigh most)",
    )
    yield (
        "query (2, 4) and keys (3, 3): their sizes E differ",
        (randn(g, 2, 4), randn(g, 3, 3), randn(g, 3, 2), 1.0),
        ("query", "key"),
        "a query of size 4 cannot be compared with keys of size 3",
    )
    yield (
        "3 keys and 4 values",
        (randn(g, 2, 4), randn(g, 3, 4), randn(g, 4, 2), 1.0),
        ("key", "value"),
        "a dictionary has one value per key",
    )


def _lookup_nan_cause(temperature) -> str:
    if temperature == 0:
        return (
            "dividing the matches by a temperature of 0 gives ±inf, and the softmax of inf is "
            "NaN. Temperature 0 stands for the limit of ever smaller temperatures: handle it on "
            "its own. Which keys get the weight then?"
        )
    return (
        "exp overflowed to inf and inf/inf gave NaN: subtract each row's max before exp "
        "(as in your softmax), or use torch.softmax."
    )


_LOOKUP_CRASH = (
    "query (..., L, E) against keys (..., S, E) gives (..., L, S) matches; the weights "
    "(..., L, S) then mix the values (..., S, Ev). Transpose only the keys' last two axes."
)


def _held_to_value_error(candidate, case, args, names, why) -> None:
    """The candidate must raise ValueError on ``args``, naming one of ``names``."""
    try:
        call_candidate(candidate, case, *args)
    except ExerciseFailure as failure:
        error = failure.raised
        if error is None:
            raise
        if isinstance(error, ValueError):
            if any(name in str(error).lower() for name in names):
                return
            raise ExerciseFailure(
                f"Case {case!r}: your ValueError says {str(error)!r}.\n"
                f"Likely cause: the message should name what is wrong ({' or '.join(names)}) "
                "and the numbers it got."
            ) from error
        raise failure.with_cause(
            f"{why}. Check it yourself before computing, and raise ValueError with a message "
            f"that names it, not a {type(error).__name__} from deep inside."
        ) from error
    raise ExerciseFailure(
        f"Case {case!r}: your soft_lookup returned a result; it should raise ValueError.\n"
        f"Likely cause: {why}. Check it first: raise ValueError(...) with a message that names it."
    )


@checker(
    "soft_lookup",
    "Replace `raise NotImplementedError` with the lookup: the matches, the weights, the blend.",
)
def check_soft_lookup(candidate) -> int:
    """Check ``candidate(query (..., L, E), keys (..., S, E), values (..., S, Ev), temperature=1.0)
    -> (result (..., L, Ev), weights (..., L, S))``: weights = softmax(query · key / temperature)
    over the keys (temperature 0: equal shares for the best-matching keys), result = weights @
    values; a negative temperature or sizes that do not pair up raise ValueError."""
    crash_mistakes = [
        Mistake(m.name, m.run, m.explanation or _BOOL_SHARES) for m in _LOOKUP_MISTAKES
    ]
    n = 0
    for case, args in _lookup_cases():
        got = call_diagnosed(candidate, case, args, crash_mistakes, _LOOKUP_CRASH)
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ExerciseFailure(
                f"Case {case!r}: return a pair (result, weights); got {type(got).__name__}"
                + (f" of length {len(got)}" if isinstance(got, tuple) else "")
                + "."
            )
        result, weights = got
        ref_result, ref_weights = reference.soft_lookup(*args)
        if isinstance(result, torch.Tensor) and tuple(result.shape) == tuple(
            ref_weights.shape
        ) != tuple(ref_result.shape):
            raise ExerciseFailure(
                f"Case {case!r}: the first tensor you returned is {shape_str(result.shape)}, the "
                "shape of the weights.\nLikely cause: the order of the pair: return (result, weights)."
            )
        require_shape(
            case,
            "weights",
            weights,
            ref_weights.shape,
            "one weight per query and key: (..., L, S).",
        )
        require_shape(
            case, "result", result, ref_result.shape, "one blend per query: (..., L, Ev)."
        )
        temperature = args[3] if len(args) > 3 else 1.0
        nan = torch.isnan(weights).any() or torch.isinf(weights).any()
        compare(
            case,
            "weights",
            weights,
            ref_weights,
            mistakes=_picked(1),
            args=args,
            cause=_lookup_nan_cause(temperature) if nan else None,
        )
        compare(
            case,
            "results",
            result,
            ref_result,
            mistakes=_picked(0),
            args=args,
            fallback_cause="the weights are right, so look at the last step: each result is "
            "the average of the values with its row of weights.",
        )
        if weights.dtype != ref_weights.dtype:
            raise ExerciseFailure(
                f"Case {case!r}: your weights are {weights.dtype}, expected {ref_weights.dtype} "
                f"(the inputs' dtype).\nLikely cause: {_BOOL_SHARES}"
            )
        n += 1
    for case, args, names, why in _invalid_lookup_cases():
        _held_to_value_error(candidate, case, args, names, why)
        n += 1
    return n
