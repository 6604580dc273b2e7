"""The lesson 06 checker accepts every correct style of the online softmax and names the classic
mistakes."""

import math

import pytest
import torch

from mha_course import reference
from mha_course.checks import check_attention_in_blocks
from mha_course.exercises import by_name, yours_or_reference

import checker_helpers as shared


def passes(candidate, capsys):
    return shared.passes(check_attention_in_blocks, candidate, capsys)


def fails_with(candidate, *phrases):
    return shared.fails_with(check_attention_in_blocks, candidate, *phrases)


# ---------------------------------------------------------------- correct answers, several styles


def normalised_style(q, k, v, block_size):
    """Keeps o normalised at every step (FlashAttention-1 style), with torch.split and plain
    Python floats for the first block."""
    o = m = sum_exp = None
    scale = q.size(-1) ** -0.5
    for k_j, v_j in zip(k.split(block_size, dim=-2), v.split(block_size, dim=-2)):
        s = torch.einsum("...ld,...sd->...ls", q, k_j) * scale
        block_max = s.max(dim=-1, keepdim=True).values
        if m is None:
            p = (s - block_max).exp()
            m, sum_exp, o = block_max, p.sum(-1, keepdim=True), p @ v_j / p.sum(-1, keepdim=True)
            continue
        m_new = torch.max(m, block_max)
        old = sum_exp * (m - m_new).exp()
        p = (s - m_new).exp()
        sum_new = old + p.sum(-1, keepdim=True)
        o = (o * old + p @ v_j) / sum_new
        m, sum_exp = m_new, sum_new
    return o


def logsumexp_style(q, k, v, block_size):
    """Combines per-block log-sum-exps: the running state is lse = m + log ℓ."""
    lse = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
    o = torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype)
    for start in range(0, k.size(-2), block_size):
        s = q @ k[..., start : start + block_size, :].mT / math.sqrt(q.size(-1))
        block_lse = torch.logsumexp(s, dim=-1, keepdim=True)
        new_lse = torch.logaddexp(lse, block_lse)
        o = (
            o * torch.exp(lse - new_lse)
            + torch.exp(s - new_lse) @ v[..., start : start + block_size, :]
        )
        lse = new_lse
    return o


@pytest.mark.parametrize(
    "candidate",
    [reference.attention_in_blocks, normalised_style, logsumexp_style],
    ids=["reference (the lesson's answer)", "normalised running output", "log-sum-exp"],
)
def test_accepts_correct_answers(candidate, capsys):
    passes(candidate, capsys)


# ---------------------------------------------------------------- the classic mistakes


def mistaken(*, rescale_sum=True, rescale_out=True, subtract_max=True, running_max=True,
             divide_inside=False, accumulate=True, divide_at_end=True, scale=True):  # fmt: skip
    """The lesson's answer written with one mistake, the way a learner would write it."""

    def attention_in_blocks(q, k, v, block_size):
        m = q.new_full(q.shape[:-1] + (1,), -math.inf)
        sum_exp = q.new_zeros(q.shape[:-1] + (1,))
        o = q.new_zeros(q.shape[:-1] + v.shape[-1:])
        for j in range(0, k.size(-2), block_size):
            s = q @ k[..., j : j + block_size, :].transpose(-2, -1)
            if scale:
                s = s / math.sqrt(q.size(-1))
            block_max = s.amax(dim=-1, keepdim=True)
            m_new = torch.maximum(m, block_max) if running_max else block_max
            if subtract_max:
                rescale, p = torch.exp(m - m_new), torch.exp(s - m_new)
            else:
                rescale, p = 1.0, torch.exp(s)
            if accumulate:
                sum_exp = sum_exp * (rescale if rescale_sum else 1.0) + p.sum(dim=-1, keepdim=True)
                o = o * (rescale if rescale_out else 1.0) + p @ v[..., j : j + block_size, :]
            else:
                sum_exp, o = p.sum(dim=-1, keepdim=True), p @ v[..., j : j + block_size, :]
            if divide_inside:
                o = o / sum_exp
            m = m_new
        return o / sum_exp if divide_at_end and not divide_inside else o

    return attention_in_blocks


