"""Lesson 07's encoder–decoder layer (post-LN: causal self-attention, cross-attention to the
encoder's output, FFN), held to torch's ``TransformerDecoderLayer`` with the same weights. Its
``memory_mask`` is True where a query may attend; torch's ``memory_key_padding_mask`` is not."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import masks, reference
from ..layernorm import LayerNorm
from ._core import exercise
from ._table import Case
from .l07_decoder import LAYERS, TEXTS, causal, layer_table, torch_layer


class DecoderLayer(nn.Module):
    """The original decoder layer (post-LN, ReLU): causal self-attention, cross-attention to
    ``memory`` (``memory_mask`` True = may attend), FFN; ``mha_class``, ``norm_class``: parts."""

    def __init__(
        self, d_model, nhead, dim_feedforward, dropout=0.0, *, mha_class=None, norm_class=None
    ):
        super().__init__()
        mha, norm = mha_class or reference.MultiHeadAttention, norm_class or LayerNorm
        self.self_attn, self.multihead_attn = mha(d_model, nhead), mha(d_model, nhead)
        self.linear1 = nn.Linear(d_model, dim_feedforward)
        self.linear2 = nn.Linear(dim_feedforward, d_model)
        self.norm1, self.norm2, self.norm3 = (norm(d_model) for _ in range(3))
        self.dropout = nn.Dropout(dropout)

    def forward(self, x, memory, memory_mask=None):
        attended = self.self_attn(x, x, x, attn_mask=causal(x.size(-2), x.device))[0]
        z = self.norm1(x + self.dropout(attended))
        read = self.multihead_attn(z, memory, memory, attn_mask=memory_mask)[0]
        z = self.norm2(z + self.dropout(read))
        ffn = self.linear2(self.dropout(F.relu(self.linear1(z))))
        return self.norm3(z + self.dropout(ffn))


_TEXTS = {
    "keys and values from the decoder": "your cross-attention takes its keys and values from "
    "the decoder: a second self-attention, and the layer never reads the encoder. Queries come "
    "from the decoder, keys and values from the encoder's output, memory.",
    "keys and values from the decoder (no mask)": "your cross-attention takes its keys and "
    "values from the decoder, not from the encoder's output, memory.",
    "memory mask forgotten": "the memory mask is not used: the decoder attends to the encoder's "
    "padding too. It goes to the cross-attention.",
    "memory mask inverted": "the memory mask is inverted: it is True at the real source tokens, "
    "where a query may attend (torch's memory_key_padding_mask is the opposite).",
    "cross-attention reads x": "the cross-attention's queries come from the layer's input x; "
    "they come from the self-attention sub-layer's result (after norm1).",
    "cross-attention first": "the two attentions run in the other order: the causal "
    "self-attention first, then the cross-attention, then the feed-forward network.",
    "no cross-attention residual": "the residual around the cross-attention is missing.",
    **TEXTS,
}
_FLAWS = [f for f in _TEXTS if "norm on the" not in f and "not normalised" not in f]
_STEPS = (
    "post-LN: each sub-layer adds its output to its input, then normalises: norm1 after the "
    "causal self-attention, norm2 after the cross-attention (queries from the decoder, keys and "
    "values from memory), norm3 after the feed-forward network."
)
_CRASH = (
    "the self-attention reads x with the causal mask (T, T) built from x's length; the "
    "cross-attention's queries come from the decoder, its keys and values from memory."
)
_TODO = (
    "Replace `raise NotImplementedError` in DecoderLayer: its parts in __init__; in forward, "
    "causal self-attention, cross-attention to memory, the FFN, each with its residual and norm."
)
_LAYERS = [  # name, (d_model, nhead, dim_feedforward, dropout), (B, T, S), memory's lengths?
    ("x (2, 5, 16), memory (2, 7, 16), no memory mask", (16, 4, 32, 0.0), (2, 5, 7)),
    ("memory_mask (2, 1, 1, 7): 3 padding tokens in source 2", (16, 2, 24, 0.0), (2, 4, 7), [7, 4]),
    ("one target token, x (3, 1, 12); memory_mask", (12, 3, 24, 0.0), (3, 1, 6), [6, 2, 5]),
    ("a target longer than its source: x (1, 8, 8), memory (1, 3, 8)", (8, 1, 16, 0.0), (1, 8, 3)),
    ("dropout 0.3 in eval mode: no dropout at all", (8, 2, 16, 0.3), (2, 4, 5), [5, 3]),
]


def _cases():
    g = torch.Generator().manual_seed(74)
    for seed, (name, sizes, (B, T, S), *lengths) in enumerate(_LAYERS):
        layer = torch_layer(nn.TransformerDecoderLayer, sizes, seed, "relu")
        x, memory = (torch.randn(B, n, sizes[0], generator=g) for n in (T, S))
        real = [torch.arange(S) < torch.tensor(n).view(-1, 1, 1, 1) for n in lengths]
        mask = dict(zip(["memory_mask"], real))  # (B, 1, 1, S), or none without lengths
        yield Case(name, (layer, x, memory), mask, {"sizes": sizes, "dropout": sizes[3]})


def _torch_decoder_layer(layer, x, memory, memory_mask=None):
    padding = None if memory_mask is None else masks.other_convention(memory_mask.flatten(1))
    causal_mask = masks.other_convention(causal(x.size(1)))
    return layer(x, memory, tgt_mask=causal_mask, memory_key_padding_mask=padding)


TABLE = layer_table(_cases, _torch_decoder_layer, _FLAWS, _TEXTS, _STEPS, _CRASH)
check_decoder_layer = exercise(
    "DecoderLayer", "07", reference=DecoderLayer, todo=_TODO, points=2, own_work=LAYERS, table=TABLE
)
