"""mha_course.masks: the builders, the two conventions, the canonical form and the checks."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_course import masks
from mha_course.masks import NO_MASK, AttentionMask

F64 = torch.float64
INF = float("-inf")


# ---------------------------------------------------------------- building masks


@pytest.mark.parametrize("L, S", [(1, 1), (4, 4), (3, 6), (6, 3)])
def test_causal_mask_is_sdpa_is_causal(L, S):
    """True on and below the diagonal: exactly the mask torch's SDPA uses for is_causal=True."""
    q, k, v = (
        torch.randn(L, 8, dtype=F64),
        torch.randn(S, 8, dtype=F64),
        torch.randn(S, 2, dtype=F64),
    )
    mask = masks.causal_mask(L, S)
    assert mask.dtype == torch.bool and mask.shape == (L, S)
    assert mask[:, 0].all()  # every query may attend at least to key 0
    torch.testing.assert_close(
        torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask),
        torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True),
    )


def test_causal_mask_in_the_other_convention_is_torchs_square_subsequent_mask():
    torch.testing.assert_close(
        masks.other_convention(masks.causal_mask(5, 5)),
        nn.Transformer.generate_square_subsequent_mask(5).isneginf(),
    )


def test_padding_mask_marks_the_padding():
    mask = masks.padding_mask(torch.tensor([3, 1, 4]), 4)
    expected = torch.tensor(
        [[False, False, False, True], [False, True, True, True], [False, False, False, False]]
    )
    assert torch.equal(mask, expected)
    with pytest.raises(TypeError, match="lengths must be a torch.Tensor"):
        masks.padding_mask([3, 1], 4)


def test_other_convention_flips_bool_masks_and_keeps_float_ones():
    may_attend = torch.tensor([[True, False], [False, False]])
    assert torch.equal(masks.other_convention(may_attend), ~may_attend)
    assert torch.equal(masks.other_convention(masks.other_convention(may_attend)), may_attend)
    additive = torch.tensor([[0.0, INF]])
    assert masks.other_convention(additive) is additive


def test_nothing_to_attend_in_both_kinds():
    may_attend = torch.tensor([[True, False], [False, False]])
    assert torch.equal(masks.nothing_to_attend(may_attend), torch.tensor([[False], [True]]))
    additive = torch.tensor([[0.0, INF], [INF, INF], [-1e9, -1e9]])
    assert torch.equal(masks.nothing_to_attend(additive), torch.tensor([[False], [True], [False]]))


# ---------------------------------------------------------------- the canonical form


def test_no_mask_is_the_empty_canonical_mask():
    assert masks.from_may_attend(None, (2, 3), F64) is NO_MASK
    assert masks.from_masked_out(None, None, (2, 4, 3, 3), F64) is NO_MASK
    x = torch.randn(2, 3)
    assert NO_MASK.zero_empty(x) is x


def test_zero_empty_zeroes_the_rows_of_the_empty_queries():
    x = torch.ones(2, 3, 4)  # (B, L, features)
    empty = torch.tensor([[[False], [True], [False]], [[False], [False], [False]]])  # (B, L, 1)
    zeroed = AttentionMask(None, empty).zero_empty(x)
    assert zeroed[0, 1].abs().sum() == 0 and zeroed.sum() == 5 * 4


