"""mha_course.scaled_dot_product_attention against torch.nn.functional.scaled_dot_product_attention."""

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given
from hypothesis import strategies as st

from mha_course import scaled_dot_product_attention as sdpa
from mha_course.attention import masked_softmax

# float64 everywhere, so "equal to torch" means equal to round-off
randn = functools.partial(torch.randn, dtype=torch.float64)
rand = functools.partial(torch.rand, dtype=torch.float64)
zeros = functools.partial(torch.zeros, dtype=torch.float64)


def reference_weights(q, k, mask=None, scale=None):
    scale = 1 / math.sqrt(q.size(-1)) if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale
    if mask is not None and mask.dtype == torch.bool:
        scores = scores.masked_fill(~mask, float("-inf"))
    elif mask is not None:
        scores = scores + mask
    return torch.softmax(scores, dim=-1)


@st.composite
def attention_inputs(draw):
    lead = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    L, S, E, Ev = (draw(st.integers(1, 7)) for _ in range(4))
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    q = randn(*lead, L, E, generator=g)
    k = randn(*lead, S, E, generator=g)
    v = randn(*lead, S, Ev, generator=g)
    kind = draw(st.sampled_from(["none", "bool", "float", "causal"]))
    mask = None
    if kind == "bool":
        mask_shape = draw(st.sampled_from([(L, S), (*lead, L, S), (*lead, 1, S)]))
        mask = rand(mask_shape, generator=g) > 0.4
        mask[..., 0] = True  # every query may attend somewhere: torch is finite there too
    elif kind == "float":
        mask = randn(L, S, generator=g)
    scale = draw(st.sampled_from([None, 0.5]))
    return q, k, v, mask, kind == "causal", scale


@given(attention_inputs())
def test_matches_torch_sdpa(inputs):
    q, k, v, mask, is_causal, scale = inputs
    if is_causal and q.size(-2) > k.size(-2):
        return  # top-left causal alignment leaves queries with no key: covered separately
    out, w = sdpa(q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale)
    expected = F.scaled_dot_product_attention(
        q, k, v, attn_mask=mask, is_causal=is_causal, scale=scale
    )
    torch.testing.assert_close(out, expected)
    if not is_causal:
        torch.testing.assert_close(w, reference_weights(q, k, mask, scale).expand_as(w))
    torch.testing.assert_close(w.sum(-1), torch.ones_like(w.sum(-1)))


@given(attention_inputs())
def test_gradients_match_torch(inputs):
    q, k, v, mask, is_causal, scale = inputs
    if is_causal and q.size(-2) > k.size(-2):
        return
    ours = [t.clone().requires_grad_() for t in (q, k, v)]
    theirs = [t.clone().requires_grad_() for t in (q, k, v)]
    grad = randn(*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.size(-2), v.size(-1))
    sdpa(*ours, attn_mask=mask, is_causal=is_causal, scale=scale)[0].backward(grad)
    F.scaled_dot_product_attention(
        *theirs, attn_mask=mask, is_causal=is_causal, scale=scale
    ).backward(grad)
    for a, b in zip(ours, theirs):
        torch.testing.assert_close(a.grad, b.grad)


def test_weights_are_what_the_output_used():
    q, k, v = randn(2, 4, 8), randn(2, 5, 8), randn(2, 5, 3)
    out, w = sdpa(q, k, v)
    torch.testing.assert_close(out, w @ v)
    assert w.shape == (2, 4, 5)


def test_leading_dims_broadcast_as_in_torch():
    q, k, v = randn(2, 3, 4, 8), randn(1, 3, 6, 8), randn(3, 6, 5)  # one set of keys for both
    mask = rand(2, 1, 4, 6) > 0.3
    mask[..., 0] = True
    out, w = sdpa(q, k, v, attn_mask=mask)
    assert out.shape == (2, 3, 4, 5) and w.shape == (2, 3, 4, 6)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))


def test_is_causal_is_top_left_aligned_lower_triangle():
    q, k, v = randn(4, 8), randn(6, 8), randn(6, 8)
    _, w = sdpa(q, k, v, is_causal=True)
    allowed = torch.ones(4, 6, dtype=torch.bool).tril()
    assert (w[~allowed] == 0).all()
    _, w_mask = sdpa(q, k, v, attn_mask=allowed)
    torch.testing.assert_close(w, w_mask)


