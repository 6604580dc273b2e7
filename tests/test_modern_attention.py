"""Lesson 08's pieces against independent references: RoPE against Hugging Face's Llama code,
ALiBi against the paper's slopes (and BLOOM's), GQA against torch's SDPA and repeat_interleave,
sliding windows against a loop."""

import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import bloom_alibi_slopes, llama_rotary
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from mha_course import (
    RotaryEmbedding,
    alibi_bias,
    alibi_slopes,
    masks,
    scaled_dot_product_attention,
)
from mha_course.modern import decoder_mask

f64 = torch.float64
quick = settings(max_examples=25, deadline=None)

# ---------------------------------------------------------------- RoPE


@pytest.mark.parametrize("head_dim, base", [(8, 10000.0), (32, 10000.0), (64, 500000.0)])
def test_rope_equals_hugging_faces_llama(head_dim, base):
    config = LlamaConfig(hidden_size=head_dim * 2, num_attention_heads=2, rope_theta=base)
    q, k = torch.randn(2, 2, 11, head_dim), torch.randn(2, 2, 11, head_dim)
    positions = torch.arange(5, 16)  # e.g. after 5 cached tokens
    cos, sin = llama_rotary(config, q, positions[None])
    q_ref, k_ref = apply_rotary_pos_emb(q, k, cos, sin)
    rope = RotaryEmbedding(head_dim, base=base)
    torch.testing.assert_close(rope(q, positions), q_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(rope(k, positions), k_ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=str)
@pytest.mark.parametrize("head_dim", [8, 64])
def test_rope_cast_to_half_precision_still_turns_far_positions_right(head_dim, dtype):
    """``model.to(torch.bfloat16)`` casts every module: the rotation of tokens 4000 positions in
    stays the float64 one, to the rounding of x, cos and sin in that dtype."""
    x = torch.randn(2, 16, head_dim, dtype=f64, generator=torch.Generator().manual_seed(0))
    positions = torch.arange(4000, 4016)
    expected = RotaryEmbedding(head_dim)(x, positions)
    got = RotaryEmbedding(head_dim).to(dtype)(x.to(dtype), positions)
    assert got.dtype == dtype
    eps = torch.finfo(dtype).eps
    torch.testing.assert_close(got.to(f64), expected, atol=4 * eps, rtol=2 * eps)


def test_rope_scores_depend_only_on_the_offset():
    rope = RotaryEmbedding(16)
    q, k = torch.randn(16, dtype=f64), torch.randn(16, dtype=f64)
    scores = []
    for m in (3, 10, 100):  # query at m + 3, key at m: offset 3 each time
        pos = torch.tensor([m + 3, m])
        rotated_q = rope(q.expand(2, 16), pos)[0]
        rotated_k = rope(k.expand(2, 16), pos)[1]
        scores.append(float(rotated_q @ rotated_k))
    assert max(scores) - min(scores) < 1e-9
    assert abs(scores[0] - float(q @ k)) > 1e-3  # and the offset does matter
    x = torch.randn(3, 16, dtype=f64)  # a rotation keeps lengths
    torch.testing.assert_close(rope(x, torch.arange(3)).norm(dim=-1), x.norm(dim=-1))


def test_rope_position_zero_is_the_identity_and_layout_is_rotate_half():
    rope = RotaryEmbedding(4, base=10000.0)
    x = torch.tensor([[1.0, 2.0, 3.0, 4.0]], dtype=f64)
    torch.testing.assert_close(rope(x, torch.tensor([0])), x)
    # position 1: pair (x0, x2) turns by 1 radian, pair (x1, x3) by 1/100
    got = rope(x, torch.tensor([1]))[0]
    c, s = math.cos(1.0), math.sin(1.0)
    torch.testing.assert_close(got[0], torch.tensor(1 * c - 3 * s, dtype=f64))
    torch.testing.assert_close(got[2], torch.tensor(3 * c + 1 * s, dtype=f64))


def test_rope_bad_arguments():
    with pytest.raises(ValueError, match=r"head_dim must be even for RoPE .* got 7"):
        RotaryEmbedding(7)
    rope = RotaryEmbedding(8)
    with pytest.raises(ValueError, match=r"head_dim = 8, got shape \(2, 5, 6\)"):
        rope(torch.randn(2, 5, 6), torch.arange(5))
    with pytest.raises(
        ValueError, match=r"positions must be 1-D .* \(L,\) = \(5,\), got shape \(4\)"
    ):
        rope(torch.randn(2, 5, 8), torch.arange(4))
    with pytest.raises(ValueError, match="base"):
        RotaryEmbedding(8, base=1.0)


# ---------------------------------------------------------------- ALiBi


@pytest.mark.parametrize("num_heads", [1, 2, 3, 4, 5, 6, 8, 12, 16, 20])
def test_alibi_slopes_are_the_papers(num_heads):
    torch.testing.assert_close(alibi_slopes(num_heads).float(), bloom_alibi_slopes(num_heads))


def test_alibi_slopes_for_eight_heads_and_the_bias():
    assert alibi_slopes(8).tolist() == [2.0**-k for k in range(1, 9)]  # 1/2 ... 1/256
    bias = alibi_bias(8, 4, 4, dtype=f64)
    assert bias.shape == (8, 4, 4)
    assert bias[0].tolist()[3] == [-1.5, -1.0, -0.5, 0.0]  # head 0 (m = 1/2), the last query
    assert (bias.diagonal(dim1=-2, dim2=-1) == 0).all()
    assert (bias.tril(-1) < 0).sum() == 8 * 6  # every earlier key is penalised


def test_alibi_gives_blooms_attention_under_the_causal_mask():
    """BLOOM adds m_h · j (key position only): the same softmax, row by row, as -m_h (i - j)."""
    H, L = 6, 7
    scores = torch.randn(H, L, L, dtype=f64)
    causal = masks.causal_mask(L, L)
    ours = (scores + alibi_bias(H, L, L, dtype=f64)).masked_fill(~causal, -math.inf).softmax(-1)
    slopes = bloom_alibi_slopes(H).to(f64)
    bloom = slopes[:, None, None] * torch.arange(L, dtype=f64)[None, None, :]
    theirs = (scores + bloom).masked_fill(~causal, -math.inf).softmax(-1)
    torch.testing.assert_close(ours, theirs)


def test_alibi_offset_continues_a_cache():
    full = alibi_bias(4, 6, 6)
    torch.testing.assert_close(alibi_bias(4, 2, 6, offset=4), full[:, 4:])


# Far back: float16 holds the integers exactly only up to 2048, bfloat16 up to 256; a bias
# computed from distances in either is off by a unit of its last place, or more.
HALF = [torch.float16, torch.bfloat16]
FAR = 4200  # keys: the last query is 4199 positions after the first key


def exact_alibi(slopes, T: int, S: int, offset: int):
    """-m_h · ((i + offset) - j), (H, T, S), in float64: exact for these slopes and distances."""
    distance = torch.arange(T, dtype=f64)[:, None] + offset - torch.arange(S, dtype=f64)
    return -slopes.to(f64)[:, None, None] * distance


@pytest.mark.parametrize("dtype", HALF, ids=str)
def test_alibi_bias_far_back_is_within_one_unit_of_the_last_place(dtype):
    for num_heads in range(1, 33):
        got = alibi_bias(num_heads, 3, FAR, offset=FAR - 3, dtype=dtype)
        expected = exact_alibi(bloom_alibi_slopes(num_heads), 3, FAR, FAR - 3)
        unit = torch.finfo(dtype).eps * torch.exp2(expected.abs().log2().floor())  # 0 at i = j
        assert got.dtype == dtype
        assert ((got.to(f64) - expected).abs() <= unit).all(), f"{num_heads} heads"


DECODER_MASKS = [  # (T new tokens, S keys, window); S - T keys come from a cache
    (5, 5, None),
    (1, FAR, None),
    (3, FAR, None),
    (4, FAR, 100),
    (6, 6, 2),
    (2, 300, 300),
]


@pytest.mark.parametrize("alibi", [False, True], ids=["no alibi", "alibi"])
@pytest.mark.parametrize("dtype", [torch.float32, *HALF], ids=str)
@pytest.mark.parametrize("T, S, window", DECODER_MASKS)
def test_decoder_mask_is_the_definition_far_back(T, S, window, dtype, alibi):
    """New token i is token S - T + i: it sees key j <= S - T + i, at most `window` back, with
    ALiBi's bias for the slopes given (in the model's dtype), rounded once."""
    position = torch.arange(T)[:, None] + S - T
    seen = torch.arange(S) <= position
    if window is not None:
        seen &= position - torch.arange(S) < window
    blocked = torch.zeros(T, S, dtype=f64).masked_fill(~seen, -math.inf)
    for num_heads in (1, 3, 12, 20, 32) if alibi else [1]:
        slopes = alibi_slopes(num_heads).to(dtype) if alibi else None
        mask = decoder_mask(T, S, dtype, window=window, alibi_slopes=slopes)
        bias = mask.bias if mask.bias is not None else torch.zeros(T, S, dtype=dtype)
        expected = blocked + (exact_alibi(slopes, T, S, S - T) if alibi else 0)
        assert bias.dtype == dtype and mask.empty is None
        torch.testing.assert_close(
            bias.expand(num_heads, T, S), expected.to(dtype).expand(num_heads, T, S), atol=0, rtol=0
        )


# ---------------------------------------------------------------- sliding windows


@quick
@given(st.integers(1, 9), st.integers(1, 9), st.integers(1, 10), st.integers(0, 4))
def test_sliding_window_mask_is_the_definition(L, S, window, offset):
    got = masks.sliding_window_mask(L, S, window, offset=offset)
    expected = torch.tensor(
        [[j <= i + offset and (i + offset) - j < window for j in range(S)] for i in range(L)]
    )
    assert torch.equal(got, expected)


def test_sliding_window_edge_cases():
    assert torch.equal(masks.sliding_window_mask(5, 5, 5), masks.causal_mask(5, 5))
    assert torch.equal(masks.sliding_window_mask(4, 4, 1), torch.eye(4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"window must be >= 1 .* got 0"):
        masks.sliding_window_mask(4, 4, 0)
    with pytest.raises(TypeError, match="window must be an int"):
        masks.sliding_window_mask(4, 4, 2.5)


def test_receptive_field_grows_with_depth():
    """Two layers of window 3 let the last token see 5 tokens back: the mask applied twice."""
    one = masks.sliding_window_mask(8, 8, 3).double()
    two = (one @ one) > 0
    assert two[7].nonzero().flatten().tolist() == [3, 4, 5, 6, 7]


# ---------------------------------------------------------------- GQA


def repeat_heads(x, group):
    return x.repeat_interleave(group, dim=-3)


@pytest.mark.parametrize("H_q, H_kv", [(8, 8), (8, 2), (8, 1), (6, 3)])
@pytest.mark.parametrize("mask", ["none", "causal", "bool", "float"])
def test_gqa_equals_torch_and_the_repeated_heads(H_q, H_kv, mask):
    g = torch.Generator().manual_seed(H_q * 10 + H_kv)
    q = torch.randn(2, H_q, 5, 8, dtype=f64, generator=g)
    k = torch.randn(2, H_kv, 7, 8, dtype=f64, generator=g)
    v = torch.randn(2, H_kv, 7, 4, dtype=f64, generator=g)
    kwargs = {}
    if mask == "causal":
        kwargs["is_causal"] = True
    elif mask == "bool":
        allowed = torch.rand(2, H_q, 5, 7, generator=g) < 0.6
        allowed[..., 0] = True
        kwargs["attn_mask"] = allowed
    elif mask == "float":
        kwargs["attn_mask"] = torch.randn(5, 7, dtype=f64, generator=g)
    out, weights = scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
    assert out.shape == (2, H_q, 5, 4) and weights.shape == (2, H_q, 5, 7)
    expected = F.scaled_dot_product_attention(q, k, v, enable_gqa=True, **kwargs)
    torch.testing.assert_close(out, expected)
    group = H_q // H_kv
    ref_out, ref_weights = scaled_dot_product_attention(
        q, repeat_heads(k, group), repeat_heads(v, group), **kwargs
    )
    torch.testing.assert_close(out, ref_out)
    torch.testing.assert_close(weights, ref_weights)


def test_gqa_gradients_equal_torchs():
    q = torch.randn(1, 4, 3, 8, dtype=f64, requires_grad=True)
    k = torch.randn(1, 2, 5, 8, dtype=f64, requires_grad=True)
    v = torch.randn(1, 2, 5, 8, dtype=f64, requires_grad=True)
    upstream = torch.randn(1, 4, 3, 8, dtype=f64)
    ours = torch.autograd.grad(
        (scaled_dot_product_attention(q, k, v, enable_gqa=True)[0] * upstream).sum(), (q, k, v)
    )
    theirs = torch.autograd.grad(
        (F.scaled_dot_product_attention(q, k, v, enable_gqa=True) * upstream).sum(), (q, k, v)
    )
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a, b)


def test_gqa_bad_arguments():
    q, k = torch.randn(1, 6, 3, 8), torch.randn(1, 4, 5, 8)
    with pytest.raises(
        ValueError, match=r"query's heads must be a multiple of the key's: .* 6 heads, .* 4"
    ):
        scaled_dot_product_attention(q, k, k, enable_gqa=True)
    k2 = torch.randn(1, 2, 5, 8)
    with pytest.raises(ValueError, match=r"pass enable_gqa=True"):
        scaled_dot_product_attention(q, k2, k2)
    with pytest.raises(ValueError, match=r"key and value must have the same number of heads"):
        scaled_dot_product_attention(q, k2, torch.randn(1, 3, 5, 8), enable_gqa=True)
    with pytest.raises(ValueError, match=r"\(\.\.\., heads, length, features\)"):
        scaled_dot_product_attention(
            torch.randn(3, 8), torch.randn(5, 8), torch.randn(5, 8), enable_gqa=True
        )


# ---------------------------------------------------------------- score_mod / mask_mod


def flex(*args, **kwargs):
    """torch's flex_attention, uncompiled (its reference path), its warning silenced."""
    import warnings

    from torch.nn.attention.flex_attention import flex_attention

    from mha_course.flex import EAGER_WARNING

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=EAGER_WARNING)
        return flex_attention(*args, **kwargs)


