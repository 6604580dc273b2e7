"""The lesson-04 checker of EncoderModel accepts every correct way to build the model (fresh
layers or deep copies, the learner's own layers, any mask shape that means the same) and names
each classic mistake: Step 1 without positions, the padding handed over as the mask, the mask on
the wrong axis or only for one layer, the layers not chained, a shared layer, a loose PE table."""

import copy
import functools
import math

import pytest
from test_checks_layers import LoopFreeMHA, encoder_class, post_ln
from torch import nn

from mha_course import reference
from mha_course.checks import check_encoder_model
from mha_course.positional import positional_encoding

from checker_helpers import fails_with, not_done, passes


def model_class(forward=None, make_layers=None, table="buffer"):
    """An EncoderModel with the skeleton's parts; ``forward(self, tokens, padding)`` and
    ``make_layers(d_model, nhead, dim_feedforward, n)`` replace the reference's."""

    class EncoderModel(nn.Module):
        def __init__(self, vocab_size, d_model, nhead, num_layers, dim_feedforward, max_len):
            super().__init__()
            self.embed = nn.Embedding(vocab_size, d_model)
            pe = positional_encoding(max_len, d_model)
            if table == "buffer":
                self.register_buffer("pe", pe)
            elif table == "parameter":
                self.pe = nn.Parameter(pe)
            else:
                self.pe = pe
            make = make_layers or (
                lambda d, h, f, n: nn.ModuleList(reference.EncoderLayer(d, h, f) for _ in range(n))
            )
            self.layers = make(d_model, nhead, dim_feedforward, num_layers)
            self.readout = nn.Linear(d_model, vocab_size)

        def forward(self, tokens, padding):
            if forward is not None:
                return forward(self, tokens, padding)
            return reference.EncoderModel.forward(self, tokens, padding)

    return EncoderModel


def run(self, tokens, padding, mask, *, step1=None, layers=None, chain=True):
    x0 = x = self.embed(tokens) + self.pe[: tokens.size(1)] if step1 is None else step1
    for layer in self.layers if layers is None else layers:
        x = layer(x if chain else x0, attn_mask=mask)
    return self.readout(x)


def full_mask(self, tokens, padding):
    """Another correct style: the mask (B, 1, L, L), every query row the same."""
    L = tokens.size(1)
    mask = (~padding)[:, None, None, :].expand(-1, 1, L, L)
    return run(self, tokens, padding, mask)


def copies_of_one(d, h, f, n):
    """Another correct style: deep copies of one layer, as torch's TransformerEncoder makes."""
    layer = reference.EncoderLayer(d, h, f)
    return nn.ModuleList(copy.deepcopy(layer) for _ in range(n))


def learners_layers(d, h, f, n):
    """The learner's own lesson-04 layers on their own lesson-02 attention."""
    return nn.ModuleList(encoder_class(post_ln, mha=LoopFreeMHA)(d, h, f) for _ in range(n))


@pytest.mark.parametrize(
    "candidate",
    [
        reference.EncoderModel,
        functools.partial(reference.EncoderModel, layer_class=encoder_class(post_ln)),
        model_class(full_mask),
        model_class(make_layers=copies_of_one),
        model_class(make_layers=learners_layers),
    ],
    ids=["reference", "reference-with-learner-layer", "full-mask", "deep-copies", "own-layers"],
)
def test_encoder_model_accepts_correct_answers(candidate, capsys):
    passes(check_encoder_model, candidate, capsys)


def may_attend(padding):
    return (~padding)[:, None, None, :]


@pytest.mark.parametrize(
    "forward, phrase",
    [
        (
            lambda s, t, p: run(s, t, p, may_attend(p), step1=s.embed(t)),
            "no positional encoding",
        ),
        (
            lambda s, t, p: run(
                s,
                t,
                p,
                may_attend(p),
                step1=s.embed(t) * math.sqrt(s.embed.embedding_dim) + s.pe[: t.size(1)],
            ),
            "the embeddings are scaled by √d_model",
        ),
        (lambda s, t, p: run(s, t, p, p[:, None, None, :]), "the layers got `padding` itself"),
        (lambda s, t, p: run(s, t, p, ~p), "the mask is (B, L)"),
        (lambda s, t, p: run(s, t, p, (~p)[:, None, :, None]), "masks queries, not keys"),
        (lambda s, t, p: run(s, t, p, None), "the layers get no mask"),
        (lambda s, t, p: run(s, t, p, may_attend(p), chain=False), "every layer reads Step 1"),
        (
            lambda s, t, p: run(s, t, p, may_attend(p), layers=s.layers[::-1]),
            "reverse order",
        ),
        (
            lambda s, t, p: run(s, t, p, may_attend(p), layers=s.layers[:1]),
            "only the first layer runs",
        ),
        (
            lambda s, t, p: run(s, t, p, may_attend(p), layers=[s.layers[0]] * len(s.layers)),
            "the first layer runs num_layers times",
        ),
        (
            lambda s, t, p: s.embed(t) + s.pe[: t.size(1)],
            "the read-out is missing",
        ),
        (
            lambda s, t, p: run(s, t, p, may_attend(p), layers=s.layers[-1:]),
            "only the last one counts",
        ),
    ],
)
def test_encoder_model_names_each_mistake_in_forward(forward, phrase):
    fails_with(check_encoder_model, model_class(forward), "Likely cause", phrase)


