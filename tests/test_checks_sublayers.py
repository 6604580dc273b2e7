"""The lesson-03 checkers of the residual block (post-LN or pre-LN from one flag, with dropout) and
of the earlier post-LN and pre-LN sub-layer functions accept every correct style and name the
classic mistakes."""

import pytest
import torch
import torch.nn.functional as F
from test_checks_layers import layer_norm_class, ln_var
from torch import nn

from mha_course import reference
from mha_course.checks import check_post_ln_sublayer, check_pre_ln_sublayer, check_residual_block

from checker_helpers import fails_with, not_done, passes, skeleton


def post_ln_in_steps(x, sublayer, norm):
    residual = x
    x = sublayer(x)
    x = x + residual
    return norm(x)


def pre_ln_in_steps(x, sublayer, norm):
    h = norm(x)
    h = sublayer(h)
    return h + x


@pytest.mark.parametrize("candidate", [reference.post_ln_sublayer, post_ln_in_steps])
def test_post_ln_accepts_correct_answers(candidate, capsys):
    passes(check_post_ln_sublayer, candidate, capsys)


@pytest.mark.parametrize("candidate", [reference.pre_ln_sublayer, pre_ln_in_steps])
def test_pre_ln_accepts_correct_answers(candidate, capsys):
    passes(check_pre_ln_sublayer, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda x, f, n: n(f(x)), "the residual is missing"),
        (lambda x, f, n: x + n(f(x)), "you normalised the sub-layer's output and then added x"),
        (lambda x, f, n: x + f(n(x)), "that is the pre-LN form"),
        (lambda x, f, n: n(n(x + f(x))), "the norm is applied twice"),
        (lambda x, f, n: (lambda h: n(h + f(h)))(f(x)), "you called the sub-layer twice"),
        (lambda x, f, n: n(x) + f(x), "you normalised x alone"),
        (lambda x, f, n: x + f(x), "the norm is missing"),
        (lambda x, f, n: n(x + f(x) + f(x)), "sublayer ran 2 times"),
        (lambda x, f, n: n(x + f(2 * x) / 2), "the sub-layer must read x itself"),
    ],
)
def test_post_ln_names_each_mistake(candidate, phrase):
    fails_with(check_post_ln_sublayer, candidate, "Likely cause", phrase)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda x, f, n: n(x + f(x)), "that is the post-LN form"),
        (lambda x, f, n: n(x) + f(n(x)), "the residual must be the raw x"),
        (lambda x, f, n: f(n(x)), "the residual is missing"),
        (lambda x, f, n: n(x + f(n(x))), "you normalised the sum too"),
        (lambda x, f, n: x + n(f(x)), "the norm goes before the sub-layer"),
        (lambda x, f, n: x + f(x), "the norm is missing"),
        (lambda x, f, n: x + f(n(n(x))), "norm ran 2 times"),
        (lambda x, f, n: x + f(n(x.abs())), "the norm must read x itself"),
    ],
)
def test_pre_ln_names_each_mistake(candidate, phrase):
    fails_with(check_pre_ln_sublayer, candidate, "Likely cause", phrase)


def test_sublayers_wrong_return_and_not_done(capsys):
    fails_with(
        check_post_ln_sublayer,
        lambda x, f, n: (n(x + f(x)), None),
        "your result should be a torch.Tensor, got tuple",
    )
    fails_with(
        check_pre_ln_sublayer,
        lambda x, f, n: (x + f(n(x))).sum(-1),
        "your result has shape (2, 5), expected (2, 5, 8)",
        "the output has the shape of x",
    )
    fails_with(check_pre_ln_sublayer, lambda x, f, n: f.forward(x), "AttributeError")
    not_done(check_post_ln_sublayer, skeleton, capsys)
    not_done(check_pre_ln_sublayer, skeleton, capsys)


@pytest.mark.parametrize(
    "check, reference_fn",
    [
        (check_post_ln_sublayer, reference.post_ln_sublayer),
        (check_pre_ln_sublayer, reference.pre_ln_sublayer),
    ],
)
def test_sublayer_checkers_stay_public_and_leave_the_random_stream_alone(check, reference_fn):
    # no longer lesson 03's exercises (ResidualBlock took their place) but part of the contract
    assert check.exercise == reference_fn.__name__
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert check.passes(reference_fn)
    torch.testing.assert_close(torch.rand(3), expected)


# ---------------------------------------------------------------- ResidualBlock


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

    add_norm = reference.pre_ln_sublayer if self.norm_first else reference.post_ln_sublayer
    return add_norm(x, sub, self.norm)


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
        (by_flag(RIGHT_PRE, RIGHT_POST), ["norm_first=False (post-LN) your block computes pre-LN"]),
        (
            by_flag(RIGHT_POST, RIGHT_POST),
            ["norm_first=True (pre-LN) your block computes post-LN"],
        ),
        (
            by_flag(lambda s, x: s.norm(s.dropout(s.sublayer(x))), RIGHT_PRE),
            ["norm_first=False (post-LN), the residual is missing"],
        ),
        (
            by_flag(lambda s, x: x + s.norm(s.dropout(s.sublayer(x))), RIGHT_PRE),
            ["you normalised the sub-layer's output and then added x"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: s.norm(x) + s.dropout(s.sublayer(s.norm(x)))),
            ["norm_first=True (pre-LN), the residual must be the raw x"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: s.norm(x + s.dropout(s.sublayer(s.norm(x))))),
            ["you normalised the sum too"],
        ),
        (
            by_flag(RIGHT_POST, lambda s, x: x + s.dropout(s.sublayer(x))),
            ["norm_first=True (pre-LN), the norm is missing"],
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
        "self.norm has no `bias`",
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
    fails_with(check_residual_block, NotAModule, "make the class an nn.Module")
    fails_with(
        check_residual_block,
        reference.ResidualBlock(nn.Linear(4, 4), 4),
        "Pass the class itself, check_residual_block(ResidualBlock)",
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
