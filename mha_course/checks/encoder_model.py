"""Checker for lesson 04's model: token ids in, a score per token at every position out.

``EncoderModel(vocab_size, max_len, d_model, num_heads, d_ff, num_layers)`` is Step 1 (the token
embedding plus the positional encoding), N encoder layers and a linear read-out;
``forward(tokens, padding)`` takes the padding as the data gives it, True at the pads. The checker
builds the model, makes its layers differ from one another (so the order in which they run shows),
and compares its scores with what its own parts give when put together rightly: the embedding, the
course's sinusoidal table, every layer in turn with the padding mask turned into the layers'
convention (True where a query may attend), and the read-out. Whatever layer class the model uses
(the learner's, or the course's in its place) is the one it is checked with.
"""

from __future__ import annotations

import math

import torch
from einops import rearrange
from torch import nn

from ..positional import positional_encoding
from ._core import Mistake, call_candidate, checker
from ._failure import ExerciseFailure
from ._steps import build_module, call_diagnosed, require_tensor
from .encoder_parts import _make_copies_differ, module_list

__all__ = ["check_encoder_model"]

_LAYERS = "nn.ModuleList(EncoderLayer(d_model, num_heads, d_ff) for _ in range(num_layers))"
_MASK = "~padding, shaped (B, 1, 1, L)"


def _may_attend(padding: torch.Tensor) -> torch.Tensor:
    """The layers' mask from the data's padding: True where a query may attend, (B, 1, 1, L)."""
    return rearrange(~padding, "b s -> b 1 1 s")


class _Parts:
    """The candidate's own embedding, layers and read-out, put together rightly or wrongly."""

    def __init__(self, embed, layers, readout, pe):
        self.embed, self.layers, self.readout, self.pe = embed, layers, readout, pe

    def step1(self, tokens, scale=1.0, positions=True):
        x = self.embed(tokens) * scale
        return x + self.pe[: tokens.size(1)] if positions else x

    def run(self, tokens, padding, *, mask=..., masks_for=None, layers=None, chain=True, **step1):
        x0 = x = self.step1(tokens, **step1)
        mask = _may_attend(padding) if mask is ... else mask
        for i, layer in enumerate(self.layers if layers is None else layers):
            out = layer(x if chain else x0, attn_mask=mask if masks_for is None else masks_for(i))
            x = out
        return self.readout(x)


def _mistakes(p: _Parts, d_model: int) -> list[Mistake]:
    return [
        Mistake(
            "no positional encoding",
            lambda tokens, padding: p.run(tokens, padding, positions=False),
            "Step 1 has no positional encoding: X' = Embedding + PositionEncoding, the first L "
            "rows of the PE table added to the embeddings.",
        ),
        Mistake(
            "embeddings scaled",
            lambda tokens, padding: p.run(tokens, padding, scale=math.sqrt(d_model)),
            "you scaled the embeddings by √d_model. The paper does (section 3.4), but this "
            "lesson's Step 1 is the DLI's: Embedding + PositionEncoding, unscaled.",
        ),
        Mistake(
            "padding as the mask",
            lambda tokens, padding: p.run(tokens, padding, mask=padding[:, None, None, :]),
            "you handed the layers `padding` itself: it is True at the pads, but the layers' "
            f"mask is True where a query may attend. Invert it: {_MASK}.",
        ),
        Mistake(
            "mask (B, L) as it is",
            lambda tokens, padding: p.run(tokens, padding, mask=~padding),
            "the mask is (B, L), so it lines up with the scores' last two axes (L, S) instead of "
            f"(B, S): give it one axis for the heads and one for the queries, {_MASK}.",
        ),
        Mistake(
            "mask on the queries",
            lambda tokens, padding: p.run(tokens, padding, mask=(~padding)[:, None, :, None]),
            "your mask (B, 1, L, 1) masks queries, not keys: real tokens still read the pads. "
            f"Padding is a property of the keys: {_MASK}.",
        ),
        Mistake(
            "no mask",
            lambda tokens, padding: p.run(tokens, padding, mask=None),
            f"the layers get no mask, so every token attends to the padding too: pass {_MASK}, "
            "to every layer.",
        ),
        Mistake(
            "mask only to the first layer",
            lambda tokens, padding: p.run(
                tokens, padding, masks_for=lambda i: _may_attend(padding) if i == 0 else None
            ),
            "only the first layer gets the mask; every layer needs it, or the later ones read "
            "the pads.",
        ),
        Mistake(
            "every layer on Step 1",
            lambda tokens, padding: p.run(tokens, padding, chain=False),
            "every layer reads Step 1's output; each one must read the previous layer's output.",
        ),
        Mistake(
            "layers in reverse order",
            lambda tokens, padding: p.run(tokens, padding, layers=p.layers[::-1]),
            "the layers run in reverse order; self.layers[0] comes first.",
        ),
        Mistake(
            "only the first layer",
            lambda tokens, padding: p.run(tokens, padding, layers=p.layers[:1]),
            "only the first layer runs; run them all, in order, each on the previous one's output.",
        ),
        Mistake(
            "only the last layer",
            lambda tokens, padding: p.run(tokens, padding, layers=p.layers[-1:]),
            "only the last layer runs (x reassigned from Step 1 in the loop?); each layer reads "
            "the previous one's output.",
        ),
        Mistake(
            "the first layer, num_layers times",
            lambda tokens, padding: p.run(tokens, padding, layers=p.layers[:1] * len(p.layers)),
            "you ran the first layer num_layers times; run each layer once, in order.",
        ),
    ]


