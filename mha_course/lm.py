"""A decoder-only language model (GPT-style), built from the course's own layers.

    ids (B, T) -> token embedding + position embedding -> N blocks -> LayerNorm -> logits (B, T, V)

Each :class:`DecoderBlock` is pre-LN, x + Attention(LayerNorm(x)), then x + FFN(LayerNorm(x)),
with the **causal** mask: token t attends to tokens 0..t only, so the model can be trained to
predict every next token of a text at once, and generate one token at a time. With a
:class:`~mha_course.cache.KVCache`, a forward over new tokens attends over the keys and values
cached from the tokens before them (their positions continue where the cache stopped). With a
:class:`~mha_course.cache.StaticKVCache` (compiled decoding) the positions are a tensor, the
cache's, and the mask is built from them: nothing the forward computes on the host changes from
one token to the next.

Lesson 08's options make it a model of today's kind, each changing the attention only:
``positions="rope"`` rotates queries and keys by position instead of adding position embeddings,
``positions="alibi"`` adds ALiBi's linear bias to the scores instead, ``num_kv_heads`` shares key/value
heads between query heads (grouped-query attention; 1 is multi-query), ``window`` limits each token
to the last ``window`` tokens (sliding-window attention). With any of them, the blocks' attention is
a :class:`~mha_course.modern.GroupedQueryAttention`.

The attention protocol. Every attention module of the course (``MultiHeadAttention``,
``GroupedQueryAttention``) has one public method with one signature, which blocks and layers
call::

    attend(query, key, value, mask: AttentionMask, *, rope: Rotation | None = None,
           cache: LayerCache | None = None, need_weights: bool = False) -> (output, weights)

``mask`` is canonical (:mod:`mha_course.masks`), converted once at the door; ``rope`` the tokens'
rotation (:meth:`~mha_course.RotaryEmbedding.rotation`); ``cache`` one layer's view of a KV cache,
whose one method ``update(k, v)`` returns every key and value so far. The model's forward computes
what its blocks share once: the tokens' positions (from ``cache.offset``), their mask, their
rotation; each block then runs with them (as Hugging Face's Llama passes its ``position_embeddings``
down).

Shapes: B batch, T tokens, V vocabulary, E = d_model.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import Tensor, nn

from . import masks
from ._validate import require_positive_int, require_probability, shape_str
from .alibi import alibi_slopes
from .cache import KVCache, LayerCache, StaticKVCache
from .encoder import _activation, feed_forward_layers, require_layer_sizes
from .layernorm import LayerNorm
from .modern import GroupedQueryAttention, decoder_mask, require_kv_heads
from .multihead import MultiHeadAttention
from .rope import RotaryEmbedding, Rotation

__all__ = ["DecoderLM", "DecoderBlock"]


class DecoderBlock(nn.Module):
    """One pre-LN block of a decoder-only model, built with its attention (any module with the
    attention protocol's ``attend``):

        x = x + Attention(LayerNorm(x))          (norm1, self_attn, dropout1)
        x = x + FFN(LayerNorm(x))                (norm2, linear1, activation, linear2, dropout2)

    The parameters have the names of :class:`~mha_course.EncoderLayer`'s (``self_attn``,
    ``linear1``, ``linear2``, ``norm1``, ``norm2``), so a model's state dict is the same as when
    its blocks were encoder layers in their pre-LN form.
    """

    def __init__(
        self,
        attention: nn.Module,
        d_model: int,
        dim_feedforward: int,
        dropout: float = 0.0,
        activation: str | Callable[[Tensor], Tensor] = "gelu",
        layer_norm_eps: float = 1e-5,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        require_layer_sizes(d_model, dim_feedforward, dropout)
        factory = {"device": device, "dtype": dtype}
        self.self_attn = attention
        self.linear1, self.dropout, self.linear2 = feed_forward_layers(
            d_model, dim_feedforward, dropout, bias, factory
        )
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.dropout1 = nn.Dropout(dropout)
        self.dropout2 = nn.Dropout(dropout)
        self.activation = _activation(activation)

    def forward(
        self,
        x: Tensor,
        mask: masks.AttentionMask,
        *,
        rope: Rotation | None = None,
        cache: LayerCache | None = None,
    ) -> Tensor:
        """x (B, T, E) -> (B, T, E): the canonical (causal) ``mask``, the tokens' rotation and
        this block's cache as the model made them, handed to the attention."""
        h = self.norm1(x)
        attended, _ = self.self_attn.attend(h, h, h, mask, rope=rope, cache=cache)
        x = x + self.dropout1(attended)
        return x + self.dropout2(self.feed_forward(self.norm2(x)))

    def feed_forward(self, x: Tensor) -> Tensor:
        """The position-wise feed-forward network: the same two Linears on every token."""
        return self.linear2(self.dropout(self.activation(self.linear1(x))))


