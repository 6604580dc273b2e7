"""The lesson-03 checker of the residual block (post-LN or pre-LN from one flag, with dropout)
accepts every correct style and names the classic mistakes, those of the add & norm step inside it
included."""

import pytest
import torch
import torch.nn.functional as F
from test_checks_layers import layer_norm_class, ln_var
from torch import nn

from mha_course import reference
from mha_course.checks import check_residual_block

from checker_helpers import fails_with, not_done, passes, skeleton

HandLayerNorm = layer_norm_class(ln_var)  # a learner's LayerNorm of the lesson's first exercise


def block_class(forward, norm=HandLayerNorm, dropout_layer=nn.Dropout):
    """A learner's ResidualBlock whose forward is ``forward(self, x)``."""

    class ResidualBlock(nn.Module):
        def __init__(self, sublayer, d_model, norm_first=False, dropout=0.0):
            super().__init__()
            self.sublayer = sublayer
            self.norm = norm(d_model)
            self.dropout = dropout_layer(dropout)
            self.norm_first = norm_first

        def forward(self, x):
            return forward(self, x)

    return ResidualBlock


def block_if_else(self, x):
    if self.norm_first:
        return x + self.dropout(self.sublayer(self.norm(x)))
    return self.norm(x + self.dropout(self.sublayer(x)))


def block_in_steps(self, x):
    residual = x
    if self.norm_first:
        x = self.norm(x)
    x = self.dropout(self.sublayer(x))
    x = residual + x
    return x if self.norm_first else self.norm(x)


def block_functional_dropout(self, x):
    def sub(t):
        return F.dropout(self.sublayer(t), self.p, self.training)

    if self.norm_first:
        return x + sub(self.norm(x))
    return self.norm(x + sub(x))


class FunctionalDropout(nn.Module):
    """A block that keeps the probability and calls F.dropout itself."""

    def __init__(self, sublayer, d_model, norm_first=False, dropout=0.0):
        super().__init__()
        self.sublayer, self.norm_first, self.p = sublayer, norm_first, dropout
        self.norm = nn.LayerNorm(d_model)

    forward = block_functional_dropout


@pytest.mark.parametrize(
    "candidate",
    [
        reference.ResidualBlock,
        block_class(block_if_else),
        block_class(block_in_steps),
        block_class(block_if_else, norm=nn.LayerNorm),
        FunctionalDropout,
    ],
    ids=["reference", "if-else", "in steps", "torch's LayerNorm", "F.dropout"],
)
def test_residual_block_accepts_correct_answers(candidate, capsys):
    passes(check_residual_block, candidate, capsys)


def by_flag(post, pre):
    """A block whose forward is ``post(self, x)`` or ``pre(self, x)`` by its flag."""
    return block_class(lambda self, x: pre(self, x) if self.norm_first else post(self, x))


RIGHT_POST = lambda self, x: self.norm(x + self.dropout(self.sublayer(x)))  # noqa: E731
RIGHT_PRE = lambda self, x: x + self.dropout(self.sublayer(self.norm(x)))  # noqa: E731


@pytest.mark.parametrize(
    "candidate, phrases",
    [
        (by_flag(RIGHT_PRE, RIGHT_POST), ["norm_first False (post-LN) your block computes pre-LN"]),
        (
            by_flag(RIGHT_POST, RIGHT_POST),
            ["norm_first True (pre-LN) your block computes post-LN"],
        ),
        (
            by_flag(lambda s, x: s.norm(s.dropout(s.sublayer(x))), RIGHT_PRE),
            ["norm_first False (post-LN), the residual is missing"],
        ),
        (
            by_flag(lambda s, x: x + s.norm(s.dropout(s.sublayer(x))), RIGHT_PRE),
            ["the sub-layer's output is normalised and then added to x"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: s.norm(x) + s.dropout(s.sublayer(s.norm(x)))),
            ["norm_first True (pre-LN), the residual path carries LayerNorm(x), not x"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: s.norm(x + s.dropout(s.sublayer(s.norm(x))))),
            ["the sum is normalised too"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: x + s.dropout(s.sublayer(x))),
            ["norm_first True (pre-LN), the LayerNorm is missing"],
        ),
        (
            by_flag(lambda s, x: s.norm(x + s.sublayer(x)), lambda s, x: x + s.sublayer(s.norm(x))),
            ["dropout=0.5 in training", "no dropout in training"],
        ),
        (
            by_flag(lambda s, x: s.norm(s.dropout(x + s.sublayer(x))), RIGHT_PRE),
            ["norm_first=False (post-LN)", "dropout on the sum: dropout goes on the sub-layer's"],
        ),
        (
            by_flag(lambda s, x: s.dropout(s.norm(x + s.sublayer(x))), RIGHT_PRE),
            ["dropout after the norm"],
        ),
        (
            by_flag(lambda s, x: s.norm(x + s.sublayer(s.dropout(x))), RIGHT_PRE),
            ["dropout on the sub-layer's input"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: s.dropout(x + s.sublayer(s.norm(x)))),
            ["norm_first=True (pre-LN)", "dropout on the sum"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: x + s.sublayer(s.dropout(s.norm(x)))),
            ["dropout on the sub-layer's input"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: x + s.sublayer(s.norm(s.dropout(x)))),
            ["dropout on x"],
        ),
        (
            by_flag(
                lambda s, x: s.norm(x + F.dropout(s.sublayer(x), s.dropout.p)),
                lambda s, x: x + F.dropout(s.sublayer(s.norm(x)), s.dropout.p),
            ),
            ["after .eval()", "dropout is still on after .eval()"],
        ),
        (
            by_flag(lambda s, x: s.norm(x + s.dropout(s.sublayer(x + 0.5 * x))), RIGHT_PRE),
            ["the sub-layer reads x itself"],
        ),
        (
            by_flag(lambda s, x: s.norm(x + s.dropout(s.sublayer(x) + s.sublayer(x))), RIGHT_PRE),
            ["the sub-layer ran 2 times"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: x + s.dropout(s.sublayer(s.norm(x.abs())))),
            ["the norm reads x itself"],
        ),
        # the add & norm step's own mistakes, inside the block
        (
            by_flag(lambda s, x: s.norm(s.norm(x + s.dropout(s.sublayer(x)))), RIGHT_PRE),
            ["norm_first False (post-LN), the LayerNorm is applied twice"],
        ),
        (
            by_flag(
                lambda s, x: (lambda h: s.norm(h + s.dropout(s.sublayer(h))))(
                    s.dropout(s.sublayer(x))
                ),
                RIGHT_PRE,
            ),
            ["the sub-layer runs twice, the second time on its own output"],
        ),
        (
            by_flag(lambda s, x: s.norm(x) + s.dropout(s.sublayer(x)), RIGHT_PRE),
            ["x alone is normalised, then added"],
        ),
        (
            by_flag(lambda s, x: x + s.dropout(s.sublayer(x)), RIGHT_PRE),
            ["norm_first False (post-LN), the LayerNorm is missing"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: s.dropout(s.sublayer(s.norm(x)))),
            ["norm_first True (pre-LN), the residual is missing"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: x + s.norm(s.dropout(s.sublayer(x)))),
            ["norm_first True (pre-LN), the sub-layer's output is normalised and then added"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: x + s.dropout(s.sublayer(s.norm(s.norm(x))))),
            ["the norm ran 2 times"],
        ),
    ],
)
def test_residual_block_names_each_mistake(candidate, phrases):
    fails_with(check_residual_block, candidate, "Likely cause", *phrases)


