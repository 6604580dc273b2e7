"""Attention as today's decoders write it (lesson 08): grouped-query attention with rotary
positions, ALiBi biases and sliding windows, on the course's one mask path and one kernel.

* :class:`GroupedQueryAttention`: causal self-attention whose H query heads share H_kv key/value
  heads (GQA; H_kv = 1 is multi-query attention, MQA; H_kv = H is plain multi-head attention),
  optionally rotating queries and keys by position (RoPE). Its parameters are laid out as
  :class:`~mha_course.MultiHeadAttention`'s (``in_proj_weight`` = [W^Q; W^K; W^V], ``in_proj_bias``,
  ``out_proj``), so with H_kv = H the two have the same state dict. It drops into a
  :class:`~mha_course.DecoderLM` block in place of ``MultiHeadAttention``.
* :func:`decoder_mask`: the canonical mask of new tokens over the keys of a KV cache: causal or a
  sliding window, plus ALiBi's bias.
* :func:`sliding_window_attention`: sliding-window attention that never builds an (L, L) tensor:
  each block of queries reads only the keys its window reaches.

GQA without copies: query head h reads key/value head h // G (G = H / H_kv, torch's
``repeat_interleave`` order). The G query heads of a group are stacked along the query axis,
(B, H, T, D) -> (B, H_kv, G·T, D), so one batched product per key/value head serves them all and
the keys and values are read once, never repeated.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import kernel, masks
from ._validate import require_divisible, require_positive_int, require_probability, shape_str
from .alibi import bias_from_slopes
from .masks import AttentionMask
from .rope import RotaryEmbedding

__all__ = [
    "GroupedQueryAttention",
    "decoder_mask",
    "fold_groups",
    "sliding_window_attention",
    "kv_cache_bytes",
]


class GroupedQueryAttention(nn.Module):
    """Causal self-attention with ``num_heads`` query heads sharing ``num_kv_heads`` key/value
    heads (default: as many, plain multi-head attention), each of ``embed_dim // num_heads``
    features; ``rope_base`` (a number) rotates queries and keys by position (RoPE).

    Parameters: ``in_proj_weight`` ((H + 2·H_kv)·D, E) stacks W^Q (H·D rows), W^K and W^V (H_kv·D
    rows each), ``in_proj_bias`` likewise, ``out_proj`` = W^O (E × E). It is called as a block's
    attention, ``_attend(x, x, x, mask, need_weights, cache)``: x (B, T, E), a canonical mask
    broadcastable to (B, H, T, S) (:func:`decoder_mask`), a layer's KV cache of H_kv heads or None;
    it returns ``(output (B, T, E), weights (B, H, T, S) or None)``.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        *,
        rope_base: float | None = None,
        dropout: float = 0.0,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        require_positive_int("embed_dim", embed_dim)
        require_positive_int("num_heads", num_heads)
        require_divisible("embed_dim", embed_dim, "num_heads", num_heads)
        num_kv_heads = num_heads if num_kv_heads is None else num_kv_heads
        require_kv_heads(num_heads, num_kv_heads)
        require_probability("dropout", dropout)
        factory = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads, self.num_kv_heads = embed_dim, num_heads, num_kv_heads
        self.head_dim = embed_dim // num_heads
        self.group = num_heads // num_kv_heads  # G: query heads per key/value head
        self.dropout = dropout
        rows = (num_heads + 2 * num_kv_heads) * self.head_dim
        self.in_proj_weight = nn.Parameter(torch.empty(rows, embed_dim, **factory))
        self.in_proj_bias = nn.Parameter(torch.zeros(rows, **factory)) if bias else None
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)  # W^O
        self.rotary = None if rope_base is None else RotaryEmbedding(self.head_dim, rope_base)
        nn.init.xavier_uniform_(
            self.in_proj_weight
        )  # as MultiHeadAttention's (3E, E) when H_kv = H
        if bias:
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, dropout={self.dropout}, "
            f"bias={self.in_proj_bias is not None}"
        )

    def _attend(
        self, query: Tensor, key, value, mask: AttentionMask, need_weights: bool, cache=None
    ) -> tuple[Tensor, Tensor | None]:
        """Self-attention over ``query`` (B, T, E) (``key`` and ``value`` are the same tensor, the
        signature of :meth:`MultiHeadAttention._attend`); with ``cache``, over the cached tokens
        too. The new tokens' positions continue where the cache stopped."""
        B, T, _ = query.shape
        H, H_kv, D = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = F.linear(query, self.in_proj_weight, self.in_proj_bias)  # (B, T, (H + 2 H_kv) D)
        q, k, v = qkv.split((H * D, H_kv * D, H_kv * D), dim=-1)
        q = q.view(B, T, H, D).transpose(1, 2)  # (B, H, T, D)
        k = k.view(B, T, H_kv, D).transpose(1, 2)  # (B, H_kv, T, D)
        v = v.view(B, T, H_kv, D).transpose(1, 2)
        if self.rotary is not None:  # rotate before caching: a cached key is rotated once
            start = 0 if cache is None else cache.cache.length
            positions = torch.arange(start, start + T, device=query.device)
            q, k = self.rotary(q, positions), self.rotary(k, positions)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, H_kv, S, D), S = cached + T
        dropout_p = self.dropout if self.training else 0.0
        heads, weights = grouped_attention(q, k, v, mask, self.group, dropout_p, need_weights)
        return self.out_proj(heads.transpose(1, 2).reshape(B, T, H * D)), weights


