"""The lesson 06 checker accepts every correct style of the online softmax (with and without the
causal flag and the log-sum-exp, and written to the older four-argument signature) and names the
classic mistakes."""

import math

import pytest
import torch

from mha_course import reference
from mha_course.checks import check_attention_in_blocks
from mha_course.checks.l06_fast import attention_in_blocks
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


def logsumexp_style(q, k, v, block_size, is_causal=False, return_lse=False):
    """Combines per-block log-sum-exps: the running state is lse = m + log ℓ; each causal block
    masked with tril(diagonal=-start), from its own position."""
    lse = torch.full(q.shape[:-1] + (1,), -math.inf, dtype=q.dtype)
    o = torch.zeros(*q.shape[:-1], v.size(-1), dtype=q.dtype)
    for start in range(0, k.size(-2), block_size):
        s = q @ k[..., start : start + block_size, :].mT / math.sqrt(q.size(-1))
        if is_causal:
            allowed = torch.ones(s.shape[-2:], dtype=torch.bool).tril(diagonal=-start)
            s = torch.where(allowed, s, -torch.inf)
        block_lse = torch.logsumexp(s, dim=-1, keepdim=True)
        new_lse = torch.logaddexp(lse, block_lse)
        o = (
            o * torch.exp(lse - new_lse)
            + torch.exp(s - new_lse) @ v[..., start : start + block_size, :]
        )
        lse = new_lse
    return (o, lse[..., 0]) if return_lse else o


def tiles_style(q, k, v, block_size, is_causal=False, **options):
    """Queries in blocks too (FlashAttention-2's loop order), skipping the key blocks that lie
    wholly after a causal query block; the log-sum-exp through **options."""
    outs, lses = [], []
    for i in range(0, q.size(-2), block_size):
        q_i = q[..., i : i + block_size, :]
        m = torch.full((*q_i.shape[:-1], 1), float("-inf"), dtype=q.dtype)
        total, o = torch.zeros_like(m), torch.zeros(*q_i.shape[:-1], v.size(-1), dtype=q.dtype)
        rows = torch.arange(i, i + q_i.size(-2)).unsqueeze(-1)
        stop = min(i + q_i.size(-2), k.size(-2)) if is_causal else k.size(-2)
        for j in range(0, stop, block_size):
            s = torch.einsum("...ld,...sd->...ls", q_i, k[..., j : j + block_size, :])
            s = s / q.size(-1) ** 0.5
            if is_causal:
                s[..., torch.arange(j, j + s.size(-1)) > rows] = float("-inf")
            m_new = torch.max(m, s.max(-1, keepdim=True).values)
            p, c = (s - m_new).exp(), (m - m_new).exp()
            total, o, m = (
                total * c + p.sum(-1, keepdim=True),
                o * c + p @ v[..., j : j + block_size, :],
                m_new,
            )
        outs.append(o / total)
        lses.append((m + total.log()).squeeze(-1))
    out = torch.cat(outs, dim=-2)
    return (out, torch.cat(lses, dim=-1)) if options.get("return_lse") else out


@pytest.mark.parametrize(
    "candidate",
    [reference.attention_in_blocks, normalised_style, logsumexp_style, tiles_style],
    ids=[
        "reference (the lesson's answer)",
        "normalised running output, four arguments",
        "log-sum-exp",
        "queries in blocks too, causal blocks skipped",
    ],
)
def test_accepts_correct_answers(candidate, capsys):
    passes(candidate, capsys)


def test_tests_the_flags_only_where_the_signature_takes_them(capsys):
    for candidate, cases in [
        (normalised_style, 8),  # the older signature: the plain cases and the memory case
        (
            lambda q, k, v, block_size, is_causal=False: logsumexp_style(
                q, k, v, block_size, is_causal
            ),
            13,
        ),
        (reference.attention_in_blocks, 16),  # plus 4 causal, 1 causal memory, 3 log-sum-exp
    ]:
        out = passes(candidate, capsys)
        assert f"all {cases} cases" in out, out


# ---------------------------------------------------------------- the classic mistakes


def causal_future(causal, j, L, width):
    """The keys of the block starting at j that ``causal`` masks, for each of the L queries."""
    rows = torch.arange(L)[:, None]
    cols = torch.arange(width) if causal == "block positions" else torch.arange(j, j + width)
    if causal == "inverted":
        return cols < rows
    if causal == "inverted, diagonal":
        return cols <= rows
    if causal == "diagonal":
        return cols >= rows
    return cols > rows


