"""The classic mistakes that recur from exercise to exercise, built once.

Attention is the same computation in lessons 01 to 09: scores Q Kᵀ, a scale, a mask, a softmax
over the keys, a weighted sum of the values. :func:`attention` computes it right, or with one
*flaw* switched on (its name, a key of :data:`ATTENTION`); an exercise whose answer runs
attention inside (self-attention, multi-head attention, a KV cache, grouped queries) writes its
reference once with a ``flaw`` argument handed down to :func:`attention`, and
:func:`mistakes` turns it into the classic wrong answers with their explanations.

The other families are the same idea for their steps: the heads' split and merge
(:data:`HEADS`), causal masks (:data:`CAUSAL`), LayerNorm (:data:`NORM`).

Every explanation names the cause and where to look, in the lesson's words (Q Kᵀ, d_k, the
keys' axis), never the corrected line of code.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import torch

from ._core import Mistake

__all__ = [
    "ATTENTION",
    "MASK",
    "CAUSAL",
    "HEADS",
    "NORM",
    "attention",
    "causal",
    "split_heads",
    "merge_heads",
    "layer_norm",
    "mistakes",
]

ATTENTION = {
    "no scale": "the scores are not scaled: between Q Kᵀ and the softmax they are multiplied by "
    "1/√d_k, d_k being the size of one query (and key) vector.",
    "divided by d_k": "the scores are divided by d_k itself; the scale is one over its square "
    "root.",
    "multiplied by √d_k": "the scores are multiplied by √d_k; the scale divides by it.",
    "scaled by the values' size": "the scale uses the size of the values; it uses d_k, the size "
    "of the queries and keys.",
    "scaled by √d_model": "the scores are scaled by √d_model, the size of the whole embedding; "
    "each head's scores are scaled by the size of its own queries, d_k = d_model / h.",
    "softmax over the queries": "the weights sum to 1 down each column, over the queries; each "
    "query's row must sum to 1 over the keys. Look at the axis your softmax runs over.",
    "no softmax": "the scores are used as weights without a softmax: a query's weights must be "
    "positive and sum to 1.",
    "scores transposed": "the scores are transposed: rows belong to the queries and columns to "
    "the keys.",
    "keys as values": "the output mixes the keys; attention mixes the values with the weights.",
}
"""Flaws of the attention formula itself."""

MASK = {
    "mask ignored": "the mask has no effect: your weights are the ones you get without it. "
    "Blocked keys must be taken out before the softmax.",
    "mask inverted": "the mask is inverted: here True means the query MAY attend to that key, and "
    "your answer blocks exactly the keys it should keep.",
    "mask inverted, empty rows zeroed": "the mask is inverted: here True means the query MAY "
    "attend to that key, and your answer blocks exactly the keys it should keep (the rows it "
    "leaves with no key come out as zeros, so the mistake shows in the weights, not as NaN).",
    "mask filled with 0": "the blocked scores were set to 0, but exp(0) = 1, so blocked keys "
    "still get weight. A blocked score must be one whose exponential is 0.",
    "mask after the softmax": "the mask was applied after the softmax, so the rows no longer "
    "sum to 1: block the scores before the softmax.",
    "empty rows NaN": "a query with nothing to attend to: all its scores are blocked, and the "
    "softmax of such a row is 0/0 = NaN. Such a query gets weights of 0, and so an output of 0.",
    "empty rows uniform": "a query with nothing to attend to got equal weights on every key: the "
    "blocked scores were filled with a large finite number instead of one whose exponential is "
    "0. Such a query gets weights of 0.",
}
"""Flaws of a bool mask in the "may attend" convention (True = may attend)."""

CAUSAL = {
    "causal without the diagonal": "your causal mask leaves out the diagonal: a query may attend "
    "to itself, keys j ≤ i.",
    "causal upper triangle": "your causal mask keeps the future: query i sees the keys at or "
    "before its own position, never after.",
    "causal bottom-right": "with more keys than queries the causal mask is aligned top-left, as "
    "in torch: query i sees keys 0..i, whatever S.",
}
"""Flaws of a causal mask: which triangle, where its diagonal is."""

HEADS = {
    "split without transpose": "the heads are split by reading (B, L, E) straight as "
    "(B, H, L, D): that shuffles numbers between tokens instead of giving each head D features "
    "of every token. The head axis comes out of the feature axis first, and only then moves in "
    "front of the length axis.",
    "merge without transpose": "the heads are merged by reading (B, H, L, D) straight as "
    "(B, L, H·D): that mixes tokens. The length axis must be back next to the batch before the "
    "heads' features are joined.",
}
"""Flaws of the heads' split ('b l (h d) -> b h l d') and merge (back)."""

