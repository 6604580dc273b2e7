"""Scaled dot-product attention: Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V.

Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev) -> output (..., L, Ev) and
weights (..., L, S). L is the number of queries, S the number of keys, E the feature size.
"""

from __future__ import annotations

import math
import numbers

import torch
import torch.nn.functional as F

from ._validate import (
    require_floating,
    require_mask,
    require_probability,
    require_tensor,
    shape_str,
)

__all__ = ["scaled_dot_product_attention", "masked_softmax", "nothing_to_attend", "causal_mask"]


def causal_mask(L: int, S: int, device=None) -> torch.Tensor:
    """Bool (L, S) mask, True where query i may attend to key j, i.e. j <= i (top-left aligned)."""
    return torch.ones(L, S, dtype=torch.bool, device=device).tril()


def nothing_to_attend(mask: torch.Tensor) -> torch.Tensor:
    """The queries a mask leaves with no key at all, shape (..., L, 1): for a bool mask
    (True = may attend) a row of False, for a float mask a row of -inf."""
    if mask.dtype == torch.bool:
        return ~mask.any(dim=-1, keepdim=True)
    return mask.isneginf().all(dim=-1, keepdim=True)


def masked_softmax(
    scores: torch.Tensor, nothing_allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax over the keys (the last axis).

    A row whose scores are all -inf (a query with nothing to attend to) gets zero weights instead
    of the NaN that plain softmax gives. ``nothing_allowed`` (broadcastable to (..., L, 1)) marks
    those rows when the caller already knows them; otherwise they are found from the scores.
    """
    if nothing_allowed is None:
        nothing_allowed = scores.isneginf().all(dim=-1, keepdim=True)
    if not nothing_allowed.any():
        return torch.softmax(scores, dim=-1)
    weights = torch.softmax(scores.masked_fill(nothing_allowed, 0.0), dim=-1)
    return weights.masked_fill(nothing_allowed, 0.0)


def _check_arguments(query, key, value, attn_mask, dropout_p, is_causal, scale) -> torch.Size:
    """Validate everything up front; return the scores' shape (..., L, S)."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        require_floating(name, x)
        if x.dim() < 2:
            raise ValueError(
                f"{name} must have at least 2 dims (..., length, features), got shape {shape_str(x.shape)}"
            )
    if not (query.dtype == key.dtype == value.dtype):
        raise ValueError(
            f"query, key and value must share a dtype, got {query.dtype}, {key.dtype}, {value.dtype}"
        )
    if query.size(-1) != key.size(-1):
        raise ValueError(
            f"query and key must have the same feature size E to be compared: query {shape_str(query.shape)} "
            f"has E={query.size(-1)}, key {shape_str(key.shape)} has E={key.size(-1)}"
        )
    if key.size(-2) != value.size(-2):
        raise ValueError(
            f"key and value must have the same length S (one value per key): key {shape_str(key.shape)} "
            f"has S={key.size(-2)}, value {shape_str(value.shape)} has S={value.size(-2)}"
        )
    try:
        batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise ValueError(
            f"the leading (batch) dims of query {shape_str(query.shape)}, key {shape_str(key.shape)} "
            f"and value {shape_str(value.shape)} do not broadcast together"
        ) from None
    scores_shape = torch.Size((*batch, query.size(-2), key.size(-2)))
    if attn_mask is not None:
        require_mask(
            "attn_mask", attn_mask, scores_shape, "True = may attend", float_dtype=query.dtype
        )
        if is_causal:
            raise ValueError("pass either attn_mask or is_causal=True, not both (as torch's SDPA)")
    require_probability("dropout_p", dropout_p)
    if not isinstance(is_causal, bool):
        raise TypeError(f"is_causal must be a bool, got {type(is_causal).__name__}")
    if scale is not None and (isinstance(scale, bool) or not isinstance(scale, numbers.Real)):
        raise TypeError(f"scale must be a float or None, got {type(scale).__name__}")
    return scores_shape


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q Kᵀ · scale + mask) V, returning ``(output, weights)``.

    Same arguments and mask convention as ``torch.nn.functional.scaled_dot_product_attention``:
    a bool ``attn_mask`` is True where a query **may attend**; a float mask is added to the scores.
    ``scale`` defaults to 1/√E. A query that may attend to nothing gets zero weights and a zero
    output (torch's math path gives NaN there). ``dropout_p`` drops weights (always, like torch's
    functional form); the weights returned are the ones the output used.
    """
    if attn_mask is not None:
        require_tensor("attn_mask", attn_mask)
    _check_arguments(query, key, value, attn_mask, dropout_p, is_causal, scale)
    L, S = query.size(-2), key.size(-2)
    scale = 1.0 / math.sqrt(query.size(-1)) if scale is None else scale
    if is_causal:
        attn_mask = causal_mask(L, S, device=query.device)  # bool: True on and below the diagonal

    scores = (query * scale) @ key.transpose(-2, -1)  # (..., L, S)
    if attn_mask is None:  # no mask: every query attends somewhere, plain softmax
        weights = torch.softmax(scores, dim=-1)
    elif attn_mask.dtype == torch.bool:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = masked_softmax(scores, nothing_allowed=nothing_to_attend(attn_mask))
    else:
        scores = scores + attn_mask
        weights = masked_softmax(scores, nothing_allowed=nothing_to_attend(attn_mask))
    # weights: (..., L, S), each row sums to 1 (or is all 0 for a query with nothing to attend to)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ value, weights
