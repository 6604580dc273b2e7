"""Attention as today's decoders write it (lesson 08): grouped-query attention with rotary
positions, ALiBi biases and sliding windows, on the course's one mask path and one kernel.

* :class:`GroupedQueryAttention`: self-attention whose H query heads share H_kv key/value heads
  (GQA; H_kv = 1 is multi-query attention, MQA; H_kv = H is plain multi-head attention). Its
  parameters are laid out as :class:`~mha_course.MultiHeadAttention`'s (``in_proj_weight`` =
  [W^Q; W^K; W^V], ``in_proj_bias``, ``out_proj``), so with H_kv = H the two have the same state
  dict, and it follows the same protocol, ``attend(query, key, value, mask, *, rope=None,
  cache=None, need_weights=False)``: it is the attention of a
  :class:`~mha_course.lm.DecoderBlock` in place of ``MultiHeadAttention``.
* :func:`decoder_mask`: the canonical mask of new tokens over the keys of a KV cache: causal or a
  sliding window, plus ALiBi's bias; from the tokens' positions when they are a tensor (a static
  cache's).
* :func:`sliding_window_attention`: sliding-window attention that never builds an (L, L) tensor:
  each block of queries reads only the keys its window reaches.

GQA without copies: query head h reads key/value head h // G (G = H / H_kv, torch's
``repeat_interleave`` order), in :func:`mha_course.kernel.attend_heads`: the G query heads of a
group are stacked along the query axis, so the keys and values are read once, never repeated.
RoPE is not here: the model computes the rotation of its tokens once per forward
(:meth:`mha_course.RotaryEmbedding.rotation`) and hands it to every layer's ``attend``.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from . import kernel, masks
from ._validate import require_divisible, require_positive_int, require_probability, shape_str
from .alibi import bias_from_distance
from .cache import LayerCache
from .masks import AttentionMask, fold_groups
from .rope import Rotation

__all__ = [
    "GroupedQueryAttention",
    "decoder_mask",
    "fold_groups",
    "sliding_window_attention",
    "kv_cache_bytes",
]


class GroupedQueryAttention(nn.Module):
    """Self-attention with ``num_heads`` query heads sharing ``num_kv_heads`` key/value heads
    (default: as many, plain multi-head attention), each of ``embed_dim // num_heads`` features.

    Parameters: ``in_proj_weight`` ((H + 2·H_kv)·D, E) stacks W^Q (H·D rows), W^K and W^V (H_kv·D
    rows each), ``in_proj_bias`` likewise, ``out_proj`` = W^O (E × E). Called through the
    attention protocol, :meth:`attend`, with x (B, T, E) as query, key and value.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        num_kv_heads: int | None = None,
        *,
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
        nn.init.xavier_uniform_(self.in_proj_weight)  # as MultiHeadAttention's (3E, E), H_kv = H
        if bias:
            nn.init.zeros_(self.out_proj.bias)

    def extra_repr(self) -> str:
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
            f"num_kv_heads={self.num_kv_heads}, dropout={self.dropout}, "
            f"bias={self.in_proj_bias is not None}"
        )

    def attend(
        self,
        query: Tensor,
        key: Tensor,
        value: Tensor,
        mask: AttentionMask,
        *,
        rope: Rotation | None = None,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """Self-attention over ``query`` (B, T, E), which ``key`` and ``value`` must be (the
        signature of :meth:`MultiHeadAttention.attend <mha_course.MultiHeadAttention.attend>`);
        a canonical mask broadcastable to (B, H, T, S) (:func:`decoder_mask`); ``rope``, the
        tokens' rotation; ``cache``, a layer's cache of H_kv heads. Returns ``(output (B, T, E),
        weights (B, H, T, S) or None)``."""
        if key is not query or value is not query:
            raise ValueError(
                "GroupedQueryAttention is self-attention: pass the same tensor as query, key and "
                f"value, got shapes {shape_str(query.shape)}, {shape_str(key.shape)} and "
                f"{shape_str(value.shape)}"
            )
        B, T, _ = query.shape
        H, H_kv, D = self.num_heads, self.num_kv_heads, self.head_dim
        qkv = F.linear(query, self.in_proj_weight, self.in_proj_bias)  # (B, T, (H + 2 H_kv) D)
        q, k, v = qkv.split((H * D, H_kv * D, H_kv * D), dim=-1)
        q = q.unflatten(-1, (H, D)).transpose(1, 2)  # (B, H, T, D)
        k = k.unflatten(-1, (H_kv, D)).transpose(1, 2)  # (B, H_kv, T, D)
        v = v.unflatten(-1, (H_kv, D)).transpose(1, 2)
        if rope is not None:  # rotate before caching: a cached key is rotated once
            q, k = rope.rotate(q), rope.rotate(k)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H_kv, S, D), S = cached + T
        dropout_p = self.dropout if self.training else 0.0
        concat, weights = kernel.attend_heads(
            q, k, v, mask, dropout_p=dropout_p, need_weights=need_weights
        )  # (B, T, H·D)
        return self.out_proj(concat), weights


def require_kv_heads(num_heads: int, num_kv_heads) -> None:
    """num_kv_heads is a positive int that divides num_heads (each serves the same number)."""
    require_positive_int("num_kv_heads", num_kv_heads)
    if num_heads % num_kv_heads:
        raise ValueError(
            f"num_heads ({num_heads}) must be a multiple of num_kv_heads ({num_kv_heads}): each "
            f"key/value head serves the same number of query heads, and {num_heads} / "
            f"{num_kv_heads} is not a whole number"
        )


def decoder_mask(
    T: int,
    S: int,
    dtype: torch.dtype,
    device=None,
    *,
    window: int | None = None,
    alibi_slopes: Tensor | None = None,
    positions: Tensor | None = None,
) -> AttentionMask:
    """The canonical mask of T new tokens over S keys (key j at position j): query i, at
    position p_i, sees the keys j <= p_i, at most ``window`` of them (p_i - j < window);
    ``alibi_slopes`` (H,) adds ALiBi's bias -m_h · (p_i - j). Broadcastable to (B, H, T, S):
    (T, S), or (H, T, S) with ALiBi; every query sees at least itself.

    ``positions`` (T,) are the p_i; by default S - T .. S - 1, the new tokens being the last T
    keys (a KV cache of S - T tokens, or none). A static cache's positions are a tensor whose
    values the code never reads, and its S keys include slots not yet written, all after p_i."""
    if positions is None:
        if window is None and alibi_slopes is None:  # the kernel's own causal mode, or no mask
            return masks.causal_over_cache(T, S, dtype, device)
        positions = torch.arange(S - T, S, device=device)
    distance = positions[:, None] - torch.arange(S, device=positions.device)  # (T, S): p_i - j
    allowed = distance >= 0
    if window is not None:
        allowed = allowed & (distance < window)
    bias = torch.zeros(T, S, dtype=dtype, device=positions.device)
    bias = bias.masked_fill_(~allowed, float("-inf"))
    if alibi_slopes is not None:
        bias = bias + bias_from_distance(alibi_slopes, distance).to(dtype)  # (H, T, S)
    return AttentionMask(bias)


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
