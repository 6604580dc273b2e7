"""The lesson-03 checkers of post-LN and pre-LN sub-layers accept every correct style and name the
classic mistakes."""

import pytest

from mha_course import reference
from mha_course.checks import check_post_ln_sublayer, check_pre_ln_sublayer

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
