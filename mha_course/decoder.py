"""The Transformer decoder layer and the decoder stack of an encoder–decoder model.

A decoder layer is three sub-layers, each wrapped in a residual connection and a LayerNorm
(post-LN, as the original paper; pre-LN with ``norm_first=True``):

    1. causal self-attention over the target:   queries, keys, values from the decoder
    2. cross-attention to the encoder's output: queries from the decoder, keys and values
       from ``memory`` (the encoder's last hidden states)
    3. the position-wise feed-forward network

``DecoderLayer`` and ``Decoder`` are drop-ins for ``torch.nn.TransformerDecoderLayer`` and
``torch.nn.TransformerDecoder``: same arguments, attribute names and state dicts, same masks
(True = masked **out**), plus ``need_weights=True`` to see every head's self- and
cross-attention weights. ``batch_first`` defaults to True here.

As in the encoder, a layer's work is split at the door: :meth:`DecoderLayer.prepare` checks the
inputs and converts the masks once (:mod:`mha_course.masks`), :meth:`DecoderLayer.forward_prepared`
checks nothing, and a stack prepares once with its first layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from . import masks
from ._validate import shape_str
from .encoder import (
    LayerStack,
    _activation,
    check_sequence,
    feed_forward_layers,
    require_layer_sizes,
    settings_from_torch,
    unbatch,
)
from .layernorm import LayerNorm
from .multihead import MultiHeadAttention, batch_and_length

__all__ = ["DecoderLayer", "Decoder"]


class DecoderLayer(nn.Module):
    """Causal self-attention, cross-attention to ``memory``, then a feed-forward network, each
    with a residual and a norm. Same arguments as ``torch.nn.TransformerDecoderLayer``, except
    that ``batch_first`` defaults to True: tgt (B, T, d_model) and memory (B, S, d_model), or
    (T, B, d_model) and (S, B, d_model) with ``batch_first=False``, or unbatched (T, d_model) and
    (S, d_model). Masks as torch.nn.MultiheadAttention's: ``tgt_mask`` (T, T) or (B·nhead, T, T),
    ``memory_mask`` (T, S) or (B·nhead, T, S), key padding masks (B, T) and (B, S); bool True =
    masked out, float = added to the scores.
    """

    def __init__(
        self,
        d_model: int,
        nhead: int,
        dim_feedforward: int = 2048,
        dropout: float = 0.1,
        activation: str | Callable[[torch.Tensor], torch.Tensor] = "relu",
        layer_norm_eps: float = 1e-5,
        batch_first: bool = True,
        norm_first: bool = False,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        require_layer_sizes(d_model, dim_feedforward, dropout, nhead)
        factory = {"device": device, "dtype": dtype}
        attention = {"dropout": dropout, "bias": bias, "batch_first": batch_first, **factory}
        self.self_attn = MultiHeadAttention(d_model, nhead, **attention)
        self.multihead_attn = MultiHeadAttention(d_model, nhead, **attention)  # cross-attention
        self.linear1, self.dropout, self.linear2 = feed_forward_layers(
            d_model, dim_feedforward, dropout, bias, factory
        )

        self.norm_first = norm_first
        norm = {"eps": layer_norm_eps, "bias": bias, **factory}
        self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model, **norm) for _ in range(3))
        self.dropout1, self.dropout2, self.dropout3 = (nn.Dropout(dropout) for _ in range(3))
        self.activation = _activation(activation)
        self.d_model, self.batch_first = d_model, batch_first

    @classmethod
    def from_torch(cls, layer: nn.TransformerDecoderLayer) -> DecoderLayer:
        """A copy of a ``torch.nn.TransformerDecoderLayer``: same configuration, weights and mode."""
        if not isinstance(layer, nn.TransformerDecoderLayer):
            raise TypeError(
                f"layer must be a torch.nn.TransformerDecoderLayer, got {type(layer).__name__}"
            )
        ours = cls(**settings_from_torch(layer))
        ours.norm2.eps, ours.norm3.eps = layer.norm2.eps, layer.norm3.eps
        ours.load_state_dict(layer.state_dict())
        return ours.train(layer.training)

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        tgt_is_causal: bool = False,
        memory_is_causal: bool = False,
        *,
        need_weights: bool = False,
    ):
        """The layer's output, same shape as ``tgt``; with ``need_weights=True`` also the
        weights of every head, ``(self-attention (B, nhead, T, T), cross-attention (B, nhead,
        T, S))``. ``tgt_is_causal=True`` without ``tgt_mask`` builds the causal mask."""
        x, mem, self_mask, cross_mask = self.prepare(
            tgt,
            memory,
            (tgt_mask, tgt_key_padding_mask, tgt_is_causal),
            (memory_mask, memory_key_padding_mask, memory_is_causal),
        )
        x, weights = self.forward_prepared(x, mem, self_mask, cross_mask, need_weights=need_weights)
        if tgt.dim() == 2:  # one sequence: drop its batch of one again
            x = unbatch(x, self.batch_first)
            weights = tuple(None if w is None else w[0] for w in weights)
        return (x, weights) if need_weights else x

    def forward_prepared(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        self_mask: masks.AttentionMask,
        cross_mask: masks.AttentionMask,
        *,
        need_weights: bool = False,
    ):
        """The layer without its checks: batched inputs in the layer's layout and canonical
        masks, as :meth:`prepare` returns them; back ``(output, (self-attention weights,
        cross-attention weights))``, each None unless ``need_weights``."""
        if self.norm_first:
            attended, self_weights = self._sa_block(self.norm1(x), self_mask, need_weights)
            x = x + attended
            read, cross_weights = self._mha_block(self.norm2(x), memory, cross_mask, need_weights)
            x = x + read
            x = x + self._ff_block(self.norm3(x))
        else:
            attended, self_weights = self._sa_block(x, self_mask, need_weights)
            x = self.norm1(x + attended)
            read, cross_weights = self._mha_block(x, memory, cross_mask, need_weights)
            x = self.norm2(x + read)
            x = self.norm3(x + self._ff_block(x))
        return x, (self_weights, cross_weights)

    def _sa_block(self, x, mask: masks.AttentionMask, need_weights: bool):
        """Self-attention over the target: queries, keys and values all come from x."""
        out, weights = self.self_attn.attend(x, x, x, mask, need_weights=need_weights)
        return self.dropout1(out), weights

    def _mha_block(self, x, memory, mask: masks.AttentionMask, need_weights: bool):
        """Cross-attention: the decoder's queries read the encoder's keys and values."""
        out, weights = self.multihead_attn.attend(
            x, memory, memory, mask, need_weights=need_weights
        )
        return self.dropout2(out), weights

    def _ff_block(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout3(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    # ------------------------------------------------------------------ the boundary

    def prepare(self, tgt, memory, self_masks=(None, None, False), cross_masks=(None, None, False)):
        """Check the inputs and masks; return both inputs batched and the two masks (each given
        as ``(attn_mask, key_padding_mask, is_causal)``, as :meth:`forward` takes them) in
        canonical form."""
        check_sequence("tgt", tgt, self.d_model, self.batch_first, self.linear1.weight.dtype)
        check_sequence("memory", memory, self.d_model, self.batch_first, self.linear1.weight.dtype)
        if tgt.dim() != memory.dim():
            raise ValueError(
                f"tgt and memory must both be batched (3-D) or both unbatched (2-D), got shapes "
                f"{shape_str(tgt.shape)} and {shape_str(memory.shape)}"
            )
        batched = tgt.dim() == 3
        dim = 0 if self.batch_first else 1
        x, mem = (tgt, memory) if batched else (tgt.unsqueeze(dim), memory.unsqueeze(dim))
        (B, T), (B_mem, S) = (batch_and_length(t, self.batch_first) for t in (x, mem))
        if B != B_mem:
            raise ValueError(
                f"tgt and memory must have the same batch size, got shapes {shape_str(tgt.shape)} "
                f"and {shape_str(memory.shape)}"
            )
        H = self.self_attn.num_heads
        canonical = []
        for (attn_mask, padding, is_causal), names, lengths, scores in (
            (self_masks, ("tgt_mask", "tgt_key_padding_mask"), ("T", "T"), (B, H, T, T)),
            (cross_masks, ("memory_mask", "memory_key_padding_mask"), ("T", "S"), (B, H, T, S)),
        ):
            masks.require_torch_masks(
                attn_mask, padding, scores, x.dtype, batched, names, "nhead", lengths
            )
            canonical.append(
                masks.from_masked_out(attn_mask, padding, scores, x.dtype, is_causal, x.device)
            )
        return x, mem, *canonical


class Decoder(LayerStack):
    """A stack of ``num_layers`` copies of ``decoder_layer`` (each with its own weights), then an
    optional final ``norm``. Mirrors ``torch.nn.TransformerDecoder``."""

    TORCH, LAYER, ARGUMENT = nn.TransformerDecoder, DecoderLayer, "decoder"

    def __init__(
        self, decoder_layer: nn.Module, num_layers: int, norm: nn.Module | None = None
    ) -> None:
        super().__init__(decoder_layer, num_layers, norm)

    def forward(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        tgt_mask: torch.Tensor | None = None,
        memory_mask: torch.Tensor | None = None,
        tgt_key_padding_mask: torch.Tensor | None = None,
        memory_key_padding_mask: torch.Tensor | None = None,
        tgt_is_causal: bool | None = None,
        memory_is_causal: bool = False,
        *,
        need_weights: bool = False,
    ):
        """The last layer's output (after ``norm``); with ``need_weights=True`` also a list of
        every layer's ``(self-attention, cross-attention)`` weights. The inputs are checked and
        the masks converted once, here. torch's ``tgt_is_causal=None`` (find out by comparing
        ``tgt_mask`` with the causal mask) counts as False: the flag is only a hint."""
        x, mem, self_mask, cross_mask = self.layers[0].prepare(
            tgt,
            memory,
            (tgt_mask, tgt_key_padding_mask, bool(tgt_is_causal)),
            (memory_mask, memory_key_padding_mask, memory_is_causal),
        )
        all_weights = []
        for layer in self.layers:
            x, weights = layer.forward_prepared(
                x, mem, self_mask, cross_mask, need_weights=need_weights
            )
            all_weights.append(weights)
        x = self._final(x, batched=tgt.dim() == 3)
        if tgt.dim() == 2:
            all_weights = [tuple(None if w is None else w[0] for w in ws) for ws in all_weights]
        return (x, all_weights) if need_weights else x
