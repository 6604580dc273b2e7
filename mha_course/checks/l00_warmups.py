"""Lesson 00's warm-ups: a stable softmax, and the soft lookup, the idea behind attention (every
query against every key, a softmax, the weighted average of the values). Both take any number
of leading axes, as attention does with its batch and heads."""

from __future__ import annotations

import torch

from ._core import Mistake, exercise
from ._table import Case, Out, Table, pair, reverse_axes, seeded_randn

# ---------------------------------------------------------------- softmax


def _softmax_cases():
    randn = seeded_randn(0)
    yield Case("a vector of 5 scores", (randn(5),))
    yield Case("a (3, 4) matrix: one softmax per row", (randn(3, 4),))
    yield Case("a batch (2, 3, 4)", (randn(2, 3, 4),))
    yield Case("huge scores (up to 1000)", (torch.tensor([[1000.0, 999.0, 0.0], [-5, 0, 5]]),))
    yield Case(
        "hugely negative scores (a row of -1000, -1001, -1002)",
        (torch.tensor([[-1000.0, -1001, -1002], [1, 2, 3]]),),
    )
    inf = float("-inf")
    yield Case("-inf scores (masked keys) get weight 0", (torch.tensor([[0.5, inf, 1.0, inf]]),))


def _shifted_exp(s, dim=-1):
    return (s - s.amax(dim=dim, keepdim=True)).exp()


_ROWS = "each row is normalised by its own sum, over the last axis"
_SHIFT = (
    "softmax(s - c) = softmax(s) for any c taken from a whole row: which c keeps every exponent "
    "at most 0, and one of them exactly 0?"
)


def _nan_in_softmax(got, case: Case) -> str | None:
    """NaN in a row whose exponentials overflow (inf/inf) or all underflow (0/0)."""
    scores = case.args[0]
    nan = torch.isnan(got).reshape(-1, scores.size(-1)).any(-1)
    top = scores.reshape(-1, scores.size(-1))[nan].amax(-1)
    if bool((top > 80).any()):
        return f"exp overflowed to inf, and inf/inf is NaN: {_SHIFT}"
    if bool((top < -80).any()):
        return f"every exp of the row underflowed to 0, and 0/0 is NaN: {_SHIFT}"
    return None


SOFTMAX = Table(
    cases=_softmax_cases,
    reference=lambda s: torch.softmax(s, dim=-1),
    mistakes=[
        Mistake(
            "wrong axis",
            lambda s: torch.softmax(s, dim=0),
            "you normalised over the first axis; softmax goes over the last one, so that each "
            "row sums to 1.",
        ),
        Mistake(
            "max subtracted, summed over the first axis",
            lambda s: _shifted_exp(s) / _shifted_exp(s).sum(dim=0, keepdim=True),
            f"subtracting each row's max is right, but the sums are taken down the columns: {_ROWS}.",
        ),
        Mistake(
            "each column's max subtracted",
            lambda s: _shifted_exp(s, 0) / _shifted_exp(s, 0).sum(dim=-1, keepdim=True),
            "you subtracted each column's max, a different number in every column of a row, "
            "which changes the row's softmax; subtract each row's own max.",
        ),
        Mistake(
            "not normalised",
            lambda s: s.exp(),
            f"you took the exponentials but did not divide by their sum: {_ROWS}.",
        ),
        Mistake(
            "sum over everything",
            lambda s: s.exp() / s.exp().sum(),
            f"you divided by the sum of the whole tensor: {_ROWS}.",
        ),
        Mistake(
            "row sums lost their axis",
            lambda s: s.exp() / s.exp().sum(dim=-1),
            "the row sums lost their axis, so they broadcast against the columns instead of the "
            "rows: a row's sum must keep a length-1 axis to line up with its row.",
        ),
    ],
    outputs=[
        Out(
            "the weights",
            shape_hint="softmax keeps the shape of the scores; a sum that drops its axis changes it.",
            cause=_nan_in_softmax,
        )
    ],
    crash="a shape mix-up: a row's max and a row's sum must keep a length-1 last axis, shape "
    "(..., 1), to line up with the rows.",
)
check_softmax = exercise(
    "softmax",
    "00",
    reference=SOFTMAX.reference,
    todo="Replace `raise NotImplementedError` with your softmax over the last axis.",
    table=SOFTMAX,
)


# ---------------------------------------------------------------- soft_lookup