class NoNorm(nn.Module):
    def __init__(self, sublayer, d_model, norm_first=False, dropout=0.0):
        super().__init__()
        self.sublayer, self.ln = sublayer, nn.LayerNorm(d_model)

    def forward(self, x):
        return self.ln(x + self.sublayer(x))


class HiddenParts(nn.Module):
    def __init__(self, sublayer, d_model, norm_first=False, dropout=0.0):
        super().__init__()
        self.parts = [sublayer]  # a plain list: nn.Module does not see what is inside
        self.norm = nn.LayerNorm(d_model)
        self.dropout, self.norm_first = nn.Dropout(dropout), norm_first

    def forward(self, x):
        return block_if_else(self, x)

    def sublayer(self, x):
        return self.parts[0](x)


class NotAModule:
    def __init__(self, sublayer, d_model, norm_first=False, dropout=0.0):
        self.norm = nn.LayerNorm(d_model)


class NoAffine(nn.Module):
    def forward(self, x):
        return F.layer_norm(x, x.shape[-1:])


def test_residual_block_names_what_is_missing_or_wrong(capsys):
    fails_with(check_residual_block, NoNorm, "has no module attribute `norm`")
    fails_with(
        check_residual_block,
        block_class(block_if_else, norm=lambda d: nn.LayerNorm(2 * d)),
        "self.norm.weight has shape",
    )
    fails_with(
        check_residual_block,
        block_class(block_if_else, norm=lambda d: nn.RMSNorm(d)),
        "self.norm has no bias",
    )
    norm_of_the_wrong_axis = type(
        "WrongAxis",
        (HandLayerNorm,),
        {
            "forward": lambda self, x: (
                F.layer_norm(x.transpose(-1, -2), x.shape[-2:-1]).transpose(-1, -2) * self.weight
                + self.bias
            )
        },
    )
    fails_with(
        check_residual_block,
        block_class(block_if_else, norm=norm_of_the_wrong_axis),
        "does not compute torch's LayerNorm",
        "Does it pass check_layer_norm?",
    )
    fails_with(check_residual_block, HiddenParts, "the sub-layer's parameters are not among")
    fails_with(check_residual_block, NotAModule, "not an nn.Module")
    fails_with(
        check_residual_block,
        reference.ResidualBlock(nn.Linear(4, 4), 4),
        "Pass the class itself",
    )
    fails_with(
        check_residual_block,
        block_class(lambda self, x: self.norm(x + self.sublayer(x, x, x)[0])),
        "TypeError",
        "the sub-layer takes one tensor",
    )
    fails_with(
        check_residual_block,
        block_class(lambda self, x: (block_if_else(self, x), None)),
        "should be a torch.Tensor, got tuple",
    )
    not_done(check_residual_block, block_class(skeleton), capsys)

    class SkeletonInit(nn.Module):
        def __init__(self, sublayer, d_model, norm_first=False, dropout=0.0):
            super().__init__()
            raise NotImplementedError

    not_done(check_residual_block, SkeletonInit, capsys)


def test_residual_block_check_leaves_the_random_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert check_residual_block.passes(block_class(block_if_else))
    torch.testing.assert_close(torch.rand(3), expected)