class DecoderLM(nn.Module):
    """Token and learned position embeddings, ``num_layers`` causal pre-LN blocks
    (:class:`DecoderBlock`), a final LayerNorm and the output head (tied to the token embedding
    unless ``tie_weights=False``).

    ``forward(ids (B, T), cache=None)`` -> logits (B, T, vocab_size): row t scores the token
    that follows ids[:, :t + 1]. ``max_len`` is the longest sequence.

    ``positions`` says how the model knows where a token is: ``"learned"`` (GPT-2: a learned
    vector per position, added to the token embedding) or ``"none"`` (no position vector at the
    input: for schemes that act inside attention instead, lesson 08). :meth:`_embed` is where
    the input's positions are added.

    Lesson 08: ``positions`` may also be ``"rope"`` (queries and keys rotated by position, base
    ``rope_base``: the model's ``rotary``) or ``"alibi"`` (a linear bias on the scores);
    ``num_kv_heads`` (a divisor of ``nhead``) key/value heads shared by the query heads;
    ``window`` (>= 1) the most tokens each token attends to, itself included.
    """

    POSITIONS = ("learned", "none", "rope", "alibi")

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        nhead: int,
        num_layers: int,
        dim_feedforward: int,
        max_len: int,
        dropout: float = 0.0,
        activation: str = "gelu",
        layer_norm_eps: float = 1e-5,
        tie_weights: bool = True,
        bias: bool = True,
        positions: str = "learned",
        device=None,
        dtype=None,
        *,
        num_kv_heads: int | None = None,
        window: int | None = None,
        rope_base: float = 10000.0,
    ) -> None:
        super().__init__()
        if positions not in self.POSITIONS:
            known = ", ".join(repr(p) for p in self.POSITIONS)
            raise ValueError(f"positions must be one of {known}, got {positions!r}")
        for name, value in (
            ("vocab_size", vocab_size),
            ("d_model", d_model),
            ("nhead", nhead),
            ("num_layers", num_layers),
            ("max_len", max_len),
        ):
            require_positive_int(name, value)
        require_probability("dropout", dropout)
        _check_modern(nhead, num_kv_heads, window)
        factory = {"device": device, "dtype": dtype}
        self.token_embedding = nn.Embedding(vocab_size, d_model, **factory)
        self.positions = positions
        self.position_embedding = (
            nn.Embedding(max_len, d_model, **factory) if positions == "learned" else None
        )
        self.dropout = nn.Dropout(dropout)
        self.window = window
        self.num_kv_heads = nhead if num_kv_heads is None else num_kv_heads
        modern = positions in ("rope", "alibi") or self.num_kv_heads != nhead or window is not None

        def attention() -> nn.Module:  # lesson 07's attention, or lesson 08's
            if modern:
                return GroupedQueryAttention(
                    d_model, nhead, self.num_kv_heads, dropout=dropout, bias=bias, **factory
                )
            return MultiHeadAttention(d_model, nhead, dropout=dropout, bias=bias, **factory)

        self.blocks = nn.ModuleList(
            DecoderBlock(
                attention(),
                d_model,
                dim_feedforward,
                dropout,
                activation,
                layer_norm_eps,
                bias,
                **factory,
            )
            for _ in range(num_layers)
        )
        head_dim = d_model // nhead
        self.rotary = RotaryEmbedding(head_dim, rope_base) if positions == "rope" else None
        slopes = None  # ALiBi's slope of each head, kept on the model's device
        if positions == "alibi":
            slopes = alibi_slopes(nhead).to(device=device, dtype=dtype or torch.float32)
        self.register_buffer("alibi_slopes", slopes, persistent=False)
        self.norm = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, **factory)
        self.head = nn.Linear(d_model, vocab_size, bias=False, **factory)
        if tie_weights:  # the same matrix reads a token in and scores it out
            self.head.weight = self.token_embedding.weight
        self.vocab_size, self.d_model, self.max_len = vocab_size, d_model, max_len
        self.num_heads = nhead
        self.apply(_init_weights)

    def new_cache(self, batch_size: int, *, static: bool = False) -> KVCache:
        """An empty KV cache for ``batch_size`` sequences of up to ``max_len`` tokens; with
        ``static=True`` a :class:`~mha_course.cache.StaticKVCache`, for compiled decoding."""
        weight = self.token_embedding.weight
        return (StaticKVCache if static else KVCache)(
            len(self.blocks),
            batch_size,
            self.num_kv_heads,
            self.d_model // self.num_heads,
            self.max_len,
            dtype=weight.dtype,
            device=weight.device,
        )

    def forward(self, ids: Tensor, cache: KVCache | None = None) -> Tensor:
        """Logits (B, T, vocab_size) for token ids (B, T). With ``cache``: ids are the tokens that
        follow the cached ones; they attend over those too, and are cached in turn.

        What every block shares is computed once, here: the tokens' positions, their mask and
        (RoPE) their rotation."""
        B, T = self._check_ids(ids)
        start, S = self._room(B, T, cache)  # the first token's position; the keys seen
        positions = start + torch.arange(T, device=ids.device)  # (T,)
        x = self.dropout(self._embed(ids, positions))
        # a static cache's positions are a tensor: its mask is built from them
        mask = self._mask(T, S, x, None if isinstance(start, int) else positions)
        rope = None if self.rotary is None else self.rotary.rotation(positions, x.dtype)
        for index, block in enumerate(self.blocks):
            x = block(x, mask, rope=rope, cache=None if cache is None else cache.layer(index))
        if cache is not None:
            cache.advance(T)
        return self.head(self.norm(x))  # (B, T, vocab_size)

    def _room(self, B: int, T: int, cache: KVCache | None) -> tuple[int | Tensor, int]:
        """Where the T new tokens start and how many keys they attend over, checked to fit."""
        if cache is not None:
            cache.require_room(B, T)
            return cache.offset, cache.key_length(T)
        if T > self.max_len:
            raise ValueError(
                f"ids has {T} tokens (shape {shape_str((B, T))}), more than max_len = "
                f"{self.max_len} positions"
            )
        return 0, T

    def _mask(self, T: int, S: int, x: Tensor, positions: Tensor | None) -> masks.AttentionMask:
        """The canonical mask of T new tokens over S keys, shared by every block."""
        return decoder_mask(
            T,
            S,
            x.dtype,
            x.device,
            window=self.window,
            alibi_slopes=self.alibi_slopes,
            positions=positions,
        )

    def _embed(self, ids: Tensor, positions: Tensor) -> Tensor:
        """The tokens' embeddings (B, T, E), with their positions (T,) (they continue the
        cache's) added when the model learns them."""
        x = self.token_embedding(ids)
        if self.position_embedding is not None:
            x = x + self.position_embedding(positions)
        return x

    def _check_ids(self, ids) -> tuple[int, int]:
        if not isinstance(ids, Tensor):
            raise TypeError(f"ids must be a torch.Tensor of token ids, got {type(ids).__name__}")
        if ids.dtype not in (torch.long, torch.int):
            raise ValueError(f"ids must hold integer token ids (torch.long), got dtype {ids.dtype}")
        if ids.dim() != 2:
            hint = " (one sequence: ids.unsqueeze(0))" if ids.dim() == 1 else ""
            raise ValueError(f"ids must be 2-D (B, T), got shape {shape_str(ids.shape)}{hint}")
        if ids.size(1) == 0:
            raise ValueError(f"ids has no tokens (shape {shape_str(ids.shape)}): T must be >= 1")
        return ids.size(0), ids.size(1)


def _check_modern(nhead, num_kv_heads, window) -> None:
    """Lesson 08's options: key/value heads that share out the query heads, a window >= 1."""
    if num_kv_heads is not None:
        require_positive_int("nhead", nhead)
        require_kv_heads(nhead, num_kv_heads)
    if window is not None:
        if isinstance(window, bool) or not isinstance(window, int):
            raise TypeError(
                f"window must be an int or None, got {type(window).__name__} {window!r}"
            )
        if window < 1:
            raise ValueError(f"window must be >= 1 (each token sees at least itself), got {window}")


def _init_weights(module: nn.Module) -> None:
    """GPT-2's initialisation: small normal weights (std 0.02), zero biases."""
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)