def soft_lookup(query, keys, values, temperature=1.0):
    """The reference: ``(result (..., L, Ev), weights (..., L, S))``, weights = softmax(query ·
    key / temperature) over the keys (temperature 0: equal shares for the best-matching keys),
    result = weights @ values; a negative temperature, or sizes that do not pair up, raise
    ValueError."""
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if query.size(-1) != keys.size(-1):
        raise ValueError(
            f"query and keys must have the same size E to be compared: query has "
            f"E={query.size(-1)}, keys have E={keys.size(-1)}"
        )
    if keys.size(-2) != values.size(-2):
        raise ValueError(
            f"one value per key: keys have S={keys.size(-2)}, values S={values.size(-2)}"
        )
    return _lookup(lambda s, t: _best_shared(s) if t == 0 else torch.softmax(s / t, dim=-1))(
        query, keys, values, temperature
    )


def _lookup(weights_of, keys_of=lambda k: k.transpose(-2, -1), mix=lambda w, v: w @ v):
    """A soft lookup whose weights are ``weights_of(matches, temperature)``."""

    def lookup(query, keys, values, temperature=1.0):
        weights = weights_of(query @ keys_of(keys), temperature)
        return mix(weights, values), weights

    return lookup


def _best_shared(scores):
    best = (scores == scores.amax(dim=-1, keepdim=True)).to(scores.dtype)
    return best / best.sum(dim=-1, keepdim=True)


def _soft_or(hard):
    """Right for a temperature above 0; ``hard(matches)`` at temperature 0."""
    return _lookup(lambda s, t: hard(s) if t == 0 else torch.softmax(s / t, dim=-1))


def _right(s, t):
    return _best_shared(s) if t == 0 else torch.softmax(s / t, dim=-1)


_AT_ZERO = (
    "at temperature 0 there is nothing to divide by. It stands for the limit of ever smaller "
    "temperatures: handle it on its own. Which keys get the weight then?"
)
_LOOKUP_MISTAKES = [
    Mistake(
        "temperature ignored",
        _lookup(lambda s, t: torch.softmax(s, dim=-1)),
        "the temperature is ignored: the matches are divided by it before the softmax (a high "
        "temperature blends the values, a low one picks the best match).",
    ),
    Mistake(
        "multiplied by the temperature",
        _lookup(lambda s, t: torch.softmax(s * t, dim=-1)),
        "you multiplied the matches by the temperature; a high temperature must blend the "
        "values evenly, a low one pick the best match.",
    ),
    Mistake(
        "softmax over the queries",
        _lookup(lambda s, t: torch.softmax(s / t, dim=-2) if t else _best_shared(s)),
        "the softmax runs over the queries: each query's weights must sum to 1 over the keys, "
        "the last axis.",
    ),
    Mistake(
        "the first best key only",
        _soft_or(lambda s: torch.nn.functional.one_hot(s.argmax(-1), s.size(-1)).to(s.dtype)),
        "a tie at temperature 0: when several keys match best, they share the weight equally "
        "(that is the limit of the softmax), not the first of them alone.",
    ),
    Mistake(
        "tied keys not shared",
        _soft_or(lambda s: (s == s.amax(dim=-1, keepdim=True)).to(s.dtype)),
        "at temperature 0 each row of weights must still sum to 1: the best-matching keys share "
        "it equally (two tied keys get 1/2 each).",
    ),
    Mistake(
        "shares in float32",
        _soft_or(lambda s: (b := s == s.amax(dim=-1, keepdim=True)) / b.sum(dim=-1, keepdim=True)),
        "True/False divided by a count is float32, whatever the inputs' dtype: make the shares "
        "in the scores' dtype before you divide.",
    ),
    Mistake("1 / temperature", _lookup(lambda s, t: torch.softmax(s * (1 / t), dim=-1)), _AT_ZERO),
    Mistake(
        "keys.T on a batch",
        _lookup(_right, keys_of=reverse_axes),
        "the T attribute reverses every axis of batched keys; only their last two are swapped.",
    ),
    Mistake(
        "transposed weights",
        _lookup(_right, mix=lambda w, v: w.transpose(-2, -1) @ v),
        "result row i mixes the values with row i of the weights, not with a column of them.",
    ),
    Mistake(
        "plain mean",
        _lookup(
            _right, mix=lambda w, v: v.mean(dim=-2, keepdim=True).expand(*w.shape[:-1], v.size(-1))
        ),
        "every result is the plain mean of the values: value j must count with its weight.",
    ),
]


