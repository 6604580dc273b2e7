"""The checkers of lesson 01's first steps (the scores, the may-attend mask) accept every correct
style and name the classic mistakes."""

import math

import pytest
import torch
from einops import einsum

from mha_course import reference
from mha_course.checks import check_attention_scores, check_may_attend_mask

from checker_helpers import fails_with, not_done, passes, skeleton

# ---------------------------------------------------------------- attention_scores


@pytest.mark.parametrize(
    "candidate",
    [
        reference.attention_scores,
        lambda q, k: q @ k.mT / q.shape[-1] ** 0.5,
        lambda q, k: einsum(q, k, "... l e, ... s e -> ... l s") * q.size(-1) ** -0.5,
        lambda q, k: (q / math.sqrt(q.size(-1))) @ k.transpose(-1, -2),  # scale first
    ],
)
def test_attention_scores_accepts_every_correct_style(candidate, capsys):
    passes(check_attention_scores, candidate, capsys)


def scores(scale):
    return lambda q, k: q @ k.mT * scale(q.size(-1), k.size(-2))


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (scores(lambda d, S: 1.0), "not scaled"),
        (scores(lambda d, S: 1 / d), "divided by d_k itself"),
        (scores(lambda d, S: math.sqrt(d)), "multiplied by √d_k"),
        (scores(lambda d, S: 1 / math.sqrt(S)), "the number of keys S"),
        (scores(lambda d, S: 0.3), "the scores are scaled by 0.3"),
        (lambda q, k: k @ q.mT / math.sqrt(q.size(-1)), "the scores are transposed"),
        (lambda q, k: q @ k.T / math.sqrt(q.size(-1)), "reverses every axis of batched keys"),
        (lambda q, k: q @ k.t() / math.sqrt(q.size(-1)), "made for 2-D matrices (torch.t)"),
        (lambda q, k: torch.softmax(q @ k.mT / math.sqrt(q.size(-1)), -1), "stops at the scaled"),
    ],
)
@pytest.mark.filterwarnings("ignore:The use of `x.T`")
def test_attention_scores_names_each_mistake(candidate, phrase):
    fails_with(check_attention_scores, candidate, "Likely cause", phrase)


def test_attention_scores_a_notebook_global_d_k_is_caught():
    d_k = 8  # what a learner's notebook defines

    fails_with(
        check_attention_scores,
        lambda q, k: q @ k.mT / math.sqrt(d_k),
        "Case 'batch and heads",
        "= 1/√8, but here d_k = 16",
        "the size of their last axis",
    )


def test_attention_scores_wrong_type_and_not_done(capsys):
    fails_with(check_attention_scores, lambda q, k: (q @ k.mT).numpy(), "got ndarray")
    not_done(check_attention_scores, skeleton, capsys)


# ---------------------------------------------------------------- may_attend_mask


def may_attend(S, lengths=None, causal=False):
    """The lesson's answer."""
    device = None if lengths is None else lengths.device
    positions = torch.arange(S, device=device)
    if causal:
        mask = positions[None, :] <= positions[:, None]
    else:
        mask = torch.ones(S, S, dtype=torch.bool, device=device)
    if lengths is not None:
        mask = mask & (positions < lengths[:, None])[:, None, :]
    return mask


def may_attend_loop(S, lengths=None, causal=False):
    rows = [[not causal or j <= i for j in range(S)] for i in range(S)]
    if lengths is None:
        return torch.tensor(rows)
    return torch.tensor(
        [[[r[j] and j < n for j in range(S)] for r in rows] for n in lengths.tolist()]
    )


def may_attend_from_the_steps(S, lengths=None, causal=False):
    mask = torch.ones(S, S).tril().bool() if causal else torch.ones(S, S, dtype=torch.bool)
    if lengths is not None:
        real = torch.arange(S) < lengths[:, None]  # (B, S): the real tokens
        mask = mask.expand(len(lengths), S, S) & real.unsqueeze(1)
    return mask


@pytest.mark.parametrize(
    "candidate",
    [reference.may_attend_mask, may_attend, may_attend_loop, may_attend_from_the_steps],
)
def test_may_attend_mask_accepts_every_correct_style(candidate, capsys):
    passes(check_may_attend_mask, candidate, capsys)


def flawed(causal_part=None, padding_part=None, combine=None):
    """The lesson's answer with one part replaced."""

    def mask(S, lengths=None, causal=False):
        m = (causal_part or (lambda S: ones(S).tril()))(S) if causal else ones(S)
        if lengths is None:
            return m
        pad = (padding_part or (lambda n, S: (torch.arange(S) < n[:, None])[:, None, :]))(
            lengths, S
        )
        return (combine or (lambda a, b: a & b))(m, pad)

    return mask


