"""Checker for lesson 07's decoder layer with cross-attention, against
``torch.nn.TransformerDecoderLayer`` (post-LN, ReLU, as the original paper).

The learner's layer is built as ``DecoderLayer(d_model, num_heads, d_ff, dropout)``; torch's
weights are copied into it by name (``self_attn`` and ``multihead_attn``, the cross-attention,
each cut from torch's packed ``in_proj_weight`` into ``q_proj``, ``k_proj``, ``v_proj``;
``linear1``, ``linear2``, ``norm1``..``norm3``). The exercise's ``memory_mask`` is True where a
query **may attend** (a real source token); torch's ``memory_key_padding_mask`` is True at the
padding, so the checker inverts it for torch.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ._core import Mistake, call_candidate, checker, compare
from ._failure import ExerciseFailure
from ._steps import build_module, seeded_randn
from .decoder import (
    BLOCK_ROUTINES,
    causal,
    load_attention,
    load_part,
    nan_cause,
    part_of,
    require_module_output,
    torch_attend,
    torch_layer,
)

__all__ = ["check_decoder_layer"]

_ATOL, _RTOL = 1e-4, 1e-3
_PARTS = "self_attn, multihead_attn, linear1, linear2, norm1, norm2, norm3, dropout"
_STEPS = (
    "z1 = norm1(x + self_attn(x, x, x, causal)[0]); "
    "z2 = norm2(z1 + multihead_attn(z1, memory, memory, memory_mask)[0]); "
    "out = norm3(z2 + linear2(relu(linear1(z2))))"
)


class _Parts:
    """torch's decoder layer in pieces (the exercise's masks: True = may attend)."""

    def __init__(self, layer: nn.TransformerDecoderLayer, memory_mask):
        self.layer, self.memory_mask = layer, memory_mask

    def self_attend(self, x, mask="causal"):
        mask = causal(x.size(1)) if isinstance(mask, str) else mask
        return torch_attend(self.layer.self_attn, x, x, x, mask)

    def cross(self, z, memory, mask=...):
        mask = self.memory_mask if mask is ... else mask
        return torch_attend(self.layer.multihead_attn, z, memory, memory, mask)

    def ffn(self, z, activation=F.relu):
        return self.layer.linear2(activation(self.layer.linear1(z)))

    def norm(self, i, x):
        return getattr(self.layer, f"norm{i}")(x)


def _post_ln(
    p: _Parts, x, memory, *, self_mask="causal", memory_mask=..., activation=F.relu, norms=(1, 2, 3)
):
    z1 = p.norm(norms[0], x + p.self_attend(x, self_mask))
    z2 = p.norm(norms[1], z1 + p.cross(z1, memory, memory_mask))
    return p.norm(norms[2], z2 + p.ffn(z2, activation))


def _mistakes(layer: nn.TransformerDecoderLayer, memory_mask) -> list[Mistake]:
    p = _Parts(layer, memory_mask)

    def run(**kw):
        return lambda x, memory: _post_ln(p, x, memory, **kw)

    def self_twice(x, memory):
        z1 = p.norm(1, x + p.self_attend(x))
        z2 = p.norm(2, z1 + p.cross(z1, z1, mask=causal(x.size(1))))
        return p.norm(3, z2 + p.ffn(z2))

    def self_twice_no_mask(x, memory):
        z1 = p.norm(1, x + p.self_attend(x))
        z2 = p.norm(2, z1 + p.cross(z1, z1, mask=None))
        return p.norm(3, z2 + p.ffn(z2))

    def cross_reads_x(x, memory):
        z1 = p.norm(1, x + p.self_attend(x))
        z2 = p.norm(2, z1 + p.cross(x, memory))
        return p.norm(3, z2 + p.ffn(z2))

    def cross_first(x, memory):
        z1 = p.norm(1, x + p.cross(x, memory))
        z2 = p.norm(2, z1 + p.self_attend(z1))
        return p.norm(3, z2 + p.ffn(z2))

    def pre_ln(x, memory):
        x = x + p.self_attend(p.norm(1, x))
        x = x + p.cross(p.norm(2, x), memory)
        return x + p.ffn(p.norm(3, x))

    def no_cross_residual(x, memory):
        z1 = p.norm(1, x + p.self_attend(x))
        z2 = p.norm(2, p.cross(z1, memory))
        return p.norm(3, z2 + p.ffn(z2))

    def no_self_residual(x, memory):
        z1 = p.norm(1, p.self_attend(x))
        z2 = p.norm(2, z1 + p.cross(z1, memory))
        return p.norm(3, z2 + p.ffn(z2))

    def no_ffn_residual(x, memory):
        z1 = p.norm(1, x + p.self_attend(x))
        z2 = p.norm(2, z1 + p.cross(z1, memory))
        return p.norm(3, p.ffn(z2))

    def ffn_reads_z1(x, memory):
        z1 = p.norm(1, x + p.self_attend(x))
        z2 = p.norm(2, z1 + p.cross(z1, memory))
        return p.norm(3, z2 + p.ffn(z1))

    found = [
        Mistake(
            "keys and values from the decoder",
            self_twice,
            "your cross-attention takes its keys and values from the decoder (z1, z1, z1): that is "
            "a second self-attention, and the layer never reads the encoder. Queries come from the "
            "decoder, keys and values from the encoder's output: multihead_attn(z1, memory, memory).",
        ),
        Mistake(
            "keys and values from the decoder (no mask)",
            self_twice_no_mask,
            "your cross-attention takes its keys and values from the decoder (z1, z1, z1), not from "
            "the encoder: multihead_attn(z1, memory, memory, attn_mask=memory_mask).",
        ),
        Mistake(
            "no causal mask",
            run(self_mask=None),
            "the self-attention has no causal mask: each target token sees the ones after it, "
            "which in training are the answers. Pass the causal mask (T, T), True on and below "
            "the diagonal, to self_attn.",
        ),
        Mistake(
            "causal mask inverted",
            lambda x, memory: _post_ln(p, x, memory, self_mask=~causal(x.size(1))),
            "the causal mask is inverted: True means 'may attend', so it is True on and below the "
            "diagonal (.tril()).",
        ),
        Mistake(
            "cross-attention reads x",
            cross_reads_x,
            "the cross-attention's queries come from the layer's input x; they come from z1, the "
            "output of the self-attention sub-layer: multihead_attn(z1, memory, memory).",
        ),
        Mistake(
            "cross-attention first",
            cross_first,
            "the two attentions run in the other order: the causal self-attention comes first, "
            "then the cross-attention reads the encoder, then the feed-forward network.",
        ),
        Mistake(
            "pre-LN",
            pre_ln,
            "you wrote the pre-LN layer (normalise first). This exercise, like torch's "
            "TransformerDecoderLayer and the original paper, is post-LN: " + _STEPS + ".",
        ),
        Mistake(
            "no self-attention residual",
            no_self_residual,
            "the residual around the self-attention is missing: z1 = norm1(x + self_attn(...)[0]).",
        ),
        Mistake(
            "no cross-attention residual",
            no_cross_residual,
            "the residual around the cross-attention is missing: z2 = norm2(z1 + "
            "multihead_attn(...)[0]).",
        ),
        Mistake(
            "no FFN residual",
            no_ffn_residual,
            "the residual around the feed-forward network is missing: norm3(z2 + FFN(z2)).",
        ),
        Mistake(
            "FFN reads z1",
            ffn_reads_z1,
            "the feed-forward network reads z1; it reads z2, the cross-attention sub-layer's output.",
        ),
        Mistake(
            "norms out of order",
            run(norms=(2, 1, 3)),
            "norm1 and norm2 are swapped: norm1 after the self-attention, norm2 after the "
            "cross-attention, norm3 after the feed-forward network.",
        ),
        Mistake(
            "one norm for two sub-layers",
            run(norms=(1, 1, 3)),
            "you used norm1 twice: each sub-layer has its own LayerNorm, norm1, norm2, norm3.",
        ),
        Mistake(
            "GELU",
            run(activation=F.gelu),
            "the activation is GELU; this layer, like torch's default, uses ReLU.",
        ),
    ]
    if memory_mask is not None:
        found[2:2] = [
            Mistake(
                "memory mask forgotten",
                run(memory_mask=None),
                "the memory mask is not used: the decoder attends to the encoder's padding "
                "positions too. Pass memory_mask to the cross-attention: "
                "multihead_attn(z1, memory, memory, attn_mask=memory_mask).",
            ),
            Mistake(
                "memory mask inverted",
                run(memory_mask=~memory_mask),
                "the memory mask is inverted: it is True at the real source tokens, where a query "
                "may attend (torch's memory_key_padding_mask is the opposite); pass it on unchanged.",
            ),
        ]
    return found


def _load(layer, source: nn.TransformerDecoderLayer, case: str) -> None:
    d_model, d_ff = source.linear1.in_features, source.linear1.out_features
    made = ": self.{} = MultiHeadAttention(d_model, num_heads)"
    attn = part_of(layer, "self_attn", case, "DecoderLayer", _PARTS)
    load_attention(attn, source.self_attn, case, "self_attn", made.format("self_attn"))
    cross = getattr(layer, "multihead_attn", None) or getattr(layer, "cross_attn", None)
    if cross is None:
        raise ExerciseFailure(
            f"Case {case!r}: your DecoderLayer has no attribute `multihead_attn`: the "
            f"cross-attention, a second MultiHeadAttention(d_model, num_heads) (torch's name for "
            f"it). The exercise names the parts {_PARTS}."
        )
    load_attention(
        cross, source.multihead_attn, case, "multihead_attn", made.format("multihead_attn")
    )
    for name, made_part in (
        ("linear1", f"nn.Linear(d_model, d_ff) = nn.Linear({d_model}, {d_ff})"),
        ("linear2", f"nn.Linear(d_ff, d_model) = nn.Linear({d_ff}, {d_model})"),
        ("norm1", f"LayerNorm(d_model) = LayerNorm({d_model})"),
        ("norm2", f"LayerNorm(d_model) = LayerNorm({d_model})"),
        ("norm3", f"LayerNorm(d_model) = LayerNorm({d_model})"),
    ):
        load_part(layer, name, getattr(source, name), case, "DecoderLayer", _PARTS, made_part)


def _padding(lengths, S):
    """(B, 1, 1, S), True at the real source tokens."""
    return (torch.arange(S) < torch.tensor(lengths)[:, None]).view(len(lengths), 1, 1, S)


def _cases():
    randn = seeded_randn(74)
    # (case, d_model, num_heads, d_ff, dropout, x, memory, memory_mask)
    # fmt: off
    yield ("d_model=16, 4 heads, d_ff=32; x (2, 5, 16), memory (2, 7, 16), no memory mask",
           16, 4, 32, 0.0, randn(2, 5, 16), randn(2, 7, 16), None)
    yield ("memory_mask (2, 1, 1, 7), True = a real source token: the last 3 of source 2 are "
           "padding; x (2, 4, 16)",
           16, 2, 24, 0.0, randn(2, 4, 16), randn(2, 7, 16), _padding([7, 4], 7))
    yield ("one target token (a decoding step): x (3, 1, 12), memory (3, 6, 12), memory_mask",
           12, 3, 24, 0.0, randn(3, 1, 12), randn(3, 6, 12), _padding([6, 2, 5], 6))
    yield ("a target longer than its source: x (1, 8, 8), memory (1, 3, 8); 1 head",
           8, 1, 16, 0.0, randn(1, 8, 8), randn(1, 3, 8), None)
    yield ("dropout=0.3 in eval mode (model.eval()): no dropout at all",
           8, 2, 16, 0.3, randn(2, 4, 8), randn(2, 5, 8), _padding([5, 3], 5))
    # fmt: on


def _require_no_dropout_in_eval(layer, case: str, got, x, memory, kwargs) -> None:
    """In eval mode the layer is deterministic: two calls give the same output."""
    with torch.no_grad():
        again = call_candidate(layer, case, x.clone(), memory.clone(), **kwargs)
    if not torch.equal(got, again):
        raise ExerciseFailure(
            f"Case {case!r}: two calls on the same inputs gave different outputs, although the "
            f"layer is in eval mode.\nLikely cause: dropout is still on. Use an nn.Dropout "
            f"module (model.eval() switches it off)."
        )


@checker(
    "DecoderLayer",
    "Replace `raise NotImplementedError` in DecoderLayer: its parts in __init__; in forward, "
    "causal self-attention, cross-attention to memory, the feed-forward network, each with "
    "its residual and norm.",
    own_work=BLOCK_ROUTINES,
)
def check_decoder_layer(candidate) -> int:
    """Check ``candidate(d_model, num_heads, d_ff, dropout=0.0)`` (a DecoderLayer class:
    ``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``, ``norm1``..``norm3``, ``dropout``;
    ``forward(x, memory, memory_mask=None)``, post-LN, ReLU) against
    ``torch.nn.TransformerDecoderLayer`` with the same weights."""
    with torch.random.fork_rng(devices=[]):
        n = 0
        for seed, (case, d, h, ff, dropout, x, memory, mask) in enumerate(_cases()):
            layer = build_module(
                candidate, case, "DecoderLayer", (d, h, ff, dropout), "check_decoder_layer"
            )
            layer.eval()
            source = torch_layer(nn.TransformerDecoderLayer, d, h, ff, seed, activation="relu")
            _load(layer, source, case)
            T = x.size(1)
            kwargs = {} if mask is None else {"memory_mask": mask}
            with torch.no_grad():
                got = call_candidate(
                    layer,
                    case,
                    x.clone(),
                    memory.clone(),
                    **kwargs,
                    crash_hint="forward(x, memory, memory_mask=None): self-attention on x with the "
                    "causal mask built from x's length; the cross-attention's queries come from "
                    "the decoder, its keys and values from memory (B, S, d_model).",
                )
                padding = None if mask is None else ~mask.view(mask.size(0), -1)
                expected = source(
                    x.double(),
                    memory.double(),
                    tgt_mask=~causal(T),
                    memory_key_padding_mask=padding,
                )
            require_module_output(case, got, x.shape, "layer")
            if dropout > 0:
                _require_no_dropout_in_eval(layer, case, got, x, memory, kwargs)
            compare(
                case,
                "outputs",
                got,
                expected,
                atol=_ATOL,
                rtol=_RTOL,
                mistakes=_mistakes(source, mask),
                args=(x.double(), memory.double()),
                cause=nan_cause(got),
                fallback_cause="compare your forward with the steps: " + _STEPS + ".",
            )
            n += 1
        return n