def each_block_softmax(q, k, v, block_size):
    o = 0
    for j in range(0, k.size(-2), block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) / math.sqrt(q.size(-1))
        o = o + torch.softmax(s, dim=-1) @ v[..., j : j + block_size, :]
    return o


def full_matrix(q, k, v, block_size):
    """Right numbers, but the whole point missed: all the scores at once."""
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    return torch.softmax(s, dim=-1) @ v


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (mistaken(rescale_sum=False), "the running sum ℓ must be rescaled too"),
        (mistaken(rescale_out=False), "the running output o must be rescaled too"),
        (mistaken(rescale_sum=False, rescale_out=False), "nothing is rescaled"),
        (mistaken(subtract_max=False), "exp overflowed: the running max is not subtracted"),
        (mistaken(running_max=False), "m must be the running max over all the blocks"),
        (mistaken(divide_inside=True), "you divided by the running sum inside the loop"),
        (each_block_softmax, "you normalised each block on its own"),
        (mistaken(accumulate=False), "the last block of keys only"),
        (mistaken(divide_at_end=False), "return o / ℓ"),
        (mistaken(scale=False), "the scores are not scaled"),
        (full_matrix, "builds the full (..., L, S) = (..., 5, 12) score matrix"),
    ],
    ids=[
        "sum not rescaled",
        "output not rescaled",
        "nothing rescaled",
        "max not subtracted",
        "block max",
        "divided inside the loop",
        "each block normalised",
        "last block only",
        "not divided",
        "no scale",
        "full matrix",
    ],
)
def test_names_each_classic_mistake(candidate, phrase):
    fails_with(candidate, "Likely cause", phrase)


def test_the_max_not_subtracted_passes_small_scores_and_fails_on_huge_ones():
    message = fails_with(mistaken(subtract_max=False), "Case 'huge scores")
    assert "NaN" in message or "inf" in message


def test_rescaling_mistakes_are_caught_where_the_max_rises():
    message = fails_with(mistaken(rescale_sum=False), "Case '")
    assert "Case 'one head" in message or "the max rises" in message


def test_calling_a_fused_attention_is_told_to_write_it():
    def fused(q, k, v, block_size):
        return torch.nn.functional.scaled_dot_product_attention(q, k, v)

    fails_with(fused, "Your attention_in_blocks calls torch's scaled_dot_product_attention")


def test_not_done_yet_prints_and_returns(capsys):
    def skeleton(q, k, v, block_size):
        # 1. running state per query
        raise NotImplementedError

    assert check_attention_in_blocks(skeleton) is None
    assert "not done yet" in capsys.readouterr().out
    assert check_attention_in_blocks.passes(skeleton) is False
    assert check_attention_in_blocks.passes(reference.attention_in_blocks) is True


def test_a_crash_names_the_case_and_says_where_to_look():
    def crashes(q, k, v, block_size):
        return q @ k  # forgot the transpose

    fails_with(
        crashes, "Case 'one head", "RuntimeError", "Likely cause", "k[..., j:j + block_size, :]"
    )


def test_wrong_shape_is_reported():
    fails_with(lambda q, k, v, b: reference.attention_in_blocks(q, k, v, b)[..., :1], "shape")


def test_registered_for_lesson_06_and_used_until_the_learner_passes(capsys):
    exercise = by_name("attention_in_blocks")
    assert exercise.lesson == "06" and exercise.check is check_attention_in_blocks
    assert exercise.reference is reference.attention_in_blocks

    def skeleton(q, k, v, block_size):
        raise NotImplementedError

    assert yours_or_reference(
        check_attention_in_blocks, skeleton, reference.attention_in_blocks
    ) is (reference.attention_in_blocks)
    assert "is not done yet" in capsys.readouterr().out


def test_the_reference_reads_the_keys_in_blocks_and_keeps_dtype():
    q, k, v = torch.randn(3, 7, 4), torch.randn(3, 10, 4), torch.randn(3, 10, 5)
    out = reference.attention_in_blocks(q, k, v, 3)
    assert out.dtype == torch.float32 and out.shape == (3, 7, 5)
    plain = torch.softmax(q @ k.mT / 2.0, dim=-1) @ v
    assert torch.allclose(out, plain, atol=1e-6)