def test_attention_with_mods_equals_torchs_flex_attention():
    from torch.nn.attention.flex_attention import and_masks, create_block_mask

    from mha_course.flex import attention_with_mods

    g = torch.Generator().manual_seed(0)
    B, H, H_kv, L = 2, 4, 2, 20
    q = torch.randn(B, H, L, 8, generator=g, dtype=f64)
    k, v = (torch.randn(B, H_kv, L, 8, generator=g, dtype=f64) for _ in range(2))
    lengths = torch.tensor([20, 13])
    slopes = alibi_slopes(H).to(f64)

    def causal(b, h, i, j):
        return j <= i

    def window(b, h, i, j):
        return (j <= i) & (i - j < 5)

    def padding(b, h, i, j):
        return j < lengths[b]

    def alibi(score, b, h, i, j):
        return score - slopes[h] * (i - j)

    def per_batch_and_head(score, b, h, i, j):
        return score * (1.0 + 0.5 * b) + 0.1 * h

    cases = [
        (None, causal),
        (None, window),
        (alibi, causal),
        (alibi, and_masks(window, padding)),
        (per_batch_and_head, padding),
    ]
    for score_mod, mask_mod in cases:
        block_mask = create_block_mask(mask_mod, B, H, L, L, device="cpu", BLOCK_SIZE=8)
        expected = flex(q, k, v, score_mod=score_mod, block_mask=block_mask, enable_gqa=True)
        got = attention_with_mods(q, k, v, score_mod, mask_mod, enable_gqa=True)
        torch.testing.assert_close(got, expected)


