"""Checkers for lesson 01's steps: the scaled scores, the two masks every model builds, and the
mask that combines them for a padded batch.

Masks here are bool and True where a query **may attend**, the convention of
``torch.nn.functional.scaled_dot_product_attention`` and of the course's exercises.
"""

from __future__ import annotations

import math

import torch

from .. import reference
from ._core import Mistake, checker
from ._steps import check_cases, randn, reverse_axes

__all__ = [
    "check_attention_scores",
    "check_padding_mask",
    "check_causal_mask",
    "check_may_attend_mask",
]


# ---------------------------------------------------------------- attention_scores

_QK = "query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))"


def _scaled(scale):
    """Q Kᵀ times ``scale(d_k, L, S)``."""
    return lambda q, k: (q @ k.transpose(-2, -1)) * scale(q.size(-1), q.size(-2), k.size(-2))


_SCORE_MISTAKES = [
    Mistake(
        "no scale",
        _scaled(lambda d, L, S: 1.0),
        f"the scores are not scaled: divide Q Kᵀ by √d_k, with d_k = query.size(-1): {_QK}.",
    ),
    Mistake(
        "divided by d_k",
        _scaled(lambda d, L, S: 1 / d),
        "you divided by d_k; divide by its square root, math.sqrt(query.size(-1)).",
    ),
    Mistake(
        "multiplied by sqrt(d_k)",
        _scaled(lambda d, L, S: math.sqrt(d)),
        "you multiplied by √d_k; divide by it instead.",
    ),
    Mistake(
        "divided by sqrt(S)",
        _scaled(lambda d, L, S: 1 / math.sqrt(S)),
        "you divided by √S, the square root of the number of keys; the scale is √d_k, the size "
        "of each query and key vector: math.sqrt(query.size(-1)).",
    ),
    Mistake(
        "K Qᵀ",
        lambda q, k: k @ q.transpose(-2, -1) / math.sqrt(q.size(-1)),
        f"the scores are transposed: rows are queries and columns keys, so Q Kᵀ: {_QK}.",
    ),
    Mistake(
        "key.T on a batch",
        lambda q, k: q @ reverse_axes(k) / math.sqrt(q.size(-1)),
        "key.T reverses *every* axis of a batched tensor; swap only the last two: "
        "key.transpose(-2, -1), or key.mT.",
    ),
    Mistake(
        "2-D only: key.t()",
        lambda q, k: q @ k.t() / math.sqrt(q.size(-1)),
        "key.t() works on 2-D matrices only; the inputs may have leading batch and head axes: "
        "key.transpose(-2, -1), or key.mT.",
    ),
    Mistake(
        "softmax applied",
        lambda q, k: torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1),
        "you applied the softmax: attention_scores stops before it, at the scaled scores "
        f"{_QK}. The softmax turns them into weights in the next step.",
    ),
]


