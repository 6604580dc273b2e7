"""mha_course.kernel: the written-out attention and the fused route agree with each other and with
torch's SDPA, give an empty query zeros (never NaN) without a branch on the data, and trace whole
with torch.compile."""

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course import kernel, masks
from mha_course.masks import NO_MASK

F64 = torch.float64
INF = float("-inf")


def qkv(*lead, L=5, S=6, D=4, Dv=3, seed=0, dtype=F64):
    g = torch.Generator().manual_seed(seed)
    return (
        torch.randn(*lead, L, D, generator=g, dtype=dtype),
        torch.randn(*lead, S, D, generator=g, dtype=dtype),
        torch.randn(*lead, S, Dv, generator=g, dtype=dtype),
    )


@st.composite
def batches(draw):
    """(B, H) inputs and a canonical mask: none, padding, an (L, S) mask, or both; any query may
    be left with nothing to attend to."""
    B, H, L, S = (draw(st.integers(1, 4)) for _ in range(4))
    seed = draw(st.integers(0, 2**16))
    q, k, v = qkv(B, H, L=L, S=S, seed=seed)
    g = torch.Generator().manual_seed(seed)
    kind = draw(st.sampled_from(["none", "padding", "attn", "both", "per-head"]))
    attn = torch.rand(L, S, generator=g) < 0.3 if kind in ("attn", "both") else None
    if kind == "per-head":
        attn = torch.rand(B * H, L, S, generator=g) < 0.3
    padding = torch.rand(B, S, generator=g) < 0.3 if kind in ("padding", "both") else None
    mask = masks.from_masked_out(attn, padding, (B, H, L, S), F64)
    return q, k, v, mask, attn, padding


def torch_sdpa(q, k, v, attn, padding):
    """torch's SDPA with the same masks (True = may attend there); NaN rows are the empty ones."""
    B, H, L, S = q.size(0), q.size(1), q.size(2), k.size(2)
    blocked = torch.zeros(B, H, L, S, dtype=torch.bool)
    if attn is not None:
        blocked = blocked | attn.view(-1, H, L, S) if attn.dim() == 3 else blocked | attn
    if padding is not None:
        blocked = blocked | padding.view(B, 1, 1, S)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=~blocked), blocked.all(-1)


@settings(max_examples=40, deadline=None)
@given(batches())
def test_both_routes_equal_torch_sdpa_and_zero_the_empty_queries(batch):
    q, k, v, mask, attn, padding = batch
    expected, empty = torch_sdpa(q, k, v, attn, padding)  # empty: (B, H, L)
    out, weights = kernel.attention(q, k, v, mask)
    fused = kernel.fused_attention(q, k, v, mask)
    for got in (out, fused):
        assert torch.isfinite(got).all()
        torch.testing.assert_close(got[~empty], expected[~empty])
        assert (got[empty] == 0).all()
    assert (weights[empty] == 0).all()
    sums = weights.sum(-1)
    torch.testing.assert_close(sums[~empty], torch.ones_like(sums[~empty]))
    torch.testing.assert_close(out, weights @ v)


def test_gradients_are_finite_and_the_same_on_both_routes():
    q, k, v = qkv(2, 3)
    padding = torch.tensor([[True] * 6, [False] * 4 + [True] * 2])  # sequence 0: all padding
    mask = masks.from_masked_out(None, padding, (2, 3, 5, 6), F64)
    grads = []
    for route in (
        lambda *t: kernel.attention(*t, mask)[0],
        lambda *t: kernel.fused_attention(*t, mask),
    ):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        route(*leaves).sum().backward()
        grads.append([t.grad for t in leaves])
    for a, b in zip(*grads):
        assert torch.isfinite(a).all()
        torch.testing.assert_close(a, b)
    assert (grads[0][0][0] == 0).all()  # nothing reached the queries that attended to nothing