def _cases():
    """(case, vocab_size, max_len, d_model, num_heads, d_ff, num_layers, tokens, padding)."""
    g = torch.Generator().manual_seed(44)

    def tokens(vocab_size, *shape):
        return torch.randint(0, vocab_size, shape, generator=g)

    def padding(lengths, total):
        return torch.arange(total) >= torch.tensor(lengths)[:, None]  # True at the pads

    yield (
        "vocab_size 7, max_len 8, d_model 8, 2 heads, d_ff 16, 2 layers; tokens (2, 6), the last "
        "2 of sequence 1 are padding",
        *(7, 8, 8, 2, 16, 2),
        tokens(7, 2, 6),
        padding([6, 4], 6),
    )
    yield (
        "3 layers; tokens (3, 5), no padding at all",
        *(9, 8, 8, 2, 16, 3),
        tokens(9, 3, 5),
        padding([5, 5, 5], 5),
    )
    yield (
        "1 layer, d_model 4, 1 head; tokens (2, 10) as long as max_len, padding in both",
        *(5, 10, 4, 1, 8, 1),
        tokens(5, 2, 10),
        padding([7, 3], 10),
    )
    yield (
        "4 layers, d_model 12, 3 heads; tokens (3, 4), shorter than max_len 9",
        *(11, 9, 12, 3, 24, 4),
        tokens(11, 3, 4),
        padding([4, 2, 3], 4),
    )


def _part(model: nn.Module, name: str, kind: type, case: str, made: str):
    part = getattr(model, name, None)
    if not isinstance(part, kind):
        got = "no attribute" if part is None else f"a {type(part).__name__} as"
        raise ExerciseFailure(
            f"Case {case!r}: your EncoderModel has {got} `{name}`; create it in __init__: "
            f"self.{name} = {made}."
        )
    return part


def _require_sizes(model, case, vocab_size, d_model):
    embed = _part(model, "embed", nn.Embedding, case, "nn.Embedding(vocab_size, d_model)")
    readout = _part(model, "readout", nn.Linear, case, "nn.Linear(d_model, vocab_size)")
    for what, got, expected in (
        ("self.embed", (embed.num_embeddings, embed.embedding_dim), (vocab_size, d_model)),
        ("self.readout", (readout.in_features, readout.out_features), (d_model, vocab_size)),
    ):
        if got != expected:
            raise ExerciseFailure(
                f"Case {case!r}: {what} maps {got[0]} -> {got[1]}, expected {expected[0]} -> "
                f"{expected[1]}: one embedding row per token of the vocabulary, one score per "
                f"token out (vocab_size = {vocab_size}, d_model = {d_model})."
            )
    return embed, readout


