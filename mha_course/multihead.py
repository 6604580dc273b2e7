"""Multi-head attention, a drop-in for ``torch.nn.MultiheadAttention``.

    MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,   head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V)

with W_i^Q, W_i^K, W_i^V ∈ R^{E×D}, W^O ∈ R^{E×E}, h = H heads and D = E / H. The h small
projections are one big E×E projection cut into H chunks of D columns, so the code projects once
and then *splits the features into heads* ('b l (h d) -> b h l d'); after attention it merges the
heads back ('b h l d -> b l (h d)') and applies W^O.

Shapes: B batch, L query length, S key length, E embed_dim, H num_heads, D head_dim.

Conventions are torch's, so a state dict or a call moves between the two unchanged:

* parameters ``in_proj_weight`` (3E, E) = [W^Q; W^K; W^V] and ``in_proj_bias`` (3E,) when
  kdim == vdim == E, else ``q_proj_weight``, ``k_proj_weight``, ``v_proj_weight``; ``out_proj`` = W^O;
* masks: a bool mask is True where attention is **not allowed**; a float mask is added to the
  scores; ``attn_mask`` is (L, S) or (B·H, L, S), ``key_padding_mask`` is (B, S).

The two differences from torch: ``batch_first`` defaults to True, and a query with nothing to
attend to gets zero attention (output = the out_proj bias, weights 0) instead of NaN.

This module is the projections and the heads; the attention itself is
:func:`mha_course.kernel.attend_heads`. ``forward`` checks its arguments and converts the masks
once (:mod:`mha_course.masks`), then calls :meth:`MultiHeadAttention.attend`, which checks
nothing: the course's attention protocol, ``attend(query, key, value, mask, *, rope=None,
cache=None, need_weights=False) -> (output, weights)``, which the encoder's and decoder's layers
call directly with the masks their stack converted once for all its layers (and which
:class:`~mha_course.modern.GroupedQueryAttention` follows too).
"""

from __future__ import annotations

import torch
import torch.nn as nn
import torch.nn.functional as F

from . import kernel, masks
from ._validate import (
    require_divisible,
    require_floating,
    require_ndim,
    require_positive_int,
    require_probability,
    require_size,
    shape_str,
)
from .cache import LayerCache
from .rope import Rotation

__all__ = ["MultiHeadAttention", "batch_and_length"]


