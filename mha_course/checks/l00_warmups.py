"""Lesson 00's warm-ups: a stable softmax, and the soft lookup, the idea behind attention (every
query against every key, a softmax, the values' weighted average); both take leading axes."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import families
from ._core import exercise
from ._table import Case, Out, Table, pair, reverse_axes, seeded_randn


def _softmax_cases():
    randn, inf = seeded_randn(0), float("-inf")
    yield Case("a vector of 5 scores", (randn(5),))
    yield Case("a (3, 4) matrix: one softmax per row", (randn(3, 4),))
    yield Case("a batch (2, 3, 4)", (randn(2, 3, 4),))
    yield Case("huge scores (up to 1000)", (torch.tensor([[1000.0, 999.0, 0.0], [-5, 0, 5]]),))
    negative = torch.tensor([[-1000.0, -1001, -1002], [1, 2, 3]])
    yield Case("hugely negative scores (a row of -1000, -1001, -1002)", (negative,))
    yield Case("-inf scores (masked keys) get weight 0", (torch.tensor([[0.5, inf, 1.0, inf]]),))


def _shifted(s, max_axis=-1, sum_axis=-1):
    e = (s - s.amax(dim=max_axis, keepdim=True)).exp()
    return e / e.sum(dim=sum_axis, keepdim=True)


_SAME_SHAPE = "softmax keeps the shape of the scores; a sum that drops its axis changes it."
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


_SOFTMAX_RUNS = {
    "wrong axis": lambda s: torch.softmax(s, dim=0),
    "max subtracted, summed over the first axis": lambda s: _shifted(s, sum_axis=0),
    "each column's max subtracted": lambda s: _shifted(s, max_axis=0),
    "not normalised": lambda s: s.exp(),
    "sum over everything": lambda s: s.exp() / s.exp().sum(),
    "row sums lost their axis": lambda s: s.exp() / s.exp().sum(dim=-1),
}
_SOFTMAX_FLAWS = {
    "wrong axis": "you normalised over the first axis; softmax goes over the last one, so that "
    "each row sums to 1.",
    "max subtracted, summed over the first axis": "subtracting each row's max is right, but the "
    f"sums are taken down the columns: {_ROWS}.",
    "each column's max subtracted": "you subtracted each column's max, a different number in "
    "every column of a row, which changes the row's softmax; subtract each row's own max.",
    "not normalised": f"you took the exponentials but did not divide by their sum: {_ROWS}.",
    "sum over everything": f"you divided by the sum of the whole tensor: {_ROWS}.",
    "row sums lost their axis": "the row sums lost their axis, so they broadcast against the "
    "columns instead of the rows: a row's sum must keep a length-1 axis to line up with its row.",
}
SOFTMAX = Table(
    cases=_softmax_cases,
    reference=lambda s: torch.softmax(s, dim=-1),
    mistakes=families.mistakes(_SOFTMAX_RUNS.get, _SOFTMAX_FLAWS, **_SOFTMAX_FLAWS),
    outputs=[Out("the weights", None, _SAME_SHAPE, _nan_in_softmax)],
    crash="a shape mix-up: a row's max and a row's sum must keep a length-1 last axis, shape "
    "(..., 1), to line up with the rows.",
)
todo = "Replace `raise NotImplementedError` with your softmax over the last axis."
check_softmax = exercise("softmax", "00", reference=SOFTMAX.reference, todo=todo, table=SOFTMAX)


def soft_lookup(query, keys, values, temperature=1.0):
    """The reference: ``(result (..., L, Ev), weights (..., L, S))``, weights = softmax(query · key
    / temperature) over the keys (temperature 0: equal shares for the best-matching keys), result =
    weights @ values; a negative temperature, or sizes that do not pair up, raise ValueError."""
    (E, E_k), (S, S_v) = (query.size(-1), keys.size(-1)), (keys.size(-2), values.size(-2))
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")
    if E != E_k:
        raise ValueError(f"query and keys need the same size E: query has E={E}, keys E={E_k}")
    if S != S_v:
        raise ValueError(f"one value per key: keys have S={S}, values S={S_v}")
    return _lookup()(query, keys, values, temperature)


_SOFT = {  # (matches s, temperature t) -> the weights of a softmax gone wrong, at any t
    "temperature ignored": lambda s, t: torch.softmax(s, dim=-1),
    "multiplied by the temperature": lambda s, t: torch.softmax(s * t, dim=-1),
    "1 / temperature": lambda s, t: torch.softmax(s * (1 / t), dim=-1),
}
_HARD = {  # matches s -> the weights at temperature 0, right and wrong
    "": lambda s: (b := s == s.amax(-1, keepdim=True)).to(s.dtype) / b.sum(-1, keepdim=True),
    "the first best key only": lambda s: F.one_hot(s.argmax(-1), s.size(-1)).to(s.dtype),
    "tied keys not shared": lambda s: (s == s.amax(-1, keepdim=True)).to(s.dtype),
    "shares in float32": lambda s: (b := s == s.amax(-1, keepdim=True)) / b.sum(-1, keepdim=True),
}


def _lookup(flaw=""):
    """The soft lookup, unchecked, with ``flaw`` switched on."""

    def lookup(query, keys, values, temperature=1.0):
        s, t = query @ (reverse_axes(keys) if flaw == "keys.T on a batch" else keys.mT), temperature
        if flaw in _SOFT:
            weights = _SOFT[flaw](s, t)
        elif t == 0:
            weights = _HARD.get(flaw, _HARD[""])(s)
        else:
            weights = torch.softmax(s / t, dim=-2 if flaw == "softmax over the queries" else -1)
        if flaw == "plain mean":
            return values.mean(dim=-2, keepdim=True).expand(*s.shape[:-1], values.size(-1)), weights
        return (weights.mT if flaw == "transposed weights" else weights) @ values, weights

    return lookup


_AT_ZERO = (
    "at temperature 0 there is nothing to divide by. It stands for the limit of ever smaller "
    "temperatures: handle it on its own. Which keys get the weight then?"
)
_LOOKUP_FLAWS = {
    "temperature ignored": "the temperature is ignored: the matches are divided by it before the "
    "softmax (a high temperature blends the values, a low one picks the best match).",
    "multiplied by the temperature": "you multiplied the matches by the temperature; a high "
    "temperature must blend the values evenly, a low one pick the best match.",
    "softmax over the queries": "the softmax runs over the queries: each query's weights must sum "
    "to 1 over the keys, the last axis.",
    "the first best key only": "a tie at temperature 0: when several keys match best, they share "
    "the weight equally (that is the limit of the softmax), not the first of them alone.",
    "tied keys not shared": "at temperature 0 each row of weights must still sum to 1: the "
    "best-matching keys share it equally (two tied keys get 1/2 each).",
    "shares in float32": "True/False divided by a count is float32, whatever the inputs' dtype: "
    "make the shares in the scores' dtype before you divide.",
    "1 / temperature": _AT_ZERO,
    "keys.T on a batch": "the T attribute reverses every axis of batched keys; only their last two "
    "are swapped.",
    "transposed weights": "result row i mixes the values with row i of the weights, not with a "
    "column of them.",
    "plain mean": "every result is the plain mean of the values: value j counts with its weight.",
}


def _lookup_cases():
    randn = seeded_randn(13)

    def whole(*shape):  # small whole numbers: exact dot products, so ties are ties in every style
        return randn(*shape).mul(1.2).round().clamp(-2, 2)

    example = (torch.tensor([[2.0, 0.0]]), torch.eye(2), torch.tensor([[10.0], [20.0]]))
    tied_keys = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [-1.0, 0.0]])
    yield Case("the docstring's example, temperature 1", (*example, 1.0))
    yield Case("the docstring's example, temperature 0: a hard lookup", (*example, 0.0))
    name = "3 queries, 5 keys (E = 4), values of size 3, the default temperature"
    yield Case(name, (randn(3, 4), randn(5, 4), randn(5, 3)))
    name = "a batch: query (2, 3, 4), keys (2, 5, 4), values (2, 5, 6), temperature 0.5"
    yield Case(name, (randn(2, 3, 4), randn(2, 5, 4), randn(2, 5, 6), 0.5))
    name = "two leading axes: query (2, 2, 3, 4), keys (2, 2, 4, 4), values (2, 2, 4, 2), "
    name += "temperature 3"
    yield Case(name, (randn(2, 2, 3, 4), randn(2, 2, 4, 4), randn(2, 2, 4, 2), 3.0))
    name = "temperature 0 with a tie: keys 0 and 2 are equal and match query 0 best"
    yield Case(name, (torch.tensor([[3.0, 1.0], [0.0, 2.0]]), tied_keys, randn(4, 3), 0.0))
    name = "temperature 0, a batch of whole numbers (2, 4, 3), (2, 6, 3), (2, 6, 2)"
    yield Case(name, (whole(2, 4, 3), whole(2, 6, 3), randn(2, 6, 2), 0.0))
    name = "huge matches (query × 300), temperature 1: needs a stable softmax"
    yield Case(name, (300 * randn(3, 4), randn(5, 4), randn(5, 2), 1.0))
    yield Case("a small temperature, 0.01", (randn(3, 4), randn(5, 4), randn(5, 2), 0.01))
    ties = (whole(3, 2).double(), whole(5, 2).double(), randn(5, 3).double(), 0.0)
    yield Case("float64, temperature 0 with ties", ties)
    why = "a negative temperature turns the lookup upside down (the worst match would weigh most)"
    bad = randn(2, 4), randn(3, 4), randn(3, 2), -1.0
    yield Case("temperature -1", bad, raises=("temperature",), why=why)
    why = "a query of size 4 cannot be compared with keys of size 3"
    bad = randn(2, 4), randn(3, 3), randn(3, 2), 1.0
    name = "query (2, 4) and keys (3, 3): their sizes E differ"
    yield Case(name, bad, raises=("query", "key"), why=why)
    bad = randn(2, 4), randn(3, 4), randn(4, 2), 1.0
    why = "a dictionary has one value per key"
    yield Case("3 keys and 4 values", bad, raises=("key", "value"), why=why)


def _nan_cause(got, case: Case) -> str | None:
    if not (torch.isnan(got).any() or torch.isinf(got).any()):
        return None
    if (case.args[3:] or (1.0,))[0] == 0:
        return f"dividing by a temperature of 0 gives ±inf, whose softmax is NaN. {_AT_ZERO}"
    return "exp overflowed (inf/inf is NaN): subtract each row's max first, as your softmax does."


_LAST_STEP = (
    "the weights are right, so look at the last step: each result is the average of the values "
    "with its row of weights."
)
SOFT_LOOKUP = Table(
    cases=_lookup_cases,
    reference=soft_lookup,
    double=False,
    mistakes=families.mistakes(_lookup, _LOOKUP_FLAWS, **_LOOKUP_FLAWS),
    shape_checks=[pair("result", "weights")],
    outputs=[
        Out("the weights", 1, "one weight per query and key: (..., L, S).", _nan_cause, dtype=True),
        Out("the results", 0, "one blend per query: (..., L, Ev).", fallback=_LAST_STEP),
    ],
    crash="query (..., L, E) against keys (..., S, E) gives (..., L, S) matches; the weights "
    "(..., L, S) then mix the values (..., S, Ev). Only the keys' last two axes are swapped.",
)
todo = "Replace `raise NotImplementedError` with the lookup: the matches, the weights, the blend."
check_soft_lookup = exercise(
    "soft_lookup", "00", reference=soft_lookup, todo=todo, table=SOFT_LOOKUP
)