def _whole_numbers(randn, *shape):
    """Small whole numbers: their dot products are exact, so ties are ties in every style."""
    return randn(*shape).mul(1.2).round().clamp(-2, 2)


def _lookup_cases():
    randn = seeded_randn(13)
    example = (torch.tensor([[2.0, 0.0]]), torch.eye(2), torch.tensor([[10.0], [20.0]]))
    tied_keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [-1.0, 0.0]])
    yield Case("the docstring's example, temperature 1", (*example, 1.0))
    yield Case("the docstring's example, temperature 0: a hard lookup", (*example, 0.0))
    yield Case(
        "3 queries, 5 keys (E = 4), values of size 3, the default temperature",
        (randn(3, 4), randn(5, 4), randn(5, 3)),
    )
    yield Case(
        "a batch: query (2, 3, 4), keys (2, 5, 4), values (2, 5, 6), temperature 0.5",
        (randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 6), 0.5),
    )
    yield Case(
        "two leading axes: query (2, 2, 3, 4), keys (2, 2, 4, 4), values (2, 2, 4, 2), temperature 3",
        (randn(2, 2, 3, 4), randn(2, 2, 4, 4), randn(2, 2, 4, 2), 3.0),
    )
    yield Case(
        "temperature 0 with a tie: keys 0 and 2 are equal and match query 0 best",
        (torch.tensor([[3.0, 1.0], [0.0, 2.0]]), tied_keys, randn(4, 3), 0.0),
    )
    yield Case(
        "temperature 0, a batch of whole numbers (2, 4, 3), (2, 6, 3), (2, 6, 2)",
        (_whole_numbers(randn, 2, 4, 3), _whole_numbers(randn, 2, 6, 3), randn(2, 6, 2), 0.0),
    )
    yield Case(
        "huge matches (query × 300), temperature 1: needs a stable softmax",
        (300 * randn(3, 4), randn(5, 4), randn(5, 2), 1.0),
    )
    yield Case("a small temperature, 0.01", (randn(3, 4), randn(5, 4), randn(5, 2), 0.01))
    yield Case(
        "float64, temperature 0 with ties",
        (
            _whole_numbers(randn, 3, 2).double(),
            _whole_numbers(randn, 5, 2).double(),
            randn(5, 3).double(),
            0.0,
        ),
    )
    yield Case(
        "temperature -1",
        (randn(2, 4), randn(3, 4), randn(3, 2), -1.0),
        raises=("temperature",),
        why="a negative temperature turns the lookup upside down (the worst match would weigh most)",
    )
    yield Case(
        "query (2, 4) and keys (3, 3): their sizes E differ",
        (randn(2, 4), randn(3, 3), randn(3, 2), 1.0),
        raises=("query", "key"),
        why="a query of size 4 cannot be compared with keys of size 3",
    )
    yield Case(
        "3 keys and 4 values",
        (randn(2, 4), randn(3, 4), randn(4, 2), 1.0),
        raises=("key", "value"),
        why="a dictionary has one value per key",
    )


def _nan_cause(got, case: Case) -> str | None:
    if not (torch.isnan(got).any() or torch.isinf(got).any()):
        return None
    if (case.args[3:] or (1.0,))[0] == 0:
        return (
            "dividing the matches by a temperature of 0 gives ±inf, and the softmax of inf is "
            f"NaN. {_AT_ZERO}"
        )
    return (
        "exp overflowed to inf and inf/inf gave NaN: subtract each row's max before taking "
        "exponentials, as your softmax does."
    )


SOFT_LOOKUP = Table(
    cases=_lookup_cases,
    reference=soft_lookup,
    double=False,
    mistakes=_LOOKUP_MISTAKES,
    shape_checks=[pair("result", "weights")],
    outputs=[
        Out(
            "the weights",
            1,
            shape_hint="one weight per query and key: (..., L, S).",
            cause=_nan_cause,
            dtype=True,
        ),
        Out(
            "the results",
            0,
            shape_hint="one blend per query: (..., L, Ev).",
            fallback="the weights are right, so look at the last step: each result is the "
            "average of the values with its row of weights.",
        ),
    ],
    crash="query (..., L, E) against keys (..., S, E) gives (..., L, S) matches; the weights "
    "(..., L, S) then mix the values (..., S, Ev). Only the keys' last two axes are swapped.",
)
check_soft_lookup = exercise(
    "soft_lookup",
    "00",
    reference=soft_lookup,
    todo="Replace `raise NotImplementedError` with the lookup: the matches, the weights, the blend.",
    table=SOFT_LOOKUP,
)