def _scale_hint(got: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> str | None:
    """When ``got`` is s · Q Kᵀ for some other s, say what s is (a notebook-global d_k shows here)."""
    raw = (q.double() @ k.double().transpose(-2, -1)).flatten()
    g = got.detach().double().flatten()
    s = float((g @ raw) / (raw @ raw))
    if not math.isfinite(s) or s <= 0 or (g - s * raw).abs().max() > 1e-3 * (1 + g.abs().max()):
        return None
    d_k = q.size(-1)
    n = round(1 / s**2)
    if n > 0 and n != d_k and math.isclose(s, n**-0.5, rel_tol=1e-3):
        return (
            f"your scores are Q Kᵀ / √{n}, but here d_k = {d_k}: did you use a fixed d_k, such as "
            f"a variable of the notebook? Take it from the inputs: d_k = query.size(-1)."
        )
    return f"your scores are {s:.4g} · Q Kᵀ; the scale is 1/√d_k = {d_k**-0.5:.4g} (d_k = {d_k})."


def _score_cases():
    g = torch.Generator().manual_seed(12)
    yield "query (4, 8), key (6, 8): d_k = 8", randn(g, 4, 8), randn(g, 6, 8)
    yield "a batch: query (2, 4, 8), key (2, 6, 8)", randn(g, 2, 4, 8), randn(g, 2, 6, 8)
    yield (
        "batch and heads: query (2, 3, 4, 16), key (2, 3, 5, 16): d_k = 16",
        randn(g, 2, 3, 4, 16),
        randn(g, 2, 3, 5, 16),
    )
    yield "d_k = 5: query (3, 5), key (7, 5)", randn(g, 3, 5), randn(g, 7, 5)
    yield "L = S: query (4, 6), key (4, 6)", randn(g, 4, 6), randn(g, 4, 6)
    yield (
        "float64: query (2, 3), key (5, 3)",
        randn(g, 2, 3, dtype=torch.float64),
        randn(g, 5, 3, dtype=torch.float64),
    )
    yield "one query: query (1, 4), key (3, 4)", randn(g, 1, 4), randn(g, 3, 4)


@checker(
    "attention_scores",
    "Replace `raise NotImplementedError` with Q Kᵀ divided by √d_k.",
)
def check_attention_scores(candidate) -> int:
    """Check ``candidate(query (..., L, E), key (..., S, E)) -> (..., L, S)`` = Q Kᵀ / √d_k."""
    return check_cases(
        candidate,
        _score_cases(),
        reference.attention_scores,
        _SCORE_MISTAKES,
        what="the scores",
        crash_hint="the inputs may have leading batch and head axes: transpose only the "
        f"last two axes of key, {_QK}.",
        shape_hint=f"one score per query and key, (..., L, S): {_QK}.",
        fallback_cause=_scale_hint,
    )


# ---------------------------------------------------------------- padding_mask

_POSITIONS = "torch.arange(S) < lengths[:, None]"

_PADDING_MISTAKES = [
    Mistake(
        "inverted",
        lambda lengths, S: torch.arange(S) >= lengths[:, None],
        "your mask is inverted: True marks the real tokens, position j < lengths[b] (True = may "
        "attend, as in torch.nn.functional.scaled_dot_product_attention), and the padding is "
        f"False: {_POSITIONS}.",
    ),
    Mistake(
        "<=",
        lambda lengths, S: torch.arange(S) <= lengths[:, None],
        "one position too many is marked real: positions count from 0, so a sentence of length 3 "
        f"holds positions 0, 1, 2. Use <, not <=: {_POSITIONS}.",
    ),
    Mistake(
        "one too few",
        lambda lengths, S: torch.arange(S) < lengths[:, None] - 1,
        f"one real token too few is marked: position j is real when j < lengths[b]: {_POSITIONS}.",
    ),
    Mistake(
        "(S, B)",
        lambda lengths, S: torch.arange(S)[:, None] < lengths[None, :],
        "your mask is (S, B), transposed: one row per sentence and one column per position, "
        f"{_POSITIONS} -> (B, S).",
    ),
    Mistake(
        "no new axis",
        lambda lengths, S: torch.arange(S) < lengths,
        "lengths needs an axis of its own to meet every position: lengths[:, None] is (B, 1), "
        f"and against torch.arange(S), (S,), it broadcasts to (B, S): {_POSITIONS}.",
    ),
    Mistake(
        "the first length for all",
        lambda lengths, S: (torch.arange(S) < lengths[0]).expand(len(lengths), S),
        "every row uses the first sentence's length; compare each row with its own length: "
        f"{_POSITIONS}.",
    ),
]


def _padding_cases():
    yield "lengths [3, 5, 1], S = 5", torch.tensor([3, 5, 1]), 5
    yield "B = S: lengths [1, 3, 2], S = 3", torch.tensor([1, 3, 2]), 3
    yield "a length of 0 and a full one: lengths [0, 4], S = 4", torch.tensor([0, 4]), 4
    yield "one sentence: lengths [2], S = 6", torch.tensor([2]), 6
    yield "lengths of dtype int32: [2, 1], S = 3", torch.tensor([2, 1], dtype=torch.int32), 3


@checker(
    "padding_mask",
    "Replace `raise NotImplementedError` with a comparison of the positions 0..S-1 with each length.",
)
def check_padding_mask(candidate) -> int:
    """Check ``candidate(lengths (B,), S) -> bool (B, S)``, True where position j < lengths[b]."""
    return check_cases(
        candidate,
        _padding_cases(),
        reference.padding_mask,
        _PADDING_MISTAKES,
        what="the mask's entries",
        crash_hint=f"one row per sentence, one column per position: {_POSITIONS} compares a "
        "column of lengths (B, 1) with a row of positions (S,).",
        shape_hint=f"the mask is (B, S), one row per sentence: {_POSITIONS}.",
        dtype_hint=f"a comparison such as {_POSITIONS} is already bool: drop the .int() or "
        ".float(), or end with .bool().",
        fallback_cause=f"position j of sentence b is real (True) when j < lengths[b]: {_POSITIONS}.",
    )


# ---------------------------------------------------------------- causal_mask

_TRIL = "torch.ones(L, L, dtype=torch.bool).tril()"

_CAUSAL_MISTAKES = [
    Mistake(
        "triu",
        lambda L: torch.ones(L, L, dtype=torch.bool).triu(),
        "your mask lets each query see the future: True goes where key j <= query i (itself and "
        f"the past), the lower triangle, tril: {_TRIL}. triu is the upper one.",
    ),
    Mistake(
        "inverted",
        lambda L: torch.ones(L, L, dtype=torch.bool).triu(1),
        "your mask is inverted: True = masked out is torch.nn.MultiheadAttention's convention; "
        "here True means may attend (as in torch.nn.functional.scaled_dot_product_attention), "
        f"keys j <= i: {_TRIL}.",
    ),
    Mistake(
        "tril(-1)",
        lambda L: torch.ones(L, L, dtype=torch.bool).tril(-1),
        "the diagonal is missing: a query may attend to itself (j <= i, not j < i): tril() with "
        "its default diagonal=0, not tril(-1).",
    ),
    Mistake(
        "all True",
        lambda L: torch.ones(L, L, dtype=torch.bool),
        f"nothing is masked: keep the lower triangle, key j <= query i: {_TRIL}.",
    ),
]


def _causal_dtype_hint(got: torch.Tensor, L: int) -> str:
    if got.is_floating_point() and got.isneginf().any():
        return (
            "you built the additive float mask (0 and -inf), which torch also accepts; this "
            f"exercise returns the bool one, True where key j <= query i: {_TRIL}."
        )
    made = "torch.ones(L, L) is float" if got.is_floating_point() else f"the mask is {got.dtype}"
    return f"{made}: ask for bool, {_TRIL}, or end with .bool()."


@checker(
    "causal_mask",
    "Replace `raise NotImplementedError` with the lower triangle of an (L, L) bool tensor of True.",
)
def check_causal_mask(candidate) -> int:
    """Check ``candidate(L) -> bool (L, L)``, True where key j <= query i."""
    return check_cases(
        candidate,
        ((f"L = {L}", L) for L in (4, 1, 2, 7)),
        reference.causal_mask,
        _CAUSAL_MISTAKES,
        what="the mask's entries",
        shape_hint=f"the mask is (L, L), queries by keys: {_TRIL}.",
        dtype_hint=_causal_dtype_hint,
        fallback_cause=f"True where key j <= query i: {_TRIL}.",
    )


# ---------------------------------------------------------------- may_attend_mask


def _combined(causal_part, padding_part, combine=lambda a, b: a & b):
    """A may-attend mask built from ``causal_part(S)`` (or all True) and ``padding_part(lengths,
    S)`` (B, S, S), with one flaw at most."""

    def mask(S, lengths=None, causal=False):
        m = causal_part(S) if causal else torch.ones(S, S, dtype=torch.bool)
        return m if lengths is None else combine(m, padding_part(lengths, S))

    return mask


def _keys(lengths, S):  # right: a pad key is blocked for every query
    return (torch.arange(S) < lengths[:, None])[:, None, :]


def _tril(S):
    return torch.ones(S, S, dtype=torch.bool).tril()


_MAY_ATTEND = "True where key j is a real token (j < lengths[b]) and, when causal, j <= i"

_MAY_ATTEND_MISTAKES = [
    Mistake(
        "causal upper triangle",
        _combined(lambda S: torch.ones(S, S, dtype=torch.bool).triu(), _keys),
        "the causal part lets each query see the future: keys j <= i (itself and the past) is the "
        "lower triangle, diagonal included.",
    ),
    Mistake(
        "causal inverted",
        _combined(lambda S: torch.ones(S, S, dtype=torch.bool).triu(1), _keys),
        "the causal part is inverted (True = masked out is torch.nn.MultiheadAttention's "
        "convention); here True means may attend: keys j <= i.",
    ),
    Mistake(
        "causal without the diagonal",
        _combined(lambda S: torch.ones(S, S, dtype=torch.bool).tril(-1), _keys),
        "the diagonal is missing: a query may attend to itself (j <= i, not j < i).",
    ),
    Mistake(
        "causal ignored",
        _combined(lambda S: torch.ones(S, S, dtype=torch.bool), _keys),
        "causal=True is ignored: query i may attend to keys j <= i only.",
    ),
    Mistake(
        "padding inverted",
        _combined(_tril, lambda lengths, S: (torch.arange(S) >= lengths[:, None])[:, None, :]),
        "the padding part is inverted: the real tokens (j < lengths[b]) may be attended to, "
        "the pads may not.",
    ),
    Mistake(
        "padding <=",
        _combined(_tril, lambda lengths, S: (torch.arange(S) <= lengths[:, None])[:, None, :]),
        "one key too many is real: positions count from 0, so a sentence of length 3 holds "
        "positions 0, 1, 2 (j < lengths[b], not <=).",
    ),
    Mistake(
        "padding on queries and keys",
        _combined(
            _tril,
            lambda lengths, S: _keys(lengths, S) & (torch.arange(S) < lengths[:, None])[:, :, None],
        ),
        "you blocked the pads' own rows (their queries). Only the keys are masked: no query may "
        "attend to a pad (its column is False), while a pad's own row is computed and ignored "
        "later, as with torch's key_padding_mask.",
    ),
    Mistake(
        "padding ignored",
        _combined(_tril, lambda lengths, S: torch.ones(len(lengths), 1, S, dtype=torch.bool)),
        "the lengths are ignored: key j of sentence b is real only when j < lengths[b].",
    ),
    Mistake(
        "or instead of and",
        _combined(_tril, _keys, combine=lambda a, b: a | b),
        "the two parts are combined with 'or': a pair is allowed only when both allow it (&).",
    ),
]


def _may_attend_shape_hint(got, S, lengths, causal) -> str:
    if lengths is not None and isinstance(got, torch.Tensor):
        if tuple(got.shape) == (len(lengths), 1, S):
            return (
                "your mask is (B, 1, S): right for padding alone, but this exercise returns one "
                "row per query, (B, S, S), so that the causal part fits in too."
            )
        if tuple(got.shape) == (len(lengths), S):
            return "one row per query: (B, S, S), not (B, S)."
    return f"(S, S) without lengths, (B, S, S) with lengths: {_MAY_ATTEND}."


def _may_attend_cases():
    yield "S = 4, no lengths, not causal: every pair is allowed", 4, None, False
    yield "S = 4, causal=True", 4, None, True
    yield "lengths [4, 2], S = 4, causal=True", 4, torch.tensor([4, 2]), True
    yield "lengths [3, 5, 1], S = 5", 5, torch.tensor([3, 5, 1]), False
    yield "B = S: lengths [1, 3, 2], S = 3, causal=True", 3, torch.tensor([1, 3, 2]), True
    yield "a length of 0: lengths [0, 3], S = 3", 3, torch.tensor([0, 3]), False
    yield "lengths of dtype int32: [2, 1], S = 3", 3, torch.tensor([2, 1], dtype=torch.int32), False


@checker(
    "may_attend_mask",
    "Replace `raise NotImplementedError` with the mask: which keys may each query attend to?",
)
def check_may_attend_mask(candidate) -> int:
    """Check ``candidate(S, lengths=None, causal=False)`` -> bool (S, S), or (B, S, S) with
    lengths: True where key j is real (j < lengths[b]) and, when causal, j <= i."""

    def called(S, lengths, causal):
        return candidate(S, lengths=lengths, causal=causal)

    return check_cases(
        called,
        _may_attend_cases(),
        reference.may_attend_mask,
        _MAY_ATTEND_MISTAKES,
        what="the mask's entries",
        crash_hint="the padding part has one row per sentence and one column per key, (B, 1, S); "
        "it broadcasts against the (S, S) causal part to (B, S, S).",
        shape_hint=_may_attend_shape_hint,
        dtype_hint="a comparison is already bool, and & of bools is bool: drop the .int() or "
        ".float(), or end with .bool().",
        fallback_cause=f"{_MAY_ATTEND}.",
    )