class MultiHeadAttention(nn.Module):
    """H heads of scaled dot-product attention, run in parallel and mixed by an output projection.

    Same constructor and forward as ``torch.nn.MultiheadAttention`` (except ``batch_first=True``
    by default; ``add_bias_kv`` and ``add_zero_attn`` are not supported). The forward picks the
    fastest route that gives what was asked for:

    * ``need_weights=False``: the fused kernel ``torch.nn.functional.scaled_dot_product_attention``,
      which never builds the (B, H, L, S) weights;
    * ``need_weights=True``: lesson 01's attention written out, softmax(Q Kᵀ / √D + M) V, which
      keeps the weights (:func:`mha_course.kernel.attention`);
    * self-attention (``query is key is value``): one (3E × E) projection for Q, K and V at once.

    ``is_causal=True`` is, as in torch, a promise that ``attn_mask`` is the causal mask: with no
    ``key_padding_mask`` and ``need_weights=False`` the kernel's own causal mode runs and
    ``attn_mask`` is not read. Unlike torch, ``is_causal=True`` also works *without* ``attn_mask``:
    the causal mask (query i sees keys 0..i) is then built here.
    """

    def __init__(
        self,
        embed_dim: int,
        num_heads: int,
        dropout: float = 0.0,
        bias: bool = True,
        kdim: int | None = None,
        vdim: int | None = None,
        batch_first: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        require_positive_int("embed_dim", embed_dim)
        require_positive_int("num_heads", num_heads)
        require_divisible("embed_dim", embed_dim, "num_heads", num_heads)
        require_probability("dropout", dropout)
        for name, dim in (("kdim", kdim), ("vdim", vdim)):
            if dim is not None:
                require_positive_int(name, dim)
        super().__init__()
        factory = {"device": device, "dtype": dtype}
        self.embed_dim, self.num_heads, self.head_dim = embed_dim, num_heads, embed_dim // num_heads
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.dropout = dropout
        self.batch_first = batch_first

        if self._qkv_same_embed_dim:  # W^Q, W^K, W^V stacked: one matmul projects all three
            self.in_proj_weight = nn.Parameter(torch.empty(3 * embed_dim, embed_dim, **factory))
            for name in ("q_proj_weight", "k_proj_weight", "v_proj_weight"):
                self.register_parameter(name, None)
        else:
            self.q_proj_weight = nn.Parameter(torch.empty(embed_dim, embed_dim, **factory))
            self.k_proj_weight = nn.Parameter(torch.empty(embed_dim, self.kdim, **factory))
            self.v_proj_weight = nn.Parameter(torch.empty(embed_dim, self.vdim, **factory))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = nn.Parameter(torch.empty(3 * embed_dim, **factory))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)  # W^O
        # torch's optional extras, read by code written for torch; not supported here.
        self.bias_k = self.bias_v = None
        self.add_zero_attn = False
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        """torch's initialisation, in torch's order: the same seed gives the same weights."""
        if self._qkv_same_embed_dim:
            nn.init.xavier_uniform_(self.in_proj_weight)
        else:
            for weight in (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight):
                nn.init.xavier_uniform_(weight)
        if self.in_proj_bias is not None:
            nn.init.zeros_(self.in_proj_bias)
            nn.init.zeros_(self.out_proj.bias)

    @classmethod
    def from_torch(cls, module: nn.MultiheadAttention) -> MultiHeadAttention:
        """A copy of a ``torch.nn.MultiheadAttention``: same configuration (``batch_first``
        included), same weights, same train/eval mode."""
        if not isinstance(module, nn.MultiheadAttention):
            raise TypeError(
                f"module must be a torch.nn.MultiheadAttention, got {type(module).__name__}"
            )
        if module.bias_k is not None or module.add_zero_attn:
            raise ValueError(
                "add_bias_kv=True and add_zero_attn=True are not supported by MultiHeadAttention"
            )
        weight = module.out_proj.weight
        ours = cls(
            module.embed_dim,
            module.num_heads,
            dropout=module.dropout,
            bias=module.in_proj_bias is not None,
            kdim=module.kdim,
            vdim=module.vdim,
            batch_first=module.batch_first,
            device=weight.device,
            dtype=weight.dtype,
        )
        ours.load_state_dict(module.state_dict())
        return ours.train(module.training)

    def extra_repr(self) -> str:
        dims = "" if self._qkv_same_embed_dim else f", kdim={self.kdim}, vdim={self.vdim}"
        return (
            f"embed_dim={self.embed_dim}, num_heads={self.num_heads}{dims}, dropout={self.dropout}, "
            f"bias={self.in_proj_bias is not None}, batch_first={self.batch_first}"
        )

    # ------------------------------------------------------------------ forward

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        key_padding_mask: torch.Tensor | None = None,
        need_weights: bool = True,
        attn_mask: torch.Tensor | None = None,
        average_attn_weights: bool = True,
        is_causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(output, weights)`` exactly as ``torch.nn.MultiheadAttention.forward``.

        output: (B, L, E) batch first, (L, B, E) otherwise, (L, E) for unbatched input.
        weights: None unless ``need_weights``; (B, L, S) averaged over heads, or (B, H, L, S) per
        head with ``average_attn_weights=False`` (no B for unbatched input).
        """
        batched = self._check_inputs(query, key, value)
        if not batched:  # one sequence: a batch of one (and still query is key is value)
            dim = 0 if self.batch_first else 1
            key_is_query, value_is_key = key is query, value is key
            query = query.unsqueeze(dim)
            key = query if key_is_query else key.unsqueeze(dim)
            value = key if value_is_key else value.unsqueeze(dim)
        (B, L), S = (
            batch_and_length(query, self.batch_first),
            batch_and_length(key, self.batch_first)[1],
        )
        scores = (B, self.num_heads, L, S)  # the shape of the attention scores
        masks.require_torch_masks(attn_mask, key_padding_mask, scores, query.dtype, batched)
        mask = masks.from_masked_out(
            attn_mask, key_padding_mask, scores, query.dtype, is_causal, query.device
        )
        output, weights = self.attend(query, key, value, mask, need_weights=need_weights)
        if weights is not None and average_attn_weights:
            weights = weights.mean(dim=1)  # (B, L, S)
        if not batched:
            output = output.squeeze(0 if self.batch_first else 1)
            weights = weights.squeeze(0) if weights is not None else None
        return output, weights

    def attend(
        self,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: masks.AttentionMask,
        *,
        rope: Rotation | None = None,
        cache: LayerCache | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The attention protocol every attention module of the course follows (see
        :mod:`mha_course.lm`): the layer without its checks. Inputs (B, L|S, E) (or (L|S, B, E)
        when not batch first), a canonical mask broadcastable to (B, H, L, S); back ``(output,
        weights (B, H, L, S) or None)``.

        ``rope`` (self-attention): the queries' and keys' rotation, made once per forward by the
        model. ``cache`` (generation): the new keys and values join the cached ones
        (``cache.update``) and the queries attend over all of them."""
        # (B, H, L|S, D) each; the fused kernel reads views, the written-out attention wants copies
        q, k, v = self._project(query, key, value, contiguous=need_weights)
        if rope is not None:
            q, k = rope.rotate(q), rope.rotate(k)
        if cache is not None:
            k, v = cache.update(k, v)  # (B, H, S_cached + S, D) each
        dropout_p = self.dropout if self.training else 0.0
        concat, weights = kernel.attend_heads(
            q, k, v, mask, dropout_p=dropout_p, need_weights=need_weights
        )  # Concat(head_1, ..., head_h) (B, L, E)
        if not self.batch_first:
            concat = concat.transpose(0, 1)  # (L, B, E)
        return self.out_proj(concat), weights  # Concat(head_1, ..., head_h) W^O

    # The head split is an einops pattern written with view/permute: in this hot path
    # rearrange's own overhead (a few µs a call) is measurable for short sequences.

    def _split_heads(self, x: torch.Tensor, parts: int = 1) -> torch.Tensor:
        """'b l (parts h d) -> parts b h l d' (from 'l b (parts h d)' when not batch first)."""
        n1, n2, _ = x.shape
        x = x.view(n1, n2, parts, self.num_heads, self.head_dim)  # (B|L, L|B, parts, H, D)
        return x.permute(2, 0, 3, 1, 4) if self.batch_first else x.permute(2, 1, 3, 0, 4)

    def _project(self, query, key, value, contiguous: bool):
        """Q W^Q, K W^K, V W^V, each split into heads: (B, H, L, D), (B, H, S, D), (B, H, S, D).

        Views into the projections' output, or with ``contiguous`` each head's rows side by side in
        memory, the layout a batched matmul wants (for self-attention, one copy makes all three)."""
        if query is key and key is value and self._qkv_same_embed_dim:  # one matmul for all three
            qkv = F.linear(query, self.in_proj_weight, self.in_proj_bias)  # (B, L, 3E)
            qkv = self._split_heads(qkv, parts=3)  # (3, B, H, L, D)
            return (qkv.contiguous() if contiguous else qkv).unbind(0)
        if self._qkv_same_embed_dim:
            w_q, w_k, w_v = self.in_proj_weight.chunk(3)
        else:
            w_q, w_k, w_v = self.q_proj_weight, self.k_proj_weight, self.v_proj_weight
        b_q, b_k, b_v = self.in_proj_bias.chunk(3) if self.in_proj_bias is not None else (None,) * 3
        heads = (
            self._split_heads(F.linear(x, w, b))[0]  # (B, H, L|S, D)
            for x, w, b in ((query, w_q, b_q), (key, w_k, b_k), (value, w_v, b_v))
        )
        return tuple(h.contiguous() if contiguous else h for h in heads)

    # ------------------------------------------------------------------ argument checks

    def _check_inputs(self, query, key, value) -> bool:
        """Validate query, key and value; return whether they are batched (3-D)."""
        for name, x in (("query", query), ("key", key), ("value", value)):
            require_floating(name, x)
            require_ndim(
                name, x, (2, 3), "(3-D for a batch, 2-D (length, features) for one sequence)"
            )
        if not query.dim() == key.dim() == value.dim():
            raise ValueError(
                f"query, key and value must all be batched (3-D) or all unbatched (2-D), got shapes "
                f"{shape_str(query.shape)}, {shape_str(key.shape)} and {shape_str(value.shape)}"
            )
        require_size("query", query, -1, self.embed_dim, "embed_dim")
        require_size("key", key, -1, self.kdim, "kdim")
        require_size("value", value, -1, self.vdim, "vdim")
        batched = query.dim() == 3
        length_dim = 1 if self.batch_first and batched else 0
        if key.size(length_dim) != value.size(length_dim):
            raise ValueError(
                f"key and value must have the same length S (one value per key): key {shape_str(key.shape)} "
                f"has S={key.size(length_dim)}, value {shape_str(value.shape)} has S={value.size(length_dim)}"
            )
        if batched and not query.size(1 - length_dim) == key.size(1 - length_dim) == value.size(
            1 - length_dim
        ):
            where = "dim 0" if self.batch_first else "dim 1 (batch_first=False)"
            raise ValueError(
                f"query, key and value must have the same batch size B in {where}, got shapes "
                f"{shape_str(query.shape)}, {shape_str(key.shape)} and {shape_str(value.shape)}"
            )
        dtype = self.out_proj.weight.dtype
        if not query.dtype == key.dtype == value.dtype == dtype:
            raise ValueError(
                f"query, key and value must have the parameters' dtype {dtype}, got {query.dtype}, "
                f"{key.dtype} and {value.dtype}; convert the inputs or the module (e.g. module.to({query.dtype}))"
            )
        return batched


def batch_and_length(x: torch.Tensor, batch_first: bool) -> tuple[int, int]:
    """(B, length) of a batched input (B, length, ·), or (length, B, ·) when not batch first."""
    return (x.size(0), x.size(1)) if batch_first else (x.size(1), x.size(0))