def test_query_with_nothing_to_attend_to_gets_zeros_not_nan():
    q, k, v = randn(3, 4), randn(5, 4), randn(5, 2)
    mask = torch.ones(3, 5, dtype=torch.bool)
    mask[1] = False
    q.requires_grad_()
    out, w = sdpa(q, k, v, attn_mask=mask)
    assert torch.equal(out[1], zeros(2)) and torch.equal(w[1], zeros(5))
    torch.testing.assert_close(out[[0, 2]], sdpa(q[[0, 2]], k, v)[0])
    out.sum().backward()
    assert torch.isfinite(q.grad).all()
    float_mask = zeros(3, 5).masked_fill(~mask, float("-inf"))
    out_f, w_f = sdpa(q, k, v, attn_mask=float_mask)
    torch.testing.assert_close(out_f, out)
    assert torch.isfinite(w_f).all()


def test_masked_softmax_rows_of_minus_inf():
    s = torch.tensor([[0.0, float("-inf")], [float("-inf"), float("-inf")]])
    torch.testing.assert_close(masked_softmax(s), torch.tensor([[1.0, 0.0], [0.0, 0.0]]))


@pytest.mark.parametrize("factor", [1e3, 1e6])
def test_stable_for_huge_logits(factor):
    q, k, v = factor * randn(5, 8), randn(6, 8), randn(6, 3)
    out, w = sdpa(q.float(), k.float(), v.float())
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    torch.testing.assert_close(w.sum(-1), torch.ones(5, dtype=torch.float32))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_close_to_float64(dtype):
    q, k, v = randn(2, 6, 16), randn(2, 9, 16), randn(2, 9, 16)
    mask = rand(2, 6, 9) > 0.3
    mask[..., 0] = True
    out, w = sdpa(q.to(dtype), k.to(dtype), v.to(dtype), attn_mask=mask)
    assert out.dtype == dtype and w.dtype == dtype
    expected, expected_w = sdpa(q, k, v, attn_mask=mask)
    tol = 2e-2 if dtype == torch.float16 else 6e-2
    torch.testing.assert_close(out.double(), expected, atol=tol, rtol=tol)
    torch.testing.assert_close(w.double(), expected_w, atol=tol, rtol=tol)


def test_dropout_drops_and_rescales_weights():
    torch.manual_seed(0)
    q, k, v = randn(64, 8), randn(32, 8), randn(32, 4)
    out, w = sdpa(q, k, v, dropout_p=0.5)
    _, clean = sdpa(q, k, v)
    dropped = w == 0
    assert 0.4 < dropped.double().mean() < 0.6
    torch.testing.assert_close(w[~dropped], 2 * clean[~dropped])
    torch.testing.assert_close(out, w @ v)


@pytest.mark.parametrize(
    "args, kwargs, message",
    [
        ((randn(4, 8), randn(6, 7), randn(6, 3)), {}, "query (4, 8) has E=8, key (6, 7) has E=7"),
        ((randn(4, 8), randn(6, 8), randn(5, 3)), {}, "key (6, 8) has S=6, value (5, 3) has S=5"),
        (
            (randn(4, 8), randn(6, 8), randn(6, 3)),
            {"attn_mask": torch.ones(4, 5, dtype=torch.bool)},
            "attn_mask of shape (4, 5) does not broadcast to the scores' shape (4, 6)",
        ),
        (
            (randn(4, 8), randn(6, 8), randn(6, 3)),
            {"attn_mask": torch.ones(4, 6, dtype=torch.long)},
            "attn_mask has dtype torch.int64; expected torch.bool",
        ),
        (
            (randn(4, 8), randn(6, 8), randn(6, 3)),
            {"attn_mask": torch.ones(3, 4, 6, dtype=torch.bool)},
            "does not broadcast to the scores' shape (4, 6)",
        ),
        ((randn(2, 4, 8), randn(3, 6, 8), randn(3, 6, 3)), {}, "do not broadcast together"),
        (
            (randn(4, 8), randn(6, 8), randn(6, 3)),
            {"attn_mask": torch.ones(4, 6, dtype=torch.bool), "is_causal": True},
            "not both",
        ),
        ((randn(8), randn(6, 8), randn(6, 3)), {}, "query must have at least 2 dims"),
        (
            (torch.ones(4, 8, dtype=torch.long), randn(6, 8), randn(6, 3)),
            {},
            "query must be a floating-point",
        ),
        (
            (randn(4, 8), randn(6, 8), randn(6, 3)),
            {"dropout_p": 1.5},
            "dropout_p must be a probability",
        ),
    ],
)
def test_bad_arguments_raise_value_error_with_shapes(args, kwargs, message):
    with pytest.raises(ValueError) as error:
        sdpa(*args, **kwargs)
    assert message in str(error.value)


def test_wrong_type_is_a_type_error():
    with pytest.raises(TypeError, match="query must be a torch.Tensor, got list"):
        sdpa([[1.0]], randn(1, 1), randn(1, 1))