def test_in_place_path_without_autograd_gives_the_same_weights():
    q, k, v = qkv(2, 2)
    mask = masks.from_masked_out(None, torch.tensor([[False] * 6, [True] * 6]), (2, 2, 5, 6), F64)
    with torch.no_grad():
        out_fast, w_fast = kernel.attention(q, k, v, mask)
    out, w = kernel.attention(q.requires_grad_(), k, v, mask)
    assert w.requires_grad and not w_fast.requires_grad
    torch.testing.assert_close(w_fast, w.detach(), rtol=0, atol=0)
    torch.testing.assert_close(out_fast, out.detach(), rtol=0, atol=0)


@pytest.mark.parametrize("lead", [(), (3,), (2, 3)])
def test_any_number_of_leading_dims(lead):
    q, k, v = qkv(*lead)
    out, weights = kernel.attention(q, k, v)
    assert out.shape == (*lead, 5, 3) and weights.shape == (*lead, 5, 6)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v))
    torch.testing.assert_close(kernel.fused_attention(q, k, v), out)


def test_causal_hint_takes_the_kernels_causal_mode_with_the_same_result():
    q, k, v = qkv(2, 2, L=4, S=4)
    mask = masks.from_may_attend(None, (2, 2, 4, 4), F64, is_causal=True)
    assert mask.causal
    unhinted = mask._replace(causal=False)
    torch.testing.assert_close(
        kernel.fused_attention(q, k, v, mask), kernel.fused_attention(q, k, v, unhinted)
    )
    torch.testing.assert_close(
        kernel.fused_attention(q, k, v, mask), kernel.attention(q, k, v, mask)[0]
    )


def test_scale_and_dropout():
    q, k, v = qkv(3, L=64, S=32)
    torch.testing.assert_close(
        kernel.attention(q, k, v, scale=0.3)[0], F.scaled_dot_product_attention(q, k, v, scale=0.3)
    )
    torch.manual_seed(0)
    out, weights = kernel.attention(q, k, v, NO_MASK, dropout_p=0.5)
    clean = kernel.attention(q, k, v)[1]
    dropped = weights == 0
    assert 0.4 < dropped.double().mean() < 0.6
    torch.testing.assert_close(weights[~dropped], 2 * clean[~dropped])
    torch.testing.assert_close(out, weights @ v)  # the weights returned are the ones used


def test_attention_weights_and_softmax():
    scores = torch.tensor([[1.0, 2.0, 3.0], [0.0, 0.0, 0.0]], dtype=F64)
    mask = masks.from_may_attend(
        torch.tensor([[True, True, False], [False, False, False]]), (2, 3), F64
    )
    weights = kernel.attention_weights(scores, mask)
    torch.testing.assert_close(
        weights[0], torch.softmax(torch.tensor([1.0, 2.0, INF], dtype=F64), -1)
    )
    assert (weights[1] == 0).all()
    torch.testing.assert_close(kernel.attention_weights(scores), torch.softmax(scores, -1))
    in_place = scores.clone()
    assert kernel.softmax(in_place, mask.empty, in_place=True) is in_place


@pytest.mark.parametrize("need_weights", [True, False])
def test_both_routes_trace_whole_with_torch_compile(need_weights):
    """fullgraph=True fails on any branch on a tensor's value (.any(), .item(), bool(t)): the
    kernel has none, so on a GPU it never waits for the device."""
    torch.compiler.reset()

    def run(q, k, v, padding):
        mask = masks.from_masked_out(None, padding, (2, 2, 5, 6), F64)
        if need_weights:
            return kernel.attention(q, k, v, mask)
        return kernel.fused_attention(q, k, v, mask), None

    compiled = torch.compile(run, fullgraph=True, backend="eager")
    q, k, v = qkv(2, 2)
    padding = torch.tensor([[True] * 6, [False] * 3 + [True] * 3])
    for got, expected in zip(compiled(q, k, v, padding), run(q, k, v, padding)):
        if expected is not None:
            torch.testing.assert_close(got, expected)
