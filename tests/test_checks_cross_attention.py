"""The lesson-07 checker of DecoderLayer (causal self-attention, cross-attention, feed-forward,
post-LN) accepts correct layers and names each classic mistake: keys and values taken from the
decoder, the memory mask forgotten or inverted, the causal mask missing, pre-LN, and more."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mha_course import reference
from mha_course.checks import check_decoder_layer
from mha_course.layernorm import LayerNorm

from checker_helpers import fails_with, not_done, passes


def tril(L):
    return torch.ones(L, L, dtype=torch.bool).tril()


def decoder_layer(forward, cross_name="multihead_attn"):
    """A DecoderLayer with the skeleton's parts and the given forward(self, x, memory, mask)."""

    class DecoderLayer(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__()
            self.self_attn = reference.MultiHeadAttention(d_model, num_heads)
            setattr(self, cross_name, reference.MultiHeadAttention(d_model, num_heads))
            self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
            self.norm1, self.norm2, self.norm3 = (LayerNorm(d_model) for _ in range(3))
            self.dropout = nn.Dropout(dropout)

        def cross(self, q, kv, mask):
            return getattr(self, cross_name)(q, kv, kv, attn_mask=mask)[0]

        def selfattn(self, x, mask="causal"):
            mask = tril(x.size(1)) if isinstance(mask, str) else mask
            return self.self_attn(x, x, x, attn_mask=mask)[0]

        def ffn(self, z, act=F.relu):
            return self.linear2(self.dropout(act(self.linear1(z))))

    DecoderLayer.forward = forward
    return DecoderLayer


def right(self_mask="causal", memory="memory", mask="given", act=F.relu):
    def forward(self, x, memory_, memory_mask=None):
        z1 = self.norm1(x + self.dropout(self.selfattn(x, self_mask)))
        kv = memory_ if memory == "memory" else z1
        m = {
            "given": memory_mask,
            None: None,
            "inverted": None if memory_mask is None else ~memory_mask,
        }[mask]
        if memory == "decoder":
            m = tril(x.size(1))
        z2 = self.norm2(z1 + self.dropout(self.cross(z1, kv, m)))
        return self.norm3(z2 + self.dropout(self.ffn(z2, act)))

    return forward


def pre_ln(self, x, memory, memory_mask=None):
    x = x + self.selfattn(self.norm1(x))
    x = x + self.cross(self.norm2(x), memory, memory_mask)
    return x + self.ffn(self.norm3(x))


def cross_reads_x(self, x, memory, memory_mask=None):
    z1 = self.norm1(x + self.selfattn(x))
    z2 = self.norm2(z1 + self.cross(x, memory, memory_mask))
    return self.norm3(z2 + self.ffn(z2))


def cross_first(self, x, memory, memory_mask=None):
    z1 = self.norm1(x + self.cross(x, memory, memory_mask))
    z2 = self.norm2(z1 + self.selfattn(z1))
    return self.norm3(z2 + self.ffn(z2))


def no_cross_residual(self, x, memory, memory_mask=None):
    z1 = self.norm1(x + self.selfattn(x))
    z2 = self.norm2(self.cross(z1, memory, memory_mask))
    return self.norm3(z2 + self.ffn(z2))


def ffn_reads_z1(self, x, memory, memory_mask=None):
    z1 = self.norm1(x + self.selfattn(x))
    z2 = self.norm2(z1 + self.cross(z1, memory, memory_mask))
    return self.norm3(z2 + self.ffn(z1))


def norm1_twice(self, x, memory, memory_mask=None):
    z1 = self.norm1(x + self.selfattn(x))
    z2 = self.norm1(z1 + self.cross(z1, memory, memory_mask))
    return self.norm3(z2 + self.ffn(z2))


def roles_swapped(self, x, memory, memory_mask=None):
    """The cross-attention's queries from memory, its keys and values from the decoder."""
    z1 = self.norm1(x + self.selfattn(x))
    z2 = self.norm2(z1 + self.cross(memory, z1, memory_mask))
    return self.norm3(z2 + self.ffn(z2))


def always_dropout(self, x, memory, memory_mask=None):
    out = right()(self, x, memory, memory_mask)
    return F.dropout(out, self.dropout.p, training=True)  # ignores eval mode


@pytest.mark.parametrize(
    "candidate",
    [reference.DecoderLayer, decoder_layer(right()), decoder_layer(right(), "cross_attn")],
)
def test_decoder_layer_accepts_correct_answers(candidate, capsys):
    passes(check_decoder_layer, candidate, capsys)


@pytest.mark.parametrize(
    "forward, phrase",
    [
        (right(memory="decoder"), "takes its keys and values from the decoder"),
        (right(mask=None), "the memory mask is not used"),
        (right(mask="inverted"), "the memory mask is inverted"),
        (right(self_mask=None), "there is no causal mask"),
        (right(act=F.gelu), "the activation is the other one"),
        (pre_ln, "the LayerNorms sit in the other place"),
        (cross_reads_x, "queries come from the layer's input x"),
        (cross_first, "the two attentions run in the other order"),
        (no_cross_residual, "residual around the cross-attention is missing"),
        (ffn_reads_z1, "reads what the sub-layer before it read"),
        (norm1_twice, "you used norm1 twice"),
        (always_dropout, "dropout is still on"),
        (roles_swapped, "the cross-attention's roles are swapped"),
    ],
)
def test_decoder_layer_names_each_mistake(forward, phrase):
    fails_with(check_decoder_layer, decoder_layer(forward), phrase)


def test_decoder_layer_missing_cross_attention_and_not_done(capsys):
    class NoCross(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__()
            self.self_attn = reference.MultiHeadAttention(d_model, num_heads)

        def forward(self, x, memory, memory_mask=None):
            return x

    fails_with(check_decoder_layer, NoCross, "has no attribute `multihead_attn`")

    class Torch(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__()
            self.layer = nn.TransformerDecoderLayer(d_model, num_heads, d_ff, dropout)

    fails_with(check_decoder_layer, Torch, "calls torch's nn.TransformerDecoderLayer")

    class Skeleton(reference.DecoderLayer):
        def forward(self, x, memory, memory_mask=None):
            raise NotImplementedError

    not_done(check_decoder_layer, Skeleton, capsys)
