"""The lesson-01 step checkers (scores, padding mask, causal mask) accept every correct style and
name the classic mistakes."""

import math

import pytest
import torch
from einops import einsum

from mha_course import reference
from mha_course.checks import (
    check_attention_scores,
    check_causal_mask,
    check_may_attend_mask,
    check_padding_mask,
)

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
        (scores(lambda d, S: 1 / d), "you divided by d_k"),
        (scores(lambda d, S: math.sqrt(d)), "you multiplied by √d_k"),
        (scores(lambda d, S: 1 / math.sqrt(S)), "the number of keys"),
        (scores(lambda d, S: 0.3), "your scores are 0.3 · Q Kᵀ"),
        (lambda q, k: k @ q.mT / math.sqrt(q.size(-1)), "the scores are transposed"),
        (lambda q, k: q @ k.T / math.sqrt(q.size(-1)), "key.T reverses *every* axis"),
        (lambda q, k: q @ k.t() / math.sqrt(q.size(-1)), "key.t() works on 2-D matrices only"),
        (lambda q, k: torch.softmax(q @ k.mT / math.sqrt(q.size(-1)), -1), "stops before it"),
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
        "Q Kᵀ / √8, but here d_k = 16",
        "query.size(-1)",
    )


def test_attention_scores_wrong_type_and_not_done(capsys):
    fails_with(check_attention_scores, lambda q, k: (q @ k.mT).numpy(), "got ndarray")
    not_done(check_attention_scores, skeleton, capsys)


# ---------------------------------------------------------------- padding_mask


def padding_loop(lengths, S):
    mask = torch.zeros(len(lengths), S, dtype=torch.bool)
    for b, n in enumerate(lengths.tolist()):
        mask[b, :n] = True
    return mask


@pytest.mark.parametrize(
    "candidate",
    [
        reference.padding_mask,
        lambda lengths, S: torch.arange(S).expand(len(lengths), S) < lengths.unsqueeze(1),
        lambda lengths, S: torch.arange(1, S + 1)[None, :] <= lengths[:, None],
        lambda lengths, S: ~(torch.arange(S) >= lengths[:, None]),
        padding_loop,
    ],
)
def test_padding_mask_accepts_every_correct_style(candidate, capsys):
    passes(check_padding_mask, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda lengths, S: torch.arange(S) >= lengths[:, None], "your mask is inverted"),
        (lambda lengths, S: torch.arange(S) <= lengths[:, None], "Use <, not <="),
        (lambda lengths, S: torch.arange(S) < lengths[:, None] - 1, "one real token too few"),
        (lambda lengths, S: torch.arange(S)[:, None] < lengths, "your mask is (S, B), transposed"),
        (lambda lengths, S: torch.arange(S) < lengths, "lengths needs an axis of its own"),
        (
            lambda lengths, S: (torch.arange(S) < lengths[0]).repeat(len(lengths), 1),
            "every row uses the first sentence's length",
        ),
    ],
)
def test_padding_mask_names_each_mistake(candidate, phrase):
    fails_with(check_padding_mask, candidate, "Likely cause", phrase)


def test_padding_mask_a_loop_for_one_sentence_only_is_caught():
    def first_only(lengths, S):
        mask = torch.zeros(1, S, dtype=torch.bool)
        mask[0, : lengths[0]] = True
        return mask

    fails_with(check_padding_mask, first_only, "your result has shape (1, 5), expected (3, 5)")


def test_padding_mask_must_be_bool():
    message = fails_with(
        check_padding_mask,
        lambda lengths, S: (torch.arange(S) < lengths[:, None]).int(),
        "your result is a torch.int32 tensor (its True/False pattern is right)",
        "return a bool tensor",
        "< lengths[:, None] is already bool",
    )
    assert len(message.splitlines()) <= 5
    fails_with(check_padding_mask, lambda lengths, S: padding_loop(lengths, S).float(), "float32")


def test_padding_mask_shows_the_wrong_row(capsys):
    message = fails_with(
        check_padding_mask,
        lambda lengths, S: torch.arange(S) <= lengths[:, None],
        "first at [0, 3]",
    )
    assert "expected row [0] = [True, True, True, False, False]" in message
    assert "got      row [0] = [True, True, True, True, False]" in message
    not_done(check_padding_mask, skeleton, capsys)