def require_kv_heads(num_heads: int, num_kv_heads) -> None:
    """num_kv_heads is a positive int that divides num_heads (each serves the same number)."""
    require_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads}): each "
            f"key/value head serves the same number of query heads, and {num_heads} / "
            f"{num_kv_heads} is not a whole number"
        )


def grouped_attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: AttentionMask,
    group: int,
    dropout_p: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """q (B, H, T, D) over k, v (B, H_kv, S, D), H = group · H_kv, through the course's kernel;
    returns ``(heads (B, H, T, Dv), weights (B, H, T, S) or None)``. ``mask`` broadcasts to
    (B, H, T, S)."""
    B, H, T, D = q.shape
    if group > 1:  # the G query heads of a group, one after the other along the query axis
        q = q.reshape(B, H // group, group * T, D)  # (B, H_kv, G·T, D)
        mask = fold_groups(mask, H, group, T)
    if need_weights:
        heads, weights = kernel.attention(q, k, v, mask, dropout_p)
        weights = weights.reshape(B, H, T, -1)  # a copy where the kernel's layout needs one
    else:
        heads, weights = kernel.fused_attention(q, k, v, mask, dropout_p), None
    # reshape, not view: CUDA's fused kernels store (B, H_kv, G·T, D) as (B, G·T, H_kv, D)
    return heads.reshape(B, H, T, -1), weights


def fold_groups(mask: AttentionMask, num_heads: int, group: int, T: int) -> AttentionMask:
    """A canonical mask broadcastable to (B, H, T, S), for queries folded into groups
    (B, H_kv, G·T, D): broadcastable to (B, H_kv, G·T, S), query head h = kv · G + g at rows
    g·T .. g·T + T - 1 of key/value head kv."""

    def fold(t: Tensor | None) -> Tensor | None:
        if t is None:
            return None
        t = t.expand(*t.shape[:-2], T, t.size(-1))  # one row per query
        if t.dim() >= 3 and t.size(-3) == num_heads:  # per query head: regroup the heads
            return t.unflatten(-3, (num_heads // group, group)).flatten(-3, -2)
        return t.unsqueeze(-3).expand(*t.shape[:-2], group, T, t.size(-1)).flatten(-3, -2)

    return AttentionMask(fold(mask.bias), fold(mask.empty), causal=False)


def decoder_mask(
    T: int,
    S: int,
    dtype: torch.dtype,
    device=None,
    *,
    window: int | None = None,
    alibi_slopes: Tensor | None = None,
) -> AttentionMask:
    """The canonical mask of T new tokens over S keys, the last T of which are the new tokens
    themselves (S - T come from a cache): each sees itself and the keys before it (bottom-right
    aligned), at most ``window`` of them; ``alibi_slopes`` (H,) adds ALiBi's bias -m_h · (i - j).
    Broadcastable to (B, H, T, S): (T, S), or (H, T, S) with ALiBi."""
    if window is None and alibi_slopes is None:
        return masks.causal_over_cache(T, S, dtype, device)
    offset = S - T  # query i is token offset + i
    if window is None:
        allowed = masks.causal_mask(T, S, device, offset=offset)
    else:
        allowed = masks.sliding_window_mask(T, S, window, device, offset=offset)
    bias = torch.zeros(T, S, dtype=dtype, device=device).masked_fill_(~allowed, float("-inf"))
    if alibi_slopes is not None:
        bias = bias + bias_from_slopes(alibi_slopes, T, S, offset=offset).to(dtype)  # (H, T, S)
    return AttentionMask(bias)  # every query sees at least itself: no empty row


def sliding_window_attention(
    q: Tensor, k: Tensor, v: Tensor, window: int, block_size: int | None = None
) -> Tensor:
    """Causal sliding-window self-attention, softmax(q kᵀ/√D + M) v with query i seeing keys
    i - window < j <= i, one block of queries at a time: q, k (..., L, D), v (..., L, Dv) ->
    (..., L, Dv). A block of queries [s, e) reads only keys [s - window + 1, e), so the largest
    scores tensor is (..., block_size, block_size + window - 1): memory grows like L·window,
    not L². ``block_size`` defaults to ``window``."""
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window must be an int, got {type(window).__name__} {window!r}")
    if window < 1:
        raise ValueError(f"window must be >= 1 (each query sees at least itself), got {window}")
    if q.shape[-2:] != k.shape[-2:] or k.size(-2) != v.size(-2):
        raise ValueError(
            f"self-attention: q and k must both be (..., L, D) and v (..., L, Dv), got "
            f"{shape_str(q.shape)}, {shape_str(k.shape)} and {shape_str(v.shape)}"
        )
    L, block = q.size(-2), block_size or window
    scale = 1 / math.sqrt(q.size(-1))
    out = q.new_empty(*q.shape[:-1], v.size(-1))
    for start in range(0, L, block):
        end, first = min(start + block, L), max(0, start - window + 1)
        # query start + i is row i; key first + j is column j
        mask = masks.sliding_window_mask(
            end - start, end - first, window, q.device, offset=start - first
        )
        scores = q[..., start:end, :] @ k[..., first:end, :].transpose(-2, -1) * scale
        weights = scores.masked_fill(~mask, float("-inf")).softmax(dim=-1)
        out[..., start:end, :] = weights @ v[..., first:end, :]
    return out


def kv_cache_bytes(
    num_layers: int, num_kv_heads: int, head_dim: int, tokens: int, bytes_per_number: int = 2
) -> int:
    """Bytes of a KV cache for one sequence: 2 (keys and values) · layers · H_kv · D · tokens ·
    bytes per number (2 for float16/bfloat16)."""
    return 2 * num_layers * num_kv_heads * head_dim * tokens * bytes_per_number
