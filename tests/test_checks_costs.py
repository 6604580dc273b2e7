"""The lesson-06 checkers of the FLOP and memory counts accept every correct style and name the
classic mistakes."""

import math

import pytest
import torch

from mha_course import reference
from mha_course.checks import check_attention_flops, check_scores_memory

from checker_helpers import fails_with, not_done, passes, skeleton

# ---------------------------------------------------------------- attention_flops


def flops_in_steps(B, H, L, S, D):
    scores = 2 * B * H * L * S * D  # Q Kᵀ: L·S dot products of length D, per head
    mix = 2 * B * H * L * S * D  # weights @ V: L·D sums of S products, per head
    return scores + mix


@pytest.mark.parametrize(
    "candidate", [reference.attention_flops, flops_in_steps, lambda *sizes: 4 * math.prod(sizes)]
)
def test_attention_flops_accepts_correct_answers(candidate, capsys):
    passes(check_attention_flops, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda B, H, L, S, D: 2 * B * H * L * S * D, "one of the two matmuls"),
        (lambda B, H, L, S, D: B * H * L * S * D, "a multiply-add is 2 FLOPs"),
        (lambda B, H, L, S, D: 4 * B * L * S * D, "the heads are missing"),
        (lambda B, H, L, S, D: 4 * B * H * L * L * D, "you used L·L"),
        (lambda B, H, L, S, D: 4 * B * H * S * S * D, "you used S·S"),
        (lambda B, H, L, S, D: 4 * B * H * L * S * D + 5 * B * H * L * S, "the softmax"),
        (lambda B, H, L, S, D: 3 * B * H * L * S * D, "each matmul is 2·B·H·L·S·D"),
    ],
)
def test_attention_flops_names_each_mistake(candidate, phrase):
    fails_with(check_attention_flops, candidate, "Likely cause", phrase)


def test_attention_flops_wrong_types(capsys):
    fails_with(
        check_attention_flops,
        lambda B, H, L, S, D: 4.0 * B * H * L * S * D,
        "should be an int, got the float",
        "(the number is right)",
    )
    fails_with(
        check_attention_flops,
        lambda B, H, L, S, D: torch.tensor(4 * B * H * L * S * D),
        "should be a Python int, got a tensor",
    )
    fails_with(check_attention_flops, lambda *sizes: str(4 * math.prod(sizes)), "got str")
    not_done(check_attention_flops, skeleton, capsys)


def test_attention_flops_shows_both_numbers():
    message = fails_with(check_attention_flops, lambda B, H, L, S, D: 2 * B * H * L * S * D)
    assert "expected 1,572,864" in message and "got      786,432 (0.5 × the reference)" in message


# ---------------------------------------------------------------- scores_memory


@pytest.mark.parametrize(
    "candidate",
    [
        reference.scores_memory,
        lambda B, H, L, S, dtype: B * H * L * S * torch.finfo(dtype).bits // 8,
        lambda B, H, L, S, dtype: B * H * L * S * torch.empty((), dtype=dtype).element_size(),
        lambda B, H, L, S, dtype: torch.empty(B, H, L, S, dtype=dtype, device="meta").nbytes,
    ],
)
def test_scores_memory_accepts_every_correct_style(candidate, capsys):
    passes(check_scores_memory, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda B, H, L, S, dtype: B * H * L * S * torch.finfo(dtype).bits, "you counted bits"),
        (lambda B, H, L, S, dtype: B * H * L * S * 4, "4 bytes per number whatever the dtype"),
        (lambda B, H, L, S, dtype: B * H * L * S, "the number of elements"),
        (lambda B, H, L, S, dtype: B * L * S * dtype.itemsize, "the heads are missing"),
        (lambda B, H, L, S, dtype: B * H * L * L * dtype.itemsize, "you used L·L"),
        (lambda B, H, L, S, dtype: B * H * S * S * dtype.itemsize, "you used S·S"),
    ],
)
def test_scores_memory_names_each_mistake(candidate, phrase):
    fails_with(check_scores_memory, candidate, "Likely cause", phrase)


def test_scores_memory_wrong_types(capsys):
    fails_with(
        check_scores_memory,
        lambda B, H, L, S, dtype: B * H * L * S * torch.finfo(dtype).bits / 8,
        "got the float",
        "use * and //",
    )
    fails_with(
        check_scores_memory,
        lambda B, H, L, S, dtype: B * H * L * S * dtype.size,
        "AttributeError",
        "dtype.itemsize",
    )
    not_done(check_scores_memory, skeleton, capsys)