NORM = {
    "unbiased variance": "the variance divides by n − 1 (the unbiased estimate); LayerNorm's "
    "divides by n, the number of features.",
    "no eps": "eps is missing: it is added to the variance, inside the square root, so that a "
    "row with no spread does not divide by 0.",
    "eps outside the root": "eps is added after the square root; LayerNorm adds it to the "
    "variance, inside the root.",
    "normalised over the wrong axis": "each token is normalised over its own features, the last "
    "axis; yours normalises across the tokens.",
    "no weight and bias": "the normalised values are returned as they are: LayerNorm then scales "
    "them by its weight and shifts them by its bias.",
}
"""Flaws of LayerNorm."""

_FLAWS = {**ATTENTION, **MASK, **CAUSAL, **HEADS, **NORM}


def mistakes(run: Callable[[str], Callable], flaws: Iterable[str], **texts: str) -> list[Mistake]:
    """The classic mistakes of an exercise: ``run(flaw)`` is its reference with ``flaw`` switched
    on (same call as the answer); the explanations are the family's, or ``texts[flaw]`` where
    the exercise words it better (keys with spaces: pass a dict with ``**``)."""
    return [
        Mistake(flaw, run(flaw), texts[flaw] if flaw in texts else _FLAWS[flaw]) for flaw in flaws
    ]


# ---------------------------------------------------------------- the computations, with flaws


def causal(L: int, S: int, flaw: str = "", device=None) -> torch.Tensor:
    """Bool (L, S), True where query i may attend to key j ≤ i (top-left aligned, as torch)."""
    ones = torch.ones(L, S, dtype=torch.bool, device=device)
    if flaw == "causal without the diagonal":
        return ones.tril(-1)
    if flaw == "causal upper triangle":
        return ones.triu()
    if flaw == "causal bottom-right":
        return ones.tril(S - L)
    return ones.tril()


def attention(q, k, v, mask=None, flaw: str = "", *, scale=None, d_model=None):
    """``(output, weights)`` of softmax(Q Kᵀ · scale + M) V, with ``flaw`` (a key of
    :data:`ATTENTION` or :data:`MASK`) switched on. ``mask``: bool (True = may attend) or float
    (added); a query with no key gets zero weights. ``d_model`` is what the "scaled by √d_model"
    flaw uses."""
    d_k = q.size(-1)
    scale = d_k**-0.5 if scale is None else scale
    scale = {
        "no scale": 1.0,
        "divided by d_k": 1 / d_k,
        "multiplied by √d_k": math.sqrt(d_k),
        "scaled by the values' size": v.size(-1) ** -0.5,
        "scaled by √d_model": (d_model or d_k) ** -0.5,
    }.get(flaw, scale)
    a, b = (k, q) if flaw == "scores transposed" else (q, k)
    scores = a @ b.transpose(-2, -1) * scale
    blocked = _blocked(mask, flaw)
    if blocked is not None and flaw != "mask after the softmax":
        fill = {"mask filled with 0": 0.0, "empty rows uniform": -1e9}.get(flaw, float("-inf"))
        scores = scores.masked_fill(blocked, fill)
    elif mask is not None and mask.is_floating_point():
        scores = scores + mask
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    if flaw in ("mask inverted", "empty rows NaN"):  # as a plain softmax does: 0/0
        empty = torch.zeros_like(empty)
    if flaw == "no softmax":
        weights = scores
    else:
        axis = -2 if flaw == "softmax over the queries" else -1
        weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=axis).masked_fill(empty, 0.0)
    if flaw == "mask after the softmax" and blocked is not None:
        weights = weights.masked_fill(blocked, 0.0)
    return weights @ (k if flaw == "keys as values" else v), weights


def _blocked(mask, flaw: str):
    """Where a bool mask blocks (None for no mask, a float mask, or the mask ignored)."""
    if mask is None or mask.is_floating_point() or flaw == "mask ignored":
        return None
    return mask if flaw.startswith("mask inverted") else ~mask


def split_heads(x, H: int, flaw: str = ""):
    """'b l (h d) -> b h l d' (or with the "split without transpose" flaw)."""
    B, L, E = x.shape
    if flaw == "split without transpose":
        return x.reshape(B, H, L, E // H)
    return x.view(B, L, H, E // H).transpose(1, 2)


def merge_heads(x, flaw: str = ""):
    """'b h l d -> b l (h d)' (or with the "merge without transpose" flaw)."""
    B, H, L, D = x.shape
    if flaw == "merge without transpose":
        return x.reshape(B, L, H * D)
    return x.transpose(1, 2).reshape(B, L, H * D)


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, flaw: str = ""):
    """LayerNorm over the last axis (or with a flaw of :data:`NORM`)."""
    axis = 0 if flaw == "normalised over the wrong axis" else -1
    mean = x.mean(dim=axis, keepdim=True)
    var = x.var(dim=axis, keepdim=True, unbiased=flaw == "unbiased variance")
    eps = 0.0 if flaw == "no eps" else eps
    if flaw == "eps outside the root":
        normed = (x - mean) / (var.sqrt() + eps)
    else:
        normed = (x - mean) / (var + eps).sqrt()
    if flaw == "no weight and bias" or weight is None:
        return normed
    return normed * weight + bias