def test_key_padding_stays_b_1_1_s_and_its_fully_padded_sequence_is_empty():
    """(B, S) padding becomes a (B, 1, 1, S) bias, not a (B, H, L, S) one; a sequence that is all
    padding marks its queries empty and gets a bias row of 0 (never a row of -inf)."""
    padding = masks.padding_mask(torch.tensor([2, 0, 3]), 3)  # sequence 1 is all padding
    mask = masks.from_masked_out(None, padding, (3, 4, 5, 3), torch.float32)
    assert mask.bias.shape == (3, 1, 1, 3) and mask.bias.dtype == torch.float32
    expected = torch.tensor([[0.0, 0.0, INF], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    assert torch.equal(mask.bias.view(3, 3), expected)
    assert mask.empty.shape == (3, 1, 1, 1)
    assert mask.empty.flatten().tolist() == [False, True, False]
    assert not mask.causal


def test_attn_mask_shapes_and_their_sum_with_padding():
    B, H, L, S = 2, 3, 4, 5
    blocked = torch.rand(L, S, generator=torch.Generator().manual_seed(0)) < 0.3
    blocked[:, 0] = False
    per_head = torch.zeros(B * H, L, S, dtype=torch.bool)
    padding = torch.tensor([[False] * 5, [False] * 3 + [True] * 2])
    assert masks.from_masked_out(blocked, None, (B, H, L, S), F64).bias.shape == (L, S)
    assert masks.from_masked_out(per_head, None, (B, H, L, S), F64).bias.shape == (B, H, L, S)
    both = masks.from_masked_out(blocked, padding, (B, H, L, S), F64)
    assert both.bias.shape == (B, 1, L, S)
    expected = torch.zeros(B, 1, L, S, dtype=F64).masked_fill(
        blocked | padding[:, None, None, :], INF
    )
    assert torch.equal(both.bias, expected)
    assert not both.empty.any()


def test_mixed_bool_and_float_masks_add_up():
    additive = torch.tensor([[0.5, -1.0, 2.0]], dtype=F64)  # (L, S) = (1, 3)
    padding = torch.tensor([[False, True, False]])  # (B, S) = (1, 3)
    mask = masks.from_masked_out(additive, padding, (1, 2, 1, 3), F64)
    assert torch.equal(mask.bias.view(3), torch.tensor([0.5, INF, 2.0], dtype=F64))


def test_the_two_conventions_give_the_same_canonical_mask():
    may_attend = torch.rand(2, 1, 4, 6, generator=torch.Generator().manual_seed(1)) < 0.5
    may_attend[0, 0, 2] = False  # query 2 of sequence 0 may attend to nothing
    a = masks.from_may_attend(may_attend, (2, 3, 4, 6), F64)
    b = masks.canonical(
        masks.other_convention(may_attend), None, (2, 3, 4, 6), F64, masked_out=True
    )
    assert torch.equal(a.bias, b.bias) and torch.equal(a.empty, b.empty)
    assert a.empty[0, 0, 2, 0] and a.empty.sum() == 1
    assert torch.isfinite(a.bias[0, 0, 2]).all()  # the empty row is 0, not -inf


def test_causal_canonical_mask_and_its_hint():
    built = masks.from_may_attend(None, (4, 6), F64, is_causal=True)
    assert built.causal and built.empty is None  # every query may attend to key 0
    assert torch.equal(built.bias.isneginf(), ~masks.causal_mask(4, 6))
    given_mask = nn.Transformer.generate_square_subsequent_mask(4, dtype=F64)
    hinted = masks.from_masked_out(given_mask, None, (1, 2, 4, 4), F64, is_causal=True)
    assert hinted.causal and torch.equal(hinted.bias, given_mask)  # is_causal: mask is causal
    padding = torch.tensor([[False, False, True, True]])
    with_padding = masks.from_masked_out(None, padding, (1, 2, 4, 4), F64, is_causal=True)
    assert not with_padding.causal  # the bias is no longer the causal mask alone
    assert with_padding.bias.shape == (1, 1, 4, 4)
    assert torch.equal(with_padding.bias.isneginf()[0, 0], ~masks.causal_mask(4, 4) | padding)


def test_one_dimensional_mask_gets_a_query_axis():
    mask = masks.from_may_attend(torch.tensor([True, False, False]), (2, 3), F64)
    assert mask.bias.shape == (1, 3) and mask.empty.shape == (1, 1)


@settings(max_examples=30, deadline=None)
@given(
    st.integers(1, 3), st.integers(1, 5), st.integers(1, 5), st.integers(0, 2**16), st.booleans()
)
def test_softmax_of_the_canonical_mask_is_masked_softmax_with_zero_rows(B, L, S, seed, float_mask):
    """For any mask, softmax(scores + bias) with the empty rows zeroed is the masked softmax,
    finite everywhere; the rows torch leaves NaN are exactly the empty ones."""
    g = torch.Generator().manual_seed(seed)
    may_attend = torch.rand(B, 1, L, S, generator=g) < 0.4
    mask_in = may_attend
    if float_mask:
        mask_in = torch.zeros(may_attend.shape, dtype=F64).masked_fill(~may_attend, INF)
    mask = masks.from_may_attend(mask_in, (B, 2, L, S), F64)
    scores = torch.randn(B, 2, L, S, generator=g, dtype=F64)
    weights = mask.zero_empty(torch.softmax(scores + mask.bias, dim=-1))
    assert torch.isfinite(weights).all()
    expected = torch.softmax(scores.masked_fill(~may_attend, INF), dim=-1)
    nan_rows = expected.isnan().any(-1, keepdim=True)
    assert torch.equal(nan_rows, mask.empty.expand_as(nan_rows))
    torch.testing.assert_close(weights, expected.nan_to_num(0.0))


# ---------------------------------------------------------------- checks


def test_require_mask_names_the_argument_the_convention_and_the_fix():
    with pytest.raises(TypeError, match="attn_mask must be a torch.Tensor, got list"):
        masks.require_mask("attn_mask", [True], F64, masks.MAY_ATTEND)
    with pytest.raises(
        ValueError,
        match=r"m has dtype torch.int64; expected torch.bool \(True = masked out\) or the inputs' "
        r"float dtype torch.float64 .* m.bool\(\)",
    ):
        masks.require_mask("m", torch.ones(2, dtype=torch.long), F64, masks.MASKED_OUT)
    with pytest.raises(ValueError, match=r"m.to\(torch.float64\)"):
        masks.require_mask("m", torch.ones(2), F64, masks.MASKED_OUT)
    with pytest.raises(ValueError, match=r"m must be a bool tensor \(True = may attend\)"):
        masks.require_mask("m", torch.ones(2, dtype=F64), F64, masks.MAY_ATTEND, floats=False)
    masks.require_mask("m", torch.ones(2, dtype=torch.bool), F64, masks.MAY_ATTEND)
    masks.require_mask("m", torch.ones(2, dtype=F64), F64, masks.MAY_ATTEND)


def test_broadcasts_to_without_growing():
    assert masks.broadcasts_to((1, 5), (2, 3, 4, 5))
    assert not masks.broadcasts_to((2, 4, 5), (4, 5))  # would grow the scores
    assert not masks.broadcasts_to((3, 5), (4, 5))
    with pytest.raises(ValueError, match=r"m of shape \(3, 5\) does not broadcast .* \(4, 5\)"):
        masks.require_broadcastable("m", torch.ones(3, 5), (4, 5))


def test_require_torch_masks_messages_use_the_callers_names():
    ok = torch.zeros(2, 3, dtype=torch.bool)
    masks.require_torch_masks(None, ok, (2, 4, 5, 3), F64, batched=True)
    with pytest.raises(
        ValueError,
        match=r"src_mask has shape \(3, 4\), expected \(L, L\) = \(3, 3\) or "
        r"\(B·nhead, L, L\) = \(2·4, 3, 3\)",
    ):
        masks.require_torch_masks(
            torch.zeros(3, 4, dtype=torch.bool),
            None,
            (2, 4, 3, 3),
            F64,
            batched=True,
            names=("src_mask", "src_key_padding_mask"),
            heads="nhead",
            lengths=("L", "L"),
        )
    with pytest.raises(
        ValueError, match=r"key_padding_mask has shape \(2, 3\), expected \(S,\) = \(3,\)"
    ):
        masks.require_torch_masks(None, ok, (1, 4, 5, 3), F64, batched=False)
