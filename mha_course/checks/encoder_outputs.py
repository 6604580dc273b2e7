"""Checkers for lesson 05's two readings of a pretrained encoder's outputs: how much a head attends
to the previous token, and a sentence's embedding as the mean of its real tokens."""

from __future__ import annotations

import torch

from .. import reference
from ._core import Mistake, checker
from ._steps import check_cases, randn

__all__ = ["check_previous_token_score", "check_mean_pool"]


# ---------------------------------------------------------------- previous_token_score

_BELOW = "torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)"


def _diagonal(w: torch.Tensor, offset: int) -> torch.Tensor:
    return torch.diagonal(w, offset=offset, dim1=-2, dim2=-1)


def _wrapped(w: torch.Tensor) -> torch.Tensor:
    """w[..., i, i - 1] for every i, query 0 included: index -1 wraps round to the last key."""
    i = torch.arange(w.size(-1))
    return w[..., i, i - 1].mean(-1)


_PREVIOUS_MISTAKES = [
    Mistake(
        "query 0 included",
        _wrapped,
        "you included query 0, whose 'previous token' wrapped round to the last key (index -1, "
        "or torch.roll). Only queries 1 … L−1 have one: weights[..., i, i − 1] for i ≥ 1, "
        f"{_BELOW}.",
    ),
    Mistake(
        "divided by L",
        lambda w: _diagonal(w, -1).sum(-1) / w.size(-1),
        "you divided by L, but only L − 1 queries have a previous token; average over those: "
        f"{_BELOW}.",
    ),
    Mistake(
        "next token, or rows and columns swapped",
        lambda w: _diagonal(w, 1).mean(-1),
        "you read the entries just above the diagonal: weights[..., i, i + 1] (the next token), "
        "or weights[..., i − 1, i] with rows and columns swapped. Rows are queries and columns "
        f"keys, so query i's previous token is weights[..., i, i − 1]: {_BELOW}.",
    ),
    Mistake(
        "sum",
        lambda w: _diagonal(w, -1).sum(-1),
        f"you summed; the score is the average over the L − 1 queries: {_BELOW}.",
    ),
    Mistake(
        "the diagonal",
        lambda w: _diagonal(w, 0).mean(-1),
        "that is the main diagonal, each query's attention to itself; the previous token is one "
        f"column to the left, offset=-1: {_BELOW}.",
    ),
    Mistake(
        "diagonal of the first two axes",
        lambda w: torch.diagonal(w, offset=-1).mean(-1),
        "torch.diagonal takes the first two axes unless told otherwise: pass dim1=-2, dim2=-1 so "
        f"that it runs over the queries and the keys: {_BELOW}.",
    ),
    Mistake(
        "mean over everything",
        lambda w: _diagonal(w, -1).mean(),
        "you averaged over the heads too; keep one score per head and average over the queries "
        f"only, dim=-1: {_BELOW}.",
    ),
    Mistake(
        ".item()",
        lambda w: _diagonal(w, -1).mean(-1).item(),
        ".item() turns a tensor of one number into a Python number, and fails on more: keep the "
        f"tensor, one score per head: {_BELOW}.",
    ),
    Mistake(
        "mean over the first axis",
        lambda w: _diagonal(w, -1).mean(0),
        "you averaged over the first axis (the heads or the batch); average over the queries, "
        f"the last axis of the diagonal: {_BELOW}.",
    ),
]