def _require_fixed_table(model: nn.Module, case: str, max_len: int, d_model: int) -> None:
    """The PE table is a buffer: not trained, and moved by .to(device) with the model."""
    loose = [k for k, v in vars(model).items() if isinstance(v, torch.Tensor)]
    if loose:
        raise ExerciseFailure(
            f"Case {case!r}: self.{loose[0]} is a plain tensor attribute: model.to(device) would "
            f"leave it behind, on the CPU. Register the PE table as a buffer: "
            f'self.register_buffer("pe", ...).'
        )
    table = positional_encoding(max_len, d_model)
    for name, p in model.named_parameters():
        if p.shape == table.shape and torch.allclose(p.detach().float(), table, atol=1e-5):
            raise ExerciseFailure(
                f"Case {case!r}: the PE table is a parameter (`{name}`), so training would "
                f"change it. Step 1's encoding is fixed: register it as a buffer, "
                f'self.register_buffer("pe", ...).'
            )


@checker(
    "EncoderModel",
    "Replace `raise NotImplementedError` in EncoderModel: its parts in __init__, then Step 1, "
    "the layers with the padding mask, and the read-out in forward.",
)
def check_encoder_model(candidate) -> int:
    """Check ``candidate(vocab_size, max_len, d_model, num_heads, d_ff, num_layers)`` (an
    EncoderModel class with ``embed``, ``layers``, ``readout`` and a fixed PE table;
    ``forward(tokens, padding) -> (B, L, vocab_size)``, padding True at the pads) against its own
    parts put together rightly."""
    with torch.random.fork_rng(devices=[]):  # building the model must not shift the learner's seed
        n = 0
        for seed, (case, *sizes, tokens, padding) in enumerate(_cases()):
            vocab_size, max_len, d_model, num_heads, d_ff, num_layers = sizes
            torch.manual_seed(seed)
            model = build_module(candidate, case, "EncoderModel", sizes, "check_encoder_model")
            model.eval()
            embed, readout = _require_sizes(model, case, vocab_size, d_model)
            layers = module_list(model, num_layers, case, _LAYERS)
            _require_fixed_table(model, case, max_len, d_model)
            _make_copies_differ(layers, seed)  # so that which layer ran where shows
            parts = _Parts(embed, layers, readout, positional_encoding(max_len, d_model))
            mistakes = _mistakes(parts, d_model)
            with torch.no_grad():
                got = call_diagnosed(
                    model,
                    case,
                    (tokens, padding),
                    mistakes,
                    crash_hint="forward(tokens, padding): Step 1 with the first L rows of the PE "
                    f"table, then every layer with the mask {_MASK}, then the read-out.",
                )
                if isinstance(got, tuple):
                    raise ExerciseFailure(
                        f"Case {case!r}: your forward returned a tuple of {len(got)}; return only "
                        f"the scores, a tensor (B, L, vocab_size)."
                    )
                require_tensor(
                    case,
                    "the scores",
                    got,
                    call_candidate(parts.run, case, tokens, padding),
                    mistakes,
                    (tokens, padding),
                    shape_hint=_shape_hint(vocab_size, d_model),
                    fallback_cause="Step 1 (embedding + the PE table's first L rows), every "
                    f"layer in turn with the mask {_MASK}, then the read-out.",
                )
            n += 1
        return n


def _shape_hint(vocab_size: int, d_model: int):
    def hint(got: torch.Tensor, tokens: torch.Tensor, padding: torch.Tensor) -> str:
        if got.dim() == 3 and got.size(-1) == d_model != vocab_size:
            return "your scores have d_model features: the read-out is missing."
        return "one score per token of the vocabulary at every position: (B, L, vocab_size)."

    return hint