# ---------------------------------------------------------------- causal_mask


@pytest.mark.parametrize(
    "candidate",
    [
        reference.causal_mask,
        lambda L: torch.tril(torch.ones(L, L)).bool(),
        lambda L: torch.arange(L)[None, :] <= torch.arange(L)[:, None],
        lambda L: ~torch.ones(L, L, dtype=torch.bool).triu(1),
        lambda L: torch.tensor([[j <= i for j in range(L)] for i in range(L)]),
    ],
)
def test_causal_mask_accepts_every_correct_style(candidate, capsys):
    passes(check_causal_mask, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda L: torch.ones(L, L, dtype=torch.bool).triu(), "lets each query see the future"),
        (lambda L: torch.ones(L, L, dtype=torch.bool).triu(1), "torch.nn.MultiheadAttention's"),
        (lambda L: torch.ones(L, L, dtype=torch.bool).tril(-1), "not tril(-1)"),
        (lambda L: torch.ones(L, L, dtype=torch.bool), "nothing is masked"),
    ],
)
def test_causal_mask_names_each_mistake(candidate, phrase):
    fails_with(check_causal_mask, candidate, "Likely cause", phrase)


def test_causal_mask_wrong_dtype_and_shape(capsys):
    fails_with(
        check_causal_mask,
        lambda L: torch.tril(torch.ones(L, L)),
        "a torch.float32 tensor (its True/False pattern is right)",
        "torch.ones(L, L) is float",
    )
    fails_with(
        check_causal_mask,
        lambda L: torch.ones(L, L, dtype=torch.long).tril(),
        "the mask is torch.int64",
    )
    fails_with(
        check_causal_mask,
        lambda L: torch.zeros(L, L).masked_fill(torch.ones(L, L).triu(1).bool(), float("-inf")),
        "the additive float mask",
    )
    fails_with(
        check_causal_mask,
        lambda L: torch.ones(1, L, L, dtype=torch.bool).tril(),
        "your result has shape (1, 4, 4), expected (4, 4)",
    )
    not_done(check_causal_mask, skeleton, capsys)


def test_causal_mask_a_fixed_size_is_caught():
    fails_with(
        check_causal_mask,
        lambda L: torch.ones(4, 4, dtype=torch.bool).tril(),
        "Case 'L = 1'",
        "expected (1, 1)",
    )


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
    mask = reference.causal_mask(S) if causal else torch.ones(S, S, dtype=torch.bool)
    if lengths is not None:
        mask = mask.expand(len(lengths), S, S) & reference.padding_mask(lengths, S).unsqueeze(1)
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
        m = (
            (causal_part or reference.causal_mask)(S)
            if causal
            else torch.ones(S, S, dtype=torch.bool)
        )
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
        (flawed(causal_part=lambda S: ones(S).triu()), "lets each query see the future"),
        (flawed(causal_part=lambda S: ones(S).triu(1)), "the causal part is inverted"),
        (flawed(causal_part=lambda S: ones(S).tril(-1)), "the diagonal is missing"),
        (flawed(causal_part=ones), "causal=True is ignored"),
        (
            flawed(padding_part=lambda n, S: (torch.arange(S) >= n[:, None])[:, None, :]),
            "the padding part is inverted",
        ),
        (
            flawed(padding_part=lambda n, S: (torch.arange(S) <= n[:, None])[:, None, :]),
            "not <=",
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
        "Case 'lengths [4, 2], S = 4, causal=True'",
        "expected (2, 4, 4)",
        "your mask is (B, 1, S): right for padding alone",
    )
    fails_with(
        check_may_attend_mask,
        lambda S, lengths=None, causal=False: may_attend(S, lengths, causal).float(),
        "a torch.float32 tensor (its True/False pattern is right)",
        "already bool",
    )
    fails_with(
        check_may_attend_mask,
        lambda S, lengths=None, causal=False: may_attend(S, lengths, causal).squeeze(0)[:1],
        "expected (4, 4)",
    )
    not_done(check_may_attend_mask, skeleton, capsys)