def ones(S):
    return torch.ones(S, S, dtype=torch.bool)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (flawed(causal_part=lambda S: ones(S).triu()), "keeps the future"),
        (flawed(causal_part=lambda S: ones(S).triu(1)), "the causal part is inverted"),
        (flawed(causal_part=lambda S: ones(S).tril(-1)), "leaves out the diagonal"),
        (flawed(causal_part=ones), "the causal part is missing"),
        (
            flawed(padding_part=lambda n, S: (torch.arange(S) >= n[:, None])[:, None, :]),
            "the padding part is inverted",
        ),
        (
            flawed(padding_part=lambda n, S: (torch.arange(S) <= n[:, None])[:, None, :]),
            "j < lengths[b], strictly",
        ),
        (
            flawed(padding_part=lambda n, S: (torch.arange(S) < n[:, None])[:, :, None]),
            "you blocked the pads' own rows (their queries)",
        ),
        (
            flawed(
                padding_part=lambda n, S: (
                    (torch.arange(S) < n[:, None])[:, None, :]
                    & (torch.arange(S) < n[:, None])[:, :, None]
                )
            ),
            "Only the keys are masked",
        ),
        (flawed(combine=lambda a, b: a | b), "combined with 'or'"),
        (
            flawed(padding_part=lambda n, S: (torch.arange(S) < n[:, None] - 1)[:, None, :]),
            "one real key too few",
        ),
        (
            flawed(padding_part=lambda n, S: (torch.arange(S)[:, None] < n)[:, None, :]),
            "(S, B), transposed",
        ),
        (
            flawed(padding_part=lambda n, S: (torch.arange(S) < n[0]).repeat(len(n), 1, 1)),
            "the first sentence's length is used for all",
        ),
        (
            flawed(padding_part=lambda n, S: torch.ones(len(n), 1, S, dtype=torch.bool)),
            "the lengths are ignored",
        ),
    ],
)
def test_may_attend_mask_names_each_mistake(candidate, phrase):
    fails_with(check_may_attend_mask, candidate, "Likely cause", phrase)


def test_may_attend_mask_shape_dtype_and_not_done(capsys):
    def one_row(S, lengths=None, causal=False):
        if lengths is None:
            return may_attend(S, causal=causal)
        return (torch.arange(S) < lengths[:, None])[:, None, :]

    fails_with(
        check_may_attend_mask,
        one_row,
        "Case 'lengths [4, 2], S = 4, causal'",
        "expected (2, 4, 4)",
        "your mask is (B, 1, S): right for padding alone",
    )
    fails_with(
        check_may_attend_mask,
        lambda S, lengths=None, causal=False: may_attend(S, lengths, causal).float(),
        "are torch.float32 (its True/False pattern is right); expected a bool tensor",
    )
    fails_with(
        check_may_attend_mask,
        lambda S, lengths=None, causal=False: may_attend(S, lengths, causal).squeeze(0)[:1],
        "expected (4, 4)",
    )
    not_done(check_may_attend_mask, skeleton, capsys)


def test_may_attend_mask_names_the_mistakes_of_its_steps():
    """The padding and causal steps' own mistakes, made inside the whole mask."""

    def one_row_per_sentence(S, lengths=None, causal=False):
        mask = may_attend(S, lengths, causal)
        return mask if lengths is None else mask[:, -1]  # (B, S)

    def lengths_without_an_axis(S, lengths=None, causal=False):
        mask = ones(S).tril() if causal else ones(S)
        return mask if lengths is None else mask & (torch.arange(S) < lengths)[:, None, :]

    def first_sentence_only(S, lengths=None, causal=False):
        mask = may_attend(S, lengths, causal)
        return mask if lengths is None else mask[:1]

    def additive(S, lengths=None, causal=False):
        blocked = ~may_attend(S, lengths, causal)
        return torch.zeros(blocked.shape).masked_fill(blocked, float("-inf"))

    def a_fixed_size(S, lengths=None, causal=False):
        return may_attend(S if lengths is not None else 4, lengths, causal)

    fails_with(check_may_attend_mask, one_row_per_sentence, "expected (2, 4, 4)", "is (B, S)")
    fails_with(
        check_may_attend_mask,
        lengths_without_an_axis,
        "Case 'lengths [4, 2], S = 4, causal'",
        "RuntimeError",
        "only when each has an axis of its own",
    )
    fails_with(check_may_attend_mask, first_sentence_only, "shape (1, 4, 4), expected (2, 4, 4)")
    fails_with(check_may_attend_mask, additive, "torch.float32", "the additive float form")
    fails_with(check_may_attend_mask, a_fixed_size, "Case 'S = 7, causal", "expected (7, 7)")
