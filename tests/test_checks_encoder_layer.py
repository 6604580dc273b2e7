"""The lesson-04 checker of EncoderLayer with both norm orders: a layer whose signature takes
``norm_first`` is checked pre-LN too, against torch's ``norm_first=True`` layer, and each classic
pre-LN mistake is named; a layer written to the older skeleton, without it, still passes post-LN.
(The post-LN cases and their mistakes are tested in test_checks_layers.py.)"""

import pytest
import torch
import torch.nn.functional as F
from test_checks_layers import EinsumMHA, LoopFreeMHA, encoder_class, post_ln
from torch import nn

from mha_course import reference
from mha_course.checks import check_encoder_layer

from checker_helpers import fails_with, passes


def pre_ln(self, x, attn_mask):
    x = x + self.attend(self.norm1(x), attn_mask)
    return x + self.ffn(self.norm2(x))


def layer_with_flag(pre, post=post_ln, mha=LoopFreeMHA, norm=nn.LayerNorm):
    """A learner's EncoderLayer(d_model, num_heads, d_ff, dropout=0.0, norm_first=False) whose
    forward is ``pre(self, x, attn_mask)`` with norm_first, else ``post(...)``."""
    base = encoder_class(
        lambda self, x, m: (pre if self.norm_first else post)(self, x, m), mha, norm
    )

    class EncoderLayer(base):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
            super().__init__(d_model, num_heads, d_ff, dropout)
            self.norm_first = norm_first

    return EncoderLayer


class BlocksLayer(nn.Module):
    """Another correct style: torch's own structure, one method per sub-layer, einsum attention."""

    def __init__(self, d_model, num_heads, d_ff, dropout=0.0, norm_first=False):
        super().__init__()
        self.self_attn = EinsumMHA(d_model, num_heads)
        self.linear1, self.linear2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)
        self.norm1, self.norm2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.dropout = nn.Dropout(dropout)
        self.norm_first = norm_first

    def _sa_block(self, x, attn_mask):
        return self.dropout(self.self_attn(x, x, x, attn_mask=attn_mask)[0])

    def _ff_block(self, x):
        return self.dropout(self.linear2(self.dropout(F.relu(self.linear1(x)))))

    def forward(self, x, attn_mask=None):
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), attn_mask)
            return x + self._ff_block(self.norm2(x))
        x = self.norm1(x + self._sa_block(x, attn_mask))
        return self.norm2(x + self._ff_block(x))


class KeywordsLayer(BlocksLayer):
    """Takes its options as **kwargs: norm_first reaches it, so it is checked pre-LN too."""

    def __init__(self, d_model, num_heads, d_ff, **options):
        super().__init__(d_model, num_heads, d_ff, **options)


@pytest.mark.parametrize(
    "candidate",
    [reference.EncoderLayer, layer_with_flag(pre_ln), BlocksLayer, KeywordsLayer],
    ids=["reference", "flag", "torch-style-blocks", "kwargs"],
)
def test_encoder_layer_with_norm_first_is_checked_pre_ln_too(candidate, capsys):
    out = passes(check_encoder_layer, candidate, capsys)
    assert "all 7 cases" in out


def test_encoder_layer_without_norm_first_is_checked_post_ln_only(capsys):
    out = passes(check_encoder_layer, encoder_class(post_ln), capsys)
    assert "all 5 cases" in out


def _pre(steps):
    return layer_with_flag(steps)


@pytest.mark.parametrize(
    "steps, phrase",
    [
        (post_ln, "with norm_first True your layer computed the post-LN layer"),
        (
            lambda s, x, m: (lambda z: s.norm2(z) + s.ffn(s.norm2(z)))(
                s.norm1(x) + s.attend(s.norm1(x), m)
            ),
            "around both sub-layers, the residual path carries LayerNorm(x)",
        ),
        (
            lambda s, x, m: (lambda y: y + s.ffn(s.norm1(y)))(x + s.attend(s.norm2(x), m)),
            "norm1 and norm2 are swapped",
        ),
        (
            lambda s, x, m: (lambda y: y + s.ffn(s.norm1(y)))(x + s.attend(s.norm1(x), m)),
            "norm1 is used twice",
        ),
        (
            lambda s, x, m: (lambda y: y + s.ffn(s.norm2(y)))(x + s.attend(s.norm2(x), m)),
            "norm2 is used twice",
        ),
        (
            lambda s, x, m: (lambda y: s.norm2(y + s.ffn(y)))(x + s.attend(s.norm1(x), m)),
            "around the feed-forward network, that is post-LN",
        ),
        (
            lambda s, x, m: (lambda z: z + s.ffn(s.norm2(z)))(s.norm1(x + s.attend(x, m))),
            "around the attention, that is post-LN",
        ),
        (
            lambda s, x, m: (lambda y: y + s.ffn(s.norm2(y)))(
                x + s.dropout(s.self_attn(s.norm1(x), x, x, attn_mask=m)[0])
            ),
            "only the queries are normalised",
        ),
        (
            lambda s, x, m: s.ffn(s.norm2(s.attend(s.norm1(x), m))),
            "around both sub-layers, the residual is missing",
        ),
        (
            lambda s, x, m: (lambda y: y + s.ffn(s.norm2(y)))(s.attend(s.norm1(x), m)),
            "around the attention, the residual is missing",
        ),
        (
            lambda s, x, m: s.ffn(s.norm2(x + s.attend(s.norm1(x), m))),
            "around the feed-forward network, the residual is missing",
        ),
        (
            lambda s, x, m: (lambda y: y + s.ffn(s.norm2(x)))(x + s.attend(s.norm1(x), m)),
            "reads the layer's input x",
        ),
        (
            lambda s, x, m: (lambda y: s.norm2(y + s.ffn(s.norm2(y))))(
                s.norm1(x + s.attend(s.norm1(x), m))
            ),
            "around both sub-layers, the sum is normalised too",
        ),
        (
            lambda s, x, m: (lambda y: y + s.ffn(s.norm2(y), lambda t: t))(
                x + s.attend(s.norm1(x), m)
            ),
            "has no activation",
        ),
        (lambda s, x, m: pre_ln(s, x, None), "the mask has no effect"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_encoder_layer_names_each_pre_ln_mistake(steps, phrase):
    message = fails_with(check_encoder_layer, _pre(steps), "Likely cause", phrase)
    assert "norm_first=True" in message.split("\n")[0]  # the failing case is a pre-LN one


def test_encoder_layer_flag_with_post_ln_default_wrong():
    """A flag that is inverted (pre-LN by default) fails in the post-LN cases, named pre-LN."""
    inverted = layer_with_flag(post_ln, post=pre_ln)
    fails_with(check_encoder_layer, inverted, "you wrote the pre-LN layer", "norm_first False")


def test_encoder_layer_leaves_the_seed_alone_with_norm_first():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert check_encoder_layer.passes(layer_with_flag(pre_ln))
    torch.testing.assert_close(torch.rand(3), expected)
