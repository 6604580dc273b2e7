"""The attention kernel: the one place the course's attention is computed.

    Attention(Q, K, V) = softmax(Q Kᵀ · scale + M) V,        scale = 1/√D unless given

M is the canonical mask's ``bias`` (:class:`~mha_course.masks.AttentionMask`): 0 where a query may
attend to a key, -inf where it may not. A query that may attend to no key at all gets zero
weights and a zero output (plain softmax would give NaN), without a branch on the data.

Two routes compute the same thing:

* :func:`attention`, written out, returns ``(output, weights)``: lesson 01's formula line by line;
* :func:`fused_attention`, ``torch.nn.functional.scaled_dot_product_attention``: one fused kernel
  (flash attention and its cousins) that never forms the (..., L, S) weights, the fast route
  when nobody asks for them.

:func:`attend_heads` is the attention every module of the course calls (multi-head, grouped-query,
the encoder's and decoder's layers, the language model): H query heads over H_kv key/value heads,
by the route that gives what was asked for, and back the heads side by side, Concat(head_1, ...,
head_H), ready for W^O.

Everything here is already checked by the caller: q (*, L, D), k (*, S, D), v (*, S, Dv) with
the same leading dims * ((B, H) for multi-head attention), and a canonical mask.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor

from .masks import NO_MASK, AttentionMask, fold_groups

__all__ = ["attend_heads", "attention", "fused_attention", "attention_weights", "softmax"]


def attend_heads(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: AttentionMask = NO_MASK,
    *,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """H query heads q (B, H, L, D) over H_kv key/value heads k (B, H_kv, S, D), v (B, H_kv, S,
    Dv), H a multiple of H_kv (H_kv = H: multi-head attention; fewer: grouped-query attention,
    query head h reading key/value head h // G, G = H / H_kv). ``mask`` broadcasts to (B, H, L, S).

    Returns ``(Concat(head_1, ..., head_H) (B, L, H·Dv), weights (B, H, L, S) or None)``: with
    ``need_weights`` the written-out :func:`attention`, which keeps the weights; without, the
    fused kernel, which never builds them.

    GQA without copies: the G query heads of a group are stacked along the query axis, (B, H, L,
    D) -> (B, H_kv, G·L, D), so one batched product per key/value head serves them all and the
    keys and values are read once, never repeated.
    """
    B, H, L, D = q.shape
    group = H // k.size(1)  # G
    if group > 1:  # the G query heads of a group, one after the other along the query axis
        q = q.reshape(B, H // group, group * L, D)  # (B, H_kv, G·L, D)
        mask = fold_groups(mask, H, group, L)
    if need_weights:
        heads, weights = _attention_with_weights(q, k, v, mask, dropout_p, (B, H, L))
        weights = weights.reshape(B, H, L, -1)  # a view of the kernel's (B, H_kv, G·L, S)
    else:
        heads, weights = fused_attention(q, k, v, mask, dropout_p), None
    # (B, H_kv, G·L, Dv) -> (B, L, H_kv, G, Dv) -> (B, L, H·Dv), whatever the kernel's layout:
    # CUDA's fused kernels store their output as (B, G·L, H_kv, Dv), the CPU's contiguously
    heads = heads.unflatten(2, (group, L)).permute(0, 3, 1, 2, 4)
    return heads.reshape(B, L, -1), weights


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: AttentionMask = NO_MASK,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> tuple[Tensor, Tensor]:
    """softmax(Q Kᵀ · scale + M) V, written out; returns ``(output (*, L, Dv), weights (*, L, S))``.

    ``dropout_p`` drops weights (the weights returned are the ones the output used). The batched
    matmuls see the leading dims as one batch of N plain matrices, and three tricks each save a
    pass over the (N, L, S) scores: the scale rides in the first matmul (baddbmm's alpha), M is
    that matmul's starting value (baddbmm's input, as torch.nn.MultiheadAttention does), and
    without autograd the softmax and the zeroing of empty rows overwrite the scores in place.
    """
    *batch, L, D = q.shape
    S, Dv = k.size(-2), v.size(-1)
    scale = D**-0.5 if scale is None else scale
    q = q.reshape(-1, L, D)  # (N, L, D), N = the product of *: a view of contiguous (B, H, L, D)
    k = k.reshape(-1, S, D)  # (N, S, D)
    v = v.reshape(-1, S, Dv)  # (N, S, Dv)
    if mask.bias is None:  # scores = scale · Q Kᵀ
        scores = torch.baddbmm(
            q.new_empty(q.size(0), L, S), q, k.transpose(1, 2), beta=0.0, alpha=scale
        )
    else:  # scores = M + scale · Q Kᵀ
        scores = torch.baddbmm(_flat(mask.bias, batch), q, k.transpose(1, 2), alpha=scale)
    scores = scores.reshape(*batch, L, S)  # (*, L, S): N split into *, a view whatever the strides
    weights = softmax(scores, mask.empty, in_place=not scores.requires_grad)  # (*, L, S)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    output = torch.bmm(weights.reshape(-1, L, S), v)  # (N, L, Dv); an empty query's row is 0
    return output.reshape(*batch, L, Dv), weights  # (*, L, Dv), a view as the scores


def fused_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: AttentionMask = NO_MASK,
    dropout_p: float = 0.0,
    scale: float | None = None,
) -> Tensor:
    """The same output (*, L, Dv) from ``torch.nn.functional.scaled_dot_product_attention``.

    An empty query's row of M is 0, so the kernel gives it the mean of the values (never NaN,
    whichever kernel runs); its output is then set to 0, as :func:`attention` gives."""
    if mask.causal:  # the kernel's own causal mode, which does not read M at all
        output = F.scaled_dot_product_attention(
            q, k, v, dropout_p=dropout_p, is_causal=True, scale=scale
        )
    else:
        output = F.scaled_dot_product_attention(
            q, k, v, attn_mask=mask.bias, dropout_p=dropout_p, scale=scale
        )
    return mask.zero_empty(output)


def attention_weights(scores: Tensor, mask: AttentionMask = NO_MASK) -> Tensor:
    """softmax(scores + M) over the keys, for scores (*, L, S) computed any way (einsum, a loop);
    an empty query's row is 0."""
    if mask.bias is not None:
        scores = scores + mask.bias
    return softmax(scores, mask.empty)