def test_attention_with_mods_is_the_package_s_pieces_and_zero_for_an_empty_query():
    from mha_course.flex import attention_with_mods

    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 8, 6, 4, generator=g, dtype=f64) for _ in range(3))
    slopes = alibi_slopes(8).to(f64)
    got = attention_with_mods(
        q, k, v, lambda s, b, h, i, j: s - slopes[h] * (i - j), lambda b, h, i, j: j <= i
    )
    bias = alibi_bias(8, 6, 6, dtype=f64).masked_fill(~masks.causal_mask(6, 6), -math.inf)
    expected = F.softmax(q @ k.mT / 2.0 + bias, dim=-1) @ v
    torch.testing.assert_close(got, expected)
    nothing = attention_with_mods(q, k, v, mask_mod=lambda b, h, i, j: (j <= i) & (i > 0))
    assert torch.equal(nothing[..., 0, :], torch.zeros_like(nothing[..., 0, :]))
    assert torch.isfinite(nothing).all()


def test_attention_with_mods_bad_arguments():
    from mha_course.flex import attention_with_mods

    with pytest.raises(ValueError, match=r"must be 4-D"):
        attention_with_mods(torch.randn(3, 4), torch.randn(3, 4), torch.randn(3, 4))
    q, k = torch.randn(1, 6, 3, 4), torch.randn(1, 4, 3, 4)
    with pytest.raises(ValueError, match=r"multiple of the key's: 6 and 4"):
        attention_with_mods(q, k, k, enable_gqa=True)


def test_flex_unavailable_says_why(monkeypatch):
    import sys

    from mha_course.flex import flex_unavailable

    assert flex_unavailable("cpu") is None  # this torch has it, and it runs on the CPU
    monkeypatch.setitem(sys.modules, "torch.nn.attention.flex_attention", None)
    assert "has no torch.nn.attention.flex_attention" in flex_unavailable("cpu")