def mistaken(*, rescale_sum=True, rescale_out=True, subtract_max=True, running_max=True,
             divide_inside=False, accumulate=True, divide_at_end=True, scale=True,
             causal="right", lse="right"):  # fmt: skip
    """The lesson's answer written with one mistake, the way a learner would write it."""

    def attention_in_blocks(q, k, v, block_size, is_causal=False, return_lse=False):
        m = q.new_full(q.shape[:-1] + (1,), -math.inf)
        sum_exp = q.new_zeros(q.shape[:-1] + (1,))
        o = q.new_zeros(q.shape[:-1] + v.shape[-1:])
        if is_causal and causal == "full mask":  # the whole (L, S) mask, sliced per block
            may_attend = torch.ones(q.size(-2), k.size(-2), dtype=torch.bool).tril()
        for j in range(0, k.size(-2), block_size):
            s = q @ k[..., j : j + block_size, :].transpose(-2, -1)
            if scale:
                s = s / math.sqrt(q.size(-1))
            if is_causal and causal == "full mask":
                future = ~may_attend[:, j : j + block_size]
            elif is_causal and causal != "ignored":
                future = causal_future(causal, j, *s.shape[-2:])
            else:
                future = None
            if future is not None and causal != "after exp":
                s = s.masked_fill(future, 0.0 if causal == "zero" else -math.inf)
            block_max = s.amax(dim=-1, keepdim=True)
            m_new = torch.maximum(m, block_max) if running_max else block_max
            if subtract_max:
                rescale, p = torch.exp(m - m_new), torch.exp(s - m_new)
            else:
                rescale, p = 1.0, torch.exp(s)
            if is_causal and causal == "after exp":
                p = p * ~future
            if accumulate:
                sum_exp = sum_exp * (rescale if rescale_sum else 1.0) + p.sum(dim=-1, keepdim=True)
                o = o * (rescale if rescale_out else 1.0) + p @ v[..., j : j + block_size, :]
            else:
                sum_exp, o = p.sum(dim=-1, keepdim=True), p @ v[..., j : j + block_size, :]
            if divide_inside:
                o = o / sum_exp
            m = m_new
        out = o / sum_exp if divide_at_end and not divide_inside else o
        if not return_lse:
            return out
        return out, {
            "right": (m + sum_exp.log()).squeeze(-1),
            "log of the sum": sum_exp.log().squeeze(-1),
            "max": m.squeeze(-1),
            "no log": (m + sum_exp).squeeze(-1),
            "keepdim": m + sum_exp.log(),
        }[lse]

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
        (mistaken(divide_at_end=False), "one division by the running sum ℓ, after the loop"),
        (mistaken(scale=False), "the scores are not scaled"),
        (full_matrix, "builds a tensor of shape (..., L, S) = (..., 5, 12)"),
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


FLAG_MISTAKES = [  # (the mistake, the case it fails, a phrase of its likely cause)
    ({"causal": "ignored"}, "is_causal on", "the causal flag is ignored"),
    ({"causal": "block positions"}, "is_causal on", "the block's start j plus its index"),
    ({"causal": "inverted"}, "is_causal on", "your causal mask keeps the future"),
    ({"causal": "inverted, diagonal"}, "is_causal on", "the causal mask is inverted"),
    ({"causal": "diagonal"}, "is_causal on", "leaves out the diagonal"),
    ({"causal": "zero"}, "is_causal on", "the blocked scores were set to 0"),
    ({"causal": "after exp"}, "is_causal on", "the mask was applied after the exp"),
    ({"causal": "full mask"}, "is_causal on", "the whole (L, S) causal mask is built"),
    ({"lse": "log of the sum"}, "return_lse on", "your log-sum-exp is log ℓ alone"),
    ({"lse": "max"}, "return_lse on", "your log-sum-exp is the running max m alone"),
    ({"lse": "no log"}, "return_lse on", "your log-sum-exp is m + ℓ"),
    ({"lse": "keepdim"}, "return_lse on", "without the trailing axis of size 1"),
]


@pytest.mark.parametrize(
    "mistake, case, phrase", FLAG_MISTAKES, ids=[str(m) for m, _, _ in FLAG_MISTAKES]
)
def test_names_each_mistake_of_the_flags(mistake, case, phrase):
    message = fails_with(mistaken(**mistake), "Likely cause", phrase)
    assert message.startswith(f"Case '{case}")


def test_masking_after_the_exp_passes_ordinary_scores_and_fails_where_later_keys_are_huge():
    message = fails_with(mistaken(causal="after exp"), "NaN")
    assert "Case 'is_causal on, the later keys score up to 1000" in message


def test_the_pair_only_when_asked_for():
    def always_a_pair(q, k, v, block_size, is_causal=False, return_lse=False):
        return reference_pair(q, k, v, block_size, is_causal)

    def never_a_pair(q, k, v, block_size, is_causal=False, return_lse=False):
        return reference_pair(q, k, v, block_size, is_causal)[0]

    fails_with(always_a_pair, "your result is a tuple", "only when return_lse is True")
    fails_with(never_a_pair, "Case 'return_lse on", "should be a pair (output, lse); got Tensor")


def reference_pair(q, k, v, block_size, is_causal):
    return logsumexp_style(q, k, v, block_size, is_causal=is_causal, return_lse=True)


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
        crashes, "Case 'one head", "RuntimeError", "Likely cause", "its scores are (..., L, block)"
    )


def test_wrong_shape_is_reported():
    fails_with(lambda q, k, v, b: reference.attention_in_blocks(q, k, v, b)[..., :1], "shape")


def test_registered_for_lesson_06_and_used_until_the_learner_passes(capsys):
    exercise = by_name("attention_in_blocks")
    assert exercise.lesson == "06" and exercise.check is check_attention_in_blocks
    assert exercise.reference is reference.attention_in_blocks is attention_in_blocks
    assert exercise.points == 3

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
