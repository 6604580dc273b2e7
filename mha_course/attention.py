"""Scaled dot-product attention: Attention(Q, K, V) = softmax(Q Kᵀ / √d_k) V.

Shapes: query (..., L, E), key (..., S, E), value (..., S, Ev) -> output (..., L, Ev) and
weights (..., L, S). L is the number of queries, S the number of keys, E the feature size.

This is the public function, with torch's arguments and mask convention: it checks them,
converts the mask once (:mod:`mha_course.masks`) and calls the attention written out in
:mod:`mha_course.kernel`. ``causal_mask`` and ``nothing_to_attend`` live in :mod:`mha_course.masks`
and are importable from here too.
"""

from __future__ import annotations

import numbers

import torch

from . import kernel, masks
from ._validate import (
    require_floating,
    require_positive_features,
    require_probability,
    shape_str,
)
from .masks import MAY_ATTEND, causal_mask, nothing_to_attend

__all__ = ["scaled_dot_product_attention", "masked_softmax", "nothing_to_attend", "causal_mask"]


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
    return kernel.softmax(scores.masked_fill(nothing_allowed, 0.0), nothing_allowed)


def _check_gqa(query, key, value) -> int:
    """Grouped-query attention's shapes: query (..., H_q, L, E), key and value (..., H_kv, S, E)
    with H_q a multiple of H_kv. Returns the group size G = H_q / H_kv."""
    for name, x in (("query", query), ("key", key), ("value", value)):
        if x.dim() < 3:
            raise ValueError(
                f"with enable_gqa=True, {name} must be (..., heads, length, features), got "
                f"shape {shape_str(x.shape)}"
            )
    H_q, H_k, H_v = query.size(-3), key.size(-3), value.size(-3)
    if H_k != H_v:
        raise ValueError(
            f"key and value must have the same number of heads, got key {shape_str(key.shape)} "
            f"with {H_k} and value {shape_str(value.shape)} with {H_v}"
        )
    if H_q % H_k:
        raise ValueError(
            f"with enable_gqa=True the query's heads must be a multiple of the key's: query "
            f"{shape_str(query.shape)} has {H_q} heads, key {shape_str(key.shape)} has {H_k}"
        )
    return H_q // H_k


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
    require_positive_features(
        "query and key", query, "the scores are scaled by 1/√E, and E = 0 leaves nothing to compare"
    )
    if key.size(-2) != value.size(-2):
        raise ValueError(
            f"key and value must have the same length S (one value per key): key {shape_str(key.shape)} "
            f"has S={key.size(-2)}, value {shape_str(value.shape)} has S={value.size(-2)}"
        )
    try:
        batch = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        gqa = (
            query.dim() >= 3
            and key.dim() >= 3
            and key.size(-3) != query.size(-3)
            and query.size(-3) % key.size(-3) == 0
        )
        raise ValueError(
            f"the leading (batch) dims of query {shape_str(query.shape)}, key {shape_str(key.shape)} "
            f"and value {shape_str(value.shape)} do not broadcast together"
            + ("; for fewer key/value heads than query heads, pass enable_gqa=True" if gqa else "")
        ) from None
    scores_shape = torch.Size((*batch, query.size(-2), key.size(-2)))
    if attn_mask is not None:
        masks.require_mask("attn_mask", attn_mask, query.dtype, MAY_ATTEND)
        masks.require_broadcastable("attn_mask", attn_mask, scores_shape)
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
    enable_gqa: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q Kᵀ · scale + mask) V, returning ``(output, weights)``.

    Same arguments and mask convention as ``torch.nn.functional.scaled_dot_product_attention``:
    a bool ``attn_mask`` is True where a query **may attend**; a float mask is added to the scores.
    ``scale`` defaults to 1/√E. A query that may attend to nothing gets zero weights and a zero
    output (torch's math path gives NaN there). ``dropout_p`` drops weights (always, like torch's
    functional form); the weights returned are the ones the output used.

    ``enable_gqa=True``: grouped-query attention. key and value have H_kv heads (dim -3), query
    H_q, a multiple of H_kv; query head h reads key/value head h // (H_q / H_kv), as torch's
    (its ``repeat_interleave``). The weights are (..., H_q, L, S).
    """
    if not isinstance(enable_gqa, bool):
        raise TypeError(f"enable_gqa must be a bool, got {type(enable_gqa).__name__}")
    group = _check_gqa(query, key, value) if enable_gqa else 1
    if group > 1:  # each key/value head serves G query heads: a broadcast, not a copy
        *lead, H_q, L, E = query.shape
        query = query.reshape(*lead, H_q // group, group, L, E)  # (..., H_kv, G, L, E)
        key, value = key.unsqueeze(-3), value.unsqueeze(-3)  # (..., H_kv, 1, S, E)
        if attn_mask is not None and attn_mask.dim() >= 3:
            attn_mask = _group_heads(attn_mask, H_q, group)
    scores = _check_arguments(query, key, value, attn_mask, dropout_p, is_causal, scale)
    mask = masks.from_may_attend(attn_mask, scores, query.dtype, is_causal, query.device)
    *batch, L, S = scores  # the leading dims of query, key and value, broadcast together
    query, key, value = (x.expand(*batch, *x.shape[-2:]) for x in (query, key, value))
    output, weights = kernel.attention(query, key, value, mask, dropout_p, scale)
    if group > 1:  # (..., H_kv, G, L, ·) -> (..., H_q, L, ·)
        output, weights = output.flatten(-4, -3), weights.flatten(-4, -3)
    return output, weights


def _group_heads(attn_mask: torch.Tensor, H_q: int, group: int) -> torch.Tensor:
    """A mask over (..., H_q or 1, L, S) as (..., H_kv or 1, G or 1, L, S), like the queries."""
    heads = attn_mask.size(-3)
    if heads == H_q:
        return attn_mask.unflatten(-3, (H_q // group, group))
    if heads != 1:
        raise ValueError(
            f"attn_mask of shape {shape_str(attn_mask.shape)} has {heads} heads in dim -3; "
            f"expected 1 or the query's {H_q}"
        )
    return attn_mask.unsqueeze(-3)