def test_encoder_model_mask_only_to_the_first_layer():
    def first_only(self, tokens, padding):
        x = self.embed(tokens) + self.pe[: tokens.size(1)]
        for i, layer in enumerate(self.layers):
            x = layer(x, attn_mask=may_attend(padding) if i == 0 else None)
        return self.readout(x)

    fails_with(check_encoder_model, model_class(first_only), "only the first layer gets the mask")


@pytest.mark.parametrize(
    "make_layers, table, phrases",
    [
        (
            lambda d, h, f, n: nn.ModuleList([reference.EncoderLayer(d, h, f)] * n),
            "buffer",
            ["are one and the same layer", "[layer] * num_layers"],
        ),
        (
            lambda d, h, f, n: (lambda one: nn.ModuleList(copy.copy(one) for _ in range(n)))(
                reference.EncoderLayer(d, h, f)
            ),
            "buffer",
            ["shares its weights with self.layers[0]"],
        ),
        (
            lambda d, h, f, n: [reference.EncoderLayer(d, h, f) for _ in range(n)],
            "buffer",
            ["is a Python list", "nn.ModuleList"],
        ),
        (
            lambda d, h, f, n: nn.ModuleList(reference.EncoderLayer(d, h, f) for _ in range(n - 1)),
            "buffer",
            ["expected num_layers = 2"],
        ),
        (
            lambda d, h, f, n: nn.ModuleDict({"0": reference.EncoderLayer(d, h, f)}),
            "buffer",
            ["self.layers is a ModuleDict", "nn.ModuleList"],
        ),
        (lambda d, h, f, n: None, "buffer", ["has no attribute `layers`"]),
        (None, "plain", ["self.pe is a plain tensor attribute", "as a buffer"]),
        (None, "parameter", ["the PE table is a parameter (`pe`)", "as a buffer"]),
    ],
)
def test_encoder_model_names_each_structural_mistake(make_layers, table, phrases):
    fails_with(check_encoder_model, model_class(make_layers=make_layers, table=table), *phrases)


def test_encoder_model_parts_sizes_super_init_tuple_and_not_done(capsys):
    class NoReadout(reference.EncoderModel):
        def __init__(self, **sizes):
            super().__init__(**sizes)
            self.head = self.readout
            del self.readout

    fails_with(check_encoder_model, NoReadout, "has no attribute `readout`", "nn.Linear")

    class PaddingRow(reference.EncoderModel):
        def __init__(self, vocab_size, **sizes):
            super().__init__(vocab_size, **sizes)
            self.embed = nn.Embedding(vocab_size + 1, self.embed.embedding_dim)

    fails_with(check_encoder_model, PaddingRow, "self.embed maps 8 -> 8, expected 7 -> 8")

    class NoSuper(nn.Module):
        def __init__(self, **sizes):
            self.embed = nn.Embedding(3, 4)

    fails_with(check_encoder_model, NoSuper, "own __init__ (through super) must run first")

    class ReturnsTuple(reference.EncoderModel):
        def forward(self, tokens, padding):
            return super().forward(tokens, padding), None

    fails_with(check_encoder_model, ReturnsTuple, "got tuple")

    class Skeleton(nn.Module):
        def __init__(self, **sizes):
            super().__init__()
            raise NotImplementedError

    not_done(check_encoder_model, Skeleton, capsys)


def test_encoder_model_is_built_with_torchs_argument_names():
    """The model is built with keywords, torch's names: the older skeleton's names crash with
    the argument the check passed."""

    class OldNames(reference.EncoderModel):
        def __init__(self, vocab_size, max_len, d_model, num_heads, d_ff, num_layers):
            super().__init__(vocab_size, d_model, num_heads, num_layers, d_ff, max_len)

    fails_with(check_encoder_model, OldNames, "unexpected keyword argument", "keep the skeleton")
