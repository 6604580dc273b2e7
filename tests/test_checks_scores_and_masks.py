"""The lesson-01 step checkers (scores, padding mask, causal mask) accept every correct style and
name the classic mistakes."""

import math

import pytest
import torch
from einops import einsum

from mha_course import reference
from mha_course.checks import check_attention_scores, check_causal_mask, check_padding_mask

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