def softmax(scores: Tensor, empty: Tensor | None = None, in_place: bool = False) -> Tensor:
    """Softmax over the keys (the last axis), the rows of the ``empty`` queries (..., L, 1) set
    to 0. ``in_place`` overwrites ``scores`` (no autograd there): a fresh (..., L, S) buffer
    costs about as much as the softmax itself."""
    if in_place:
        weights = torch.softmax(scores, dim=-1, out=scores)
        return weights if empty is None else weights.masked_fill_(empty, 0.0)
    weights = torch.softmax(scores, dim=-1)
    return weights if empty is None else weights.masked_fill(empty, 0.0)


# ---------------------------------------------------------------- the weights that do not fit


_is_compiling = getattr(torch.compiler, "is_compiling", lambda: False)  # torch >= 2.3


def _attention_with_weights(q, k, v, mask: AttentionMask, dropout_p: float, heads: tuple):
    """:func:`attention`. When the weights do not fit in memory, the allocator's error says so,
    naming their shape (B, H, L, S) (``heads`` = (B, H, L)), and that need_weights=False never
    builds them."""
    if _is_compiling():  # a compiled graph reports its own errors
        return attention(q, k, v, mask, dropout_p)
    try:
        return attention(q, k, v, mask, dropout_p)
    except RuntimeError as error:  # torch.OutOfMemoryError is one too
        if not _out_of_memory(error):
            raise
        B, H, L, S = (*heads, k.size(-2))
        size = B * H * L * S * q.element_size()
        dtype = str(q.dtype).removeprefix("torch.")
        raise type(error)(
            f"need_weights=True builds the attention weights (B, H, L, S) = ({B}, {H}, {L}, {S}), "
            f"{size / 2**30:,.1f} GiB in {dtype}, more than the {q.device.type} memory can hold. "
            "need_weights=False avoids building them: the fused kernel computes the output "
            f"without them. (The allocator said: {str(error).splitlines()[0]})"
        ) from error


def _out_of_memory(error: RuntimeError) -> bool:
    text = str(error).lower()
    return isinstance(error, torch.OutOfMemoryError) or any(
        words in text for words in ("out of memory", "can't allocate memory")
    )


def _flat(bias: Tensor, batch: list[int]) -> Tensor:
    """M, broadcastable to (*, L, S), as a 3-D tensor that baddbmm broadcasts to (N, L, S): a view,
    or a copy no bigger than M expanded along the batch only (a (B, 1, 1, S) padding mask
    copies B·H·S numbers, not the B·H·L·S of the scores)."""
    rows, cols = bias.shape[-2:]  # (L or 1, S or 1)
    if math.prod(bias.shape[:-2]) == 1:  # the same M for every matrix of the batch
        return bias.reshape(1, rows, cols)
    return bias.expand(*batch, rows, cols).reshape(-1, rows, cols)