def _weights(g, *shape, dtype=torch.float32):
    """Random attention weights: each row (a query) sums to 1 over the keys."""
    e = (2 * randn(g, *shape, dtype=dtype)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def _previous_cases():
    g = torch.Generator().manual_seed(50)
    yield "3 heads: weights (3, 6, 6) -> (3,)", _weights(g, 3, 6, 6)
    yield "one head: weights (5, 5) -> a 0-dim tensor", _weights(g, 5, 5)
    yield "a batch of 4 heads: weights (2, 4, 5, 5) -> (2, 4)", _weights(g, 2, 4, 5, 5)
    perfect = torch.eye(4).roll(-1, dims=-1)  # query i on key i - 1 ...
    perfect[0] = torch.tensor(
        [1.0, 0.0, 0.0, 0.0]
    )  # ... and query 0, with no previous token, on itself
    yield "a perfect previous-token head (4, 4): the score is 1", perfect
    yield "L = 2: weights (3, 2, 2), one query has a previous token", _weights(g, 3, 2, 2)
    yield "float64: weights (2, 7, 7)", _weights(g, 2, 7, 7, dtype=torch.float64)


@checker(
    "previous_token_score",
    "Replace `raise NotImplementedError` with the average of weights[..., i, i − 1] over i = 1 … L−1.",
)
def check_previous_token_score(candidate) -> int:
    """Check ``candidate(weights (..., L, L)) -> (...)``: the mean of weights[..., i, i − 1]."""
    return check_cases(
        candidate,
        _previous_cases(),
        reference.previous_token_score,
        _PREVIOUS_MISTAKES,
        what="the scores",
        crash_hint="take L from the weights (L = weights.size(-1)); the entries "
        f"weights[..., i, i − 1] are the diagonal below the main one: {_BELOW}.",
        shape_hint="one score per head: the weights' leading axes, weights.shape[:-2]; "
        f"average over the queries only: {_BELOW}.",
        fallback_cause=f"the score is the mean of weights[..., i, i − 1] for i = 1 … L−1: {_BELOW}.",
    )


# ---------------------------------------------------------------- mean_pool

_POOL = "(hidden * m).sum(dim=1) / m.sum(dim=1), with m = attention_mask[..., None]"


def _masked_sum(hidden, mask):
    return (hidden * mask[..., None]).sum(1)


_POOL_MISTAKES = [
    Mistake(
        "every position",
        lambda h, m: h.mean(1),
        f"you averaged over every position, the padding too; average the real tokens only: {_POOL}.",
    ),
    Mistake(
        "sum, not divided",
        _masked_sum,
        "you summed the real tokens but did not divide by their number, "
        "attention_mask.sum(dim=1, keepdim=True).",
    ),
    Mistake(
        "divided by L",
        lambda h, m: _masked_sum(h, m) / h.size(1),
        "you divided by L, the padded length; divide by each sentence's number of real tokens, "
        "attention_mask.sum(dim=1, keepdim=True).",
    ),
    Mistake(
        "over the batch axis",
        lambda h, m: (h * m[..., None]).sum(0) / m.sum(0)[:, None],
        "you averaged over the batch axis (dim=0); a sentence's vector is the mean over its "
        f"tokens, dim=1: {_POOL}.",
    ),
    Mistake(
        "over the batch axis, unmasked",
        lambda h, m: h.mean(0),
        "you averaged over the batch axis (dim=0); a sentence's vector is the mean over its "
        f"real tokens, dim=1: {_POOL}.",
    ),
    Mistake(
        "mask not broadcast",
        lambda h, m: (h * m).sum(1),
        "the mask (B, L) needs a features axis to multiply hidden (B, L, E): "
        "attention_mask[..., None] (or .unsqueeze(-1)) is (B, L, 1).",
    ),
    Mistake(
        "counts without keepdim",
        lambda h, m: _masked_sum(h, m) / m.sum(1),
        "the counts m.sum(dim=1) are (B,); they need keepdim=True (or [:, None]) to divide "
        "the sums (B, E) row by row.",
    ),
]


def _pool_cases():
    g = torch.Generator().manual_seed(51)

    def hidden(B, L, E, mask, dtype=torch.float32):
        """Random states, with large values at the padding, so that counting it shows."""
        h = randn(g, B, L, E, dtype=dtype)
        return torch.where(mask[..., None].bool(), h, 10 + h)

    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    yield "hidden (2, 5, 4); sentence 2 has 2 pad tokens", hidden(2, 5, 4, mask), mask
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
    yield "3 sentences of 4, 1 and 2 tokens: hidden (3, 4, 6)", hidden(3, 4, 6, mask), mask
    mask = torch.ones(1, 3, dtype=torch.long)
    yield "one sentence, no padding: hidden (1, 3, 5)", hidden(1, 3, 5, mask), mask
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    yield "a float mask of 1.0 and 0.0: hidden (2, 3, 2)", hidden(2, 3, 2, mask), mask
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=torch.int32)
    yield (
        "float64 hidden (2, 6, 3), an int32 mask",
        hidden(2, 6, 3, mask, dtype=torch.float64),
        mask,
    )


@checker(
    "mean_pool",
    "Replace `raise NotImplementedError` with the mean of each sentence's real tokens.",
)
def check_mean_pool(candidate) -> int:
    """Check ``candidate(hidden (B, L, E), attention_mask (B, L) of 1/0) -> (B, E)``."""
    return check_cases(
        candidate,
        _pool_cases(),
        reference.mean_pool,
        _POOL_MISTAKES,
        what="the sentence vectors",
        crash_hint="hidden is (B, L, E) and the mask (B, L): give the mask a features axis, "
        f"{_POOL}.",
        shape_hint=f"one vector per sentence, (B, E): {_POOL}.",
        dtype_hint="the result keeps hidden's dtype; convert the mask to it "
        "(attention_mask.to(hidden.dtype)), not hidden to the mask's.",
        fallback_cause=f"sum each sentence's real tokens and divide by their number: {_POOL}.",
    )
