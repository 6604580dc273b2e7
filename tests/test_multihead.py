"""mha_course.MultiHeadAttention is torch.nn.MultiheadAttention: same outputs, weights and
gradients (float64, to round-off) over random sizes, masks and options; finite where torch gives
NaN; clear ValueErrors for bad arguments."""

from __future__ import annotations

import warnings

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course import MultiHeadAttention, masks

F64 = torch.float64
TOL = {"atol": 1e-10, "rtol": 1e-9}


def pair(seed=0, **options):
    """A torch module and ours with the same weights (random biases, so they are tested too)."""
    torch.manual_seed(seed)
    theirs = torch.nn.MultiheadAttention(**options)
    with torch.no_grad():
        for p in theirs.parameters():
            p.copy_(torch.randn_like(p) * 0.5)
    return theirs, MultiHeadAttention.from_torch(theirs)


def run(module, inputs, grad_out, self_attention=False, **kwargs):
    """Forward, then backward with a fixed upstream gradient; returns outputs and all gradients."""
    module.zero_grad(set_to_none=True)
    q, k, v = (x.detach().requires_grad_() for x in inputs)
    if self_attention:  # query is key is value: the case with one fused projection
        k = v = q
    out, weights = module(q, k, v, **kwargs)
    loss = (out * grad_out[0]).sum()
    if weights is not None:
        loss = loss + (weights * grad_out[1][: weights.numel()].view_as(weights)).sum()
    loss.backward()
    grads = [q.grad] + ([] if self_attention else [k.grad, v.grad])
    grads += [p.grad for _, p in sorted(module.named_parameters())]
    return out, weights, grads


def assert_same(a, b):
    out_a, w_a, grads_a = a
    out_b, w_b, grads_b = b
    torch.testing.assert_close(out_b, out_a, **TOL)
    assert (w_a is None) == (w_b is None)
    if w_a is not None:
        torch.testing.assert_close(w_b, w_a, **TOL)
    assert len(grads_a) == len(grads_b)
    for g_a, g_b in zip(grads_a, grads_b):
        torch.testing.assert_close(g_b, g_a, **TOL)


@st.composite
def configurations(draw):
    """Sizes, options, inputs and masks. Key 0 is never masked, so no query is fully masked
    (torch gives NaN there; that case has its own test)."""
    H, D = draw(st.integers(1, 3)), draw(st.integers(1, 4))
    E, B, L = H * D, draw(st.integers(1, 3)), draw(st.integers(1, 5))
    self_attention = draw(st.booleans())
    S = L if self_attention else draw(st.integers(1, 5))
    kdim = vdim = None
    if not self_attention and draw(st.booleans()):
        kdim, vdim = draw(st.integers(1, 5)), draw(st.integers(1, 5))
    batched = draw(st.booleans())
    options = dict(
        embed_dim=E,
        num_heads=H,
        bias=draw(st.booleans()),
        kdim=kdim,
        vdim=vdim,
        batch_first=draw(st.booleans()),
        dtype=F64,
    )
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=F64)

    def sequence(length, dim):
        if not batched:
            return randn(length, dim)
        return randn(B, length, dim) if options["batch_first"] else randn(length, B, dim)

    query = sequence(L, E)
    key = query if self_attention else sequence(S, kdim or E)
    value = query if self_attention else sequence(S, vdim or E)

    def mask(shape, kind):
        if kind == "bool":
            m = torch.rand(shape, generator=g) < 0.4
            m[..., 0] = False
        else:  # float: added to the scores, some -inf
            m = randn(*shape).masked_fill(torch.rand(shape, generator=g) < 0.3, float("-inf"))
            m[..., 0] = 0.0
        return m

    mask_kind = draw(st.sampled_from(["bool", "float"]))
    attn_mask = key_padding_mask = None
    attn_shape = draw(st.sampled_from([None, "2-D", "3-D"]))
    if attn_shape == "2-D":
        attn_mask = mask((L, S), mask_kind)
    elif attn_shape == "3-D":
        attn_mask = mask(((B if batched else 1) * H, L, S), mask_kind)
    if draw(st.booleans()):
        key_padding_mask = mask((B, S) if batched else (S,), mask_kind)
    forward = dict(
        key_padding_mask=key_padding_mask,
        attn_mask=attn_mask,
        need_weights=draw(st.booleans()),
        average_attn_weights=draw(st.booleans()),
        self_attention=self_attention,
    )
    grad_out = (randn(*query.shape[:-1], E), randn(B * H * L * S))
    return options, (query, key, value), forward, grad_out, seed


@settings(max_examples=40, deadline=None)
@given(configurations())
def test_outputs_weights_and_gradients_match_torch(config):
    options, inputs, forward, grad_out, seed = config
    theirs, ours = pair(seed, **options)
    expected = run(theirs, inputs, grad_out, **forward)
    assert_same(expected, run(ours, inputs, grad_out, **forward))


@settings(max_examples=15, deadline=None)
@given(configurations())
def test_eval_mode_matches_torch_fast_path(config):
    """In eval mode without autograd torch takes its fused C++ path; ours still agrees."""
    options, inputs, forward, _, seed = config
    theirs, ours = pair(seed, **options)
    theirs.eval(), ours.eval()
    q, k, v = inputs
    forward.pop("self_attention")
    with torch.no_grad():
        out_t, w_t = theirs(q, k, v, **forward)
        out_o, w_o = ours(q, k, v, **forward)
    torch.testing.assert_close(out_o, out_t, **TOL)
    if w_t is not None:
        torch.testing.assert_close(w_o, w_t, **TOL)


def test_float32_and_shapes_of_every_output():
    theirs, ours = pair(embed_dim=32, num_heads=4, batch_first=True)
    x, kv = torch.randn(2, 5, 32), torch.randn(2, 7, 32)
    out, w = ours(x, kv, kv)
    assert out.shape == (2, 5, 32) and w.shape == (2, 5, 7)
    assert ours(x, kv, kv, average_attn_weights=False)[1].shape == (2, 4, 5, 7)
    assert ours(x, kv, kv, need_weights=False)[1] is None
    torch.testing.assert_close(out, theirs(x, kv, kv)[0], atol=1e-5, rtol=1e-4)
    out, w = ours(x[0], kv[0], kv[0], average_attn_weights=False)  # unbatched
    assert out.shape == (5, 32) and w.shape == (4, 5, 7)


def test_one_token_self_attention_has_gradients():
    """The smallest input, where every view of the projections is contiguous."""
    theirs, ours = pair(embed_dim=8, num_heads=2, batch_first=True, dtype=F64)
    x = torch.randn(1, 1, 8, dtype=F64)
    grad_out = (torch.randn(1, 1, 8, dtype=F64), torch.randn(2, dtype=F64))
    for need_weights in (True, False):
        expected = run(theirs, (x, x, x), grad_out, self_attention=True, need_weights=need_weights)
        assert_same(
            expected, run(ours, (x, x, x), grad_out, self_attention=True, need_weights=need_weights)
        )


def test_default_batch_first_is_true_and_defaults_otherwise_match_torch():
    ours, theirs = MultiHeadAttention(8, 2), torch.nn.MultiheadAttention(8, 2)
    assert ours.batch_first is True and theirs.batch_first is False
    for name in (
        "embed_dim",
        "num_heads",
        "head_dim",
        "kdim",
        "vdim",
        "dropout",
        "_qkv_same_embed_dim",
    ):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert ours.in_proj_bias is not None and ours.out_proj.bias is not None


@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_causal(kind, need_weights, mode):
    """is_causal=True with the causal mask is torch's; without a mask, ours builds it."""
    theirs, ours = pair(embed_dim=12, num_heads=3, batch_first=True, dtype=F64)
    theirs.train(mode == "train"), ours.train(mode == "train")
    x = torch.randn(2, 6, 12, dtype=F64)
    blocked = torch.ones(6, 6, dtype=torch.bool).triu(1)
    mask = (
        blocked
        if kind == "bool"
        else torch.zeros(6, 6, dtype=F64).masked_fill(blocked, float("-inf"))
    )
    expected = theirs(x, x, x, attn_mask=mask, is_causal=True, need_weights=need_weights)
    for got in (
        ours(x, x, x, attn_mask=mask, is_causal=True, need_weights=need_weights),
        ours(x, x, x, is_causal=True, need_weights=need_weights),
    ):
        torch.testing.assert_close(got[0], expected[0], **TOL)
        if need_weights:
            torch.testing.assert_close(got[1], expected[1], **TOL)
    # with a key padding mask too, the causal mask built here is merged with it
    padding = torch.tensor([[False] * 6, [False] * 4 + [True] * 2])
    expected = theirs(
        x, x, x, attn_mask=blocked, key_padding_mask=padding, need_weights=need_weights
    )
    got = ours(x, x, x, is_causal=True, key_padding_mask=padding, need_weights=need_weights)
    torch.testing.assert_close(got[0], expected[0], **TOL)


def test_mixed_bool_and_float_masks_are_added_like_torch():
    theirs, ours = pair(embed_dim=8, num_heads=2, batch_first=True, dtype=F64)
    x = torch.randn(2, 4, 8, dtype=F64)
    attn_mask = torch.randn(4, 4, dtype=F64)
    padding = torch.tensor([[False, False, True, False], [False, True, True, False]])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch warns that mixing mask types is deprecated
        expected = theirs(x, x, x, attn_mask=attn_mask, key_padding_mask=padding)
    got = ours(x, x, x, attn_mask=attn_mask, key_padding_mask=padding)
    torch.testing.assert_close(got[0], expected[0], **TOL)
    torch.testing.assert_close(got[1], expected[1], **TOL)


# ---------------------------------------------------------------- fully masked queries


@pytest.mark.parametrize("need_weights", [True, False])
@pytest.mark.parametrize("kind", ["bool", "float"])
@pytest.mark.parametrize("mode", ["train", "eval"])
def test_fully_masked_query_is_finite_and_gets_zero_attention(need_weights, kind, mode):
    """Query 1 may attend to nothing (attn_mask), and every query of sentence 0 either
    (key_padding_mask): torch gives NaN in some paths; ours gives zero attention, so the
    output there is the out_proj bias, and the other queries are unaffected."""
    theirs, ours = pair(embed_dim=8, num_heads=2, batch_first=True, dtype=F64)
    theirs.train(mode == "train"), ours.train(mode == "train")
    x = torch.randn(2, 3, 8, dtype=F64, requires_grad=True)
    blocked = torch.zeros(3, 3, dtype=torch.bool)
    blocked[1] = True
    padding = torch.tensor([[True] * 3, [False] * 3])
    if kind == "float":
        blocked = torch.zeros(3, 3, dtype=F64).masked_fill(blocked, float("-inf"))
        padding = torch.zeros(2, 3, dtype=F64).masked_fill(padding, float("-inf"))
    out, w = ours(
        x,
        x,
        x,
        attn_mask=blocked,
        key_padding_mask=padding,
        need_weights=need_weights,
        average_attn_weights=False,
    )
    assert torch.isfinite(out).all()
    empty = torch.tensor([[True] * 3, [False, True, False]])  # (B, L): queries with no key
    bias = ours.out_proj.bias.expand(int(empty.sum()), -1)
    torch.testing.assert_close(out[empty], bias, **TOL)
    if need_weights:
        assert torch.isfinite(w).all() and (w.permute(0, 2, 1, 3)[empty] == 0).all()
    out.sum().backward()
    assert torch.isfinite(x.grad).all()
    assert all(torch.isfinite(p.grad).all() for p in ours.parameters() if p.grad is not None)
    # the queries that do have keys agree with torch (rows with NaN there are the empty ones)
    expected = theirs(x, x, x, attn_mask=blocked, key_padding_mask=padding, need_weights=False)[0]
    torch.testing.assert_close(out[~empty], expected[~empty], **TOL)


# ---------------------------------------------------------------- dropout


@pytest.mark.parametrize("need_weights", [True, False])
def test_dropout_in_training_is_torchs_and_off_in_eval(need_weights):
    theirs, ours = pair(embed_dim=16, num_heads=4, dropout=0.5, batch_first=True, dtype=F64)
    x = torch.randn(3, 5, 16, dtype=F64)
    kv = torch.randn(3, 7, 16, dtype=F64)
    for args in ((x, x, x), (x, kv, kv)):
        torch.manual_seed(1)
        expected = theirs(*args, need_weights=need_weights, average_attn_weights=False)
        torch.manual_seed(1)
        got = ours(*args, need_weights=need_weights, average_attn_weights=False)
        torch.testing.assert_close(got[0], expected[0], **TOL)  # the same weights were dropped
        assert not torch.allclose(got[0], ours(*args, need_weights=need_weights)[0])  # random
        if need_weights:
            torch.testing.assert_close(got[1], expected[1], **TOL)
            assert (got[1] == 0).float().mean() > 0.3  # about half the weights were dropped
    ours.eval()
    first, second = (
        ours(x, kv, kv, need_weights=need_weights),
        ours(x, kv, kv, need_weights=need_weights),
    )
    torch.testing.assert_close(first[0], second[0], rtol=0, atol=0)
    theirs.eval()
    torch.testing.assert_close(first[0], theirs(x, kv, kv)[0], **TOL)


# ---------------------------------------------------------------- from_torch, parameters


@pytest.mark.parametrize(
    "options",
    [
        dict(embed_dim=12, num_heads=3),
        dict(embed_dim=12, num_heads=4, bias=False, batch_first=True, dropout=0.25),
        dict(embed_dim=6, num_heads=2, kdim=5, vdim=3, dtype=F64),
    ],
)
def test_from_torch_copies_config_and_weights_and_state_dicts_interchange(options):
    theirs, ours = pair(**options)
    for name in (
        "embed_dim",
        "num_heads",
        "kdim",
        "vdim",
        "dropout",
        "batch_first",
        "_qkv_same_embed_dim",
    ):
        assert getattr(ours, name) == getattr(theirs, name), name
    assert (ours.in_proj_bias is None) == (theirs.in_proj_bias is None)
    state = theirs.state_dict()
    assert list(ours.state_dict()) == list(state)
    for name, tensor in ours.state_dict().items():
        assert torch.equal(tensor, state[name]) and tensor.dtype == state[name].dtype
    back = torch.nn.MultiheadAttention(**options)
    back.load_state_dict(ours.state_dict())  # and back again
    assert all(torch.equal(a, b) for a, b in zip(back.state_dict().values(), state.values()))
    assert ours.training == theirs.training
    assert not MultiHeadAttention.from_torch(theirs.eval()).training


def test_same_seed_gives_torchs_initial_weights():
    for kwargs in (dict(), dict(kdim=3, vdim=5)):
        torch.manual_seed(7)
        theirs = torch.nn.MultiheadAttention(8, 2, **kwargs)
        torch.manual_seed(7)
        ours = MultiHeadAttention(8, 2, **kwargs)
        assert all(
            torch.equal(a, b)
            for a, b in zip(theirs.state_dict().values(), ours.state_dict().values())
        )


def test_from_torch_rejects_what_it_cannot_copy():
    with pytest.raises(ValueError, match="add_bias_kv"):
        MultiHeadAttention.from_torch(torch.nn.MultiheadAttention(8, 2, add_bias_kv=True))
    with pytest.raises(TypeError, match="torch.nn.MultiheadAttention"):
        MultiHeadAttention.from_torch(torch.nn.Linear(8, 8))


# ---------------------------------------------------------------- the fast routes


def test_routes_fused_sdpa_one_qkv_projection_and_no_torch_mha_internals(monkeypatch):
    calls = {"sdpa": 0, "linear": 0}
    sdpa, linear = F.scaled_dot_product_attention, F.linear

    def counting(name, fn):
        def wrapped(*args, **kwargs):
            calls[name] += 1
            return fn(*args, **kwargs)

        return wrapped

    def forbidden(*args, **kwargs):
        raise AssertionError("torch's own multi-head attention was called")

    monkeypatch.setattr(F, "scaled_dot_product_attention", counting("sdpa", sdpa))
    monkeypatch.setattr(F, "linear", counting("linear", linear))
    monkeypatch.setattr(F, "multi_head_attention_forward", forbidden)
    monkeypatch.setattr(torch, "_native_multi_head_attention", forbidden)
    ours = MultiHeadAttention(16, 4)
    x, kv = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    ours(x, x, x, need_weights=False)
    assert calls == {"sdpa": 1, "linear": 2}  # fused QKV projection + out_proj
    ours(x, x, x, need_weights=True)
    assert calls == {"sdpa": 1, "linear": 4}  # weights needed: not the fused kernel
    ours(x, kv, kv, need_weights=False)
    assert calls == {"sdpa": 2, "linear": 8}  # cross-attention: W^Q, W^K, W^V, W^O


# ---------------------------------------------------------------- bad arguments

M = MultiHeadAttention(8, 2)
X, KV = torch.randn(2, 3, 8), torch.randn(2, 4, 8)


@pytest.mark.parametrize(
    "make, error, message",
    [
        (
            lambda: MultiHeadAttention(10, 3),
            ValueError,
            r"embed_dim \(10\) must be divisible by num_heads \(3\)",
        ),
        (lambda: MultiHeadAttention(0, 1), ValueError, "embed_dim must be a positive int, got 0"),
        (lambda: MultiHeadAttention(8, -2), ValueError, "num_heads must be a positive int, got -2"),
        (lambda: MultiHeadAttention(8, 2.0), TypeError, "num_heads must be an int"),
        (
            lambda: MultiHeadAttention(8, 2, dropout=1.5),
            ValueError,
            r"dropout must be a probability in \[0, 1\], got 1.5",
        ),
        (
            lambda: MultiHeadAttention(8, 2, kdim=0),
            ValueError,
            "kdim must be a positive int, got 0",
        ),
        (
            lambda: M(torch.randn(2, 3, 7), KV, KV),
            ValueError,
            r"query has size 7 in dim -1 \(shape \(2, 3, 7\)\), expected 8 \(embed_dim\)",
        ),
        (
            lambda: M(X, torch.randn(2, 4, 5), KV),
            ValueError,
            r"key has size 5 .* expected 8 \(kdim\)",
        ),
        (
            lambda: MultiHeadAttention(8, 2, vdim=3)(X, KV, KV),
            ValueError,
            r"value has size 8 .* expected 3 \(vdim\)",
        ),
        (
            lambda: M(X, KV, torch.randn(2, 5, 8)),
            ValueError,
            r"same length S .* key \(2, 4, 8\) has S=4, value \(2, 5, 8\) has S=5",
        ),
        (
            lambda: M(X, torch.randn(3, 4, 8), torch.randn(3, 4, 8)),
            ValueError,
            r"same batch size B in dim 0, got shapes \(2, 3, 8\), \(3, 4, 8\) and \(3, 4, 8\)",
        ),
        (
            lambda: MultiHeadAttention(8, 2, batch_first=False)(
                X, torch.randn(4, 5, 8), torch.randn(4, 5, 8)
            ),
            ValueError,
            r"same batch size B in dim 1 \(batch_first=False\)",
        ),
        (
            lambda: M(torch.randn(1, 2, 3, 8), KV, KV),
            ValueError,
            r"query must be 2-D or 3-D .* got 4-D shape \(1, 2, 3, 8\)",
        ),
        (
            lambda: M(torch.randn(8), KV, KV),
            ValueError,
            r"query must be 2-D or 3-D .* got 1-D shape \(8\)",
        ),
        (
            lambda: M(X[0], KV, KV),
            ValueError,
            r"all be batched \(3-D\) or all unbatched \(2-D\), got shapes \(3, 8\), \(2, 4, 8\)",
        ),
        (
            lambda: M(X.double(), KV.double(), KV.double()),
            ValueError,
            "parameters' dtype torch.float32, got torch.float64",
        ),
        (
            lambda: M(X.long(), KV, KV),
            ValueError,
            "query must be a floating-point tensor, got dtype torch.int64",
        ),
        (lambda: M(X, KV, [1.0]), TypeError, "value must be a torch.Tensor, got list"),
        (
            lambda: M(X, KV, KV, attn_mask=torch.zeros(3, 5, dtype=torch.bool)),
            ValueError,
            r"attn_mask has shape \(3, 5\), expected \(L, S\) = \(3, 4\) or \(B·num_heads, L, S\) = \(2·2, 3, 4\)",
        ),
        (
            lambda: M(X, KV, KV, attn_mask=torch.zeros(2, 3, 4, dtype=torch.bool)),
            ValueError,
            r"attn_mask has shape \(2, 3, 4\), expected .* \(B·num_heads, L, S\) = \(2·2, 3, 4\)",
        ),
        (
            lambda: M(X[0], KV[0], KV[0], attn_mask=torch.zeros(4, 3, 4, dtype=torch.bool)),
            ValueError,
            r"attn_mask has shape \(4, 3, 4\), expected \(L, S\) = \(3, 4\) or \(num_heads, L, S\) = \(2, 3, 4\)",
        ),
        (
            lambda: M(X, KV, KV, key_padding_mask=torch.zeros(2, 3, dtype=torch.bool)),
            ValueError,
            r"key_padding_mask has shape \(2, 3\), expected \(B, S\) = \(2, 4\)",
        ),
        (
            lambda: M(X[0], KV[0], KV[0], key_padding_mask=torch.zeros(1, 4, dtype=torch.bool)),
            ValueError,
            r"key_padding_mask has shape \(1, 4\), expected \(S,\) = \(4,\)",
        ),
        (
            lambda: M(X, KV, KV, key_padding_mask=torch.zeros(2, 4, dtype=torch.long)),
            ValueError,
            r"key_padding_mask has dtype torch.int64; expected torch.bool .* key_padding_mask.bool\(\)",
        ),
        (
            lambda: M(X, KV, KV, attn_mask=torch.zeros(3, 4, dtype=F64)),
            ValueError,
            r"attn_mask has dtype torch.float64; .* float dtype torch.float32 .* attn_mask.to\(torch.float32\)",
        ),
    ],
)
def test_bad_arguments_raise_clear_errors(make, error, message):
    with pytest.raises(error, match=message):
        make()


# ---------------------------------------------------------------- one mask conversion, no host sync


def test_forward_converts_the_masks_once(monkeypatch):
    calls = []
    canonical = masks.canonical

    def spy(*args, **kwargs):
        calls.append(args)
        return canonical(*args, **kwargs)

    monkeypatch.setattr(masks, "canonical", spy)
    m = MultiHeadAttention(8, 2)
    x = torch.randn(2, 3, 8)
    padding = torch.tensor([[False] * 3, [False, True, True]])
    for need_weights in (True, False):
        calls.clear()
        m(x, x, x, key_padding_mask=padding, attn_mask=torch.zeros(3, 3), need_weights=need_weights)
        assert len(calls) == 1


COMPILE_CASES = {
    "self-attention": {},
    "key_padding_mask": {"key_padding_mask": torch.tensor([[False] * 5, [False] * 2 + [True] * 3])},
    "attn_mask": {"attn_mask": torch.ones(5, 5, dtype=torch.bool).triu(1)},
    "fully masked query": {"key_padding_mask": torch.tensor([[True] * 5, [False] * 5])},
}


@pytest.mark.parametrize("case", COMPILE_CASES)
@pytest.mark.parametrize("need_weights", [True, False])
def test_torch_compile_fullgraph_traces_the_whole_forward(case, need_weights):
    """fullgraph=True refuses a graph break, and a branch on a tensor's value (``.any()``,
    ``.item()``, ``torch.equal``) is one: a forward that traces whole never waits for a GPU.
    The eager backend runs the traced graph with PyTorch's own ops (fast, no code generation)."""
    torch.compiler.reset()
    m = MultiHeadAttention(16, 4).eval()
    x = torch.randn(2, 5, 16)
    kwargs = dict(COMPILE_CASES[case], need_weights=need_weights)
    compiled = torch.compile(m, fullgraph=True, backend="eager")
    with torch.no_grad():
        out, weights = compiled(x, x, x, **kwargs)
        expected_out, expected_weights = m(x, x, x, **kwargs)
    torch.testing.assert_close(out, expected_out)
    assert (weights is None) == (not need_weights)
    if need_weights:
        torch.testing.assert_close(weights, expected_weights)


def test_masks_that_are_not_contiguous_work():
    theirs, ours = pair(embed_dim=8, num_heads=2, batch_first=True, dtype=F64)
    x = torch.randn(2, 4, 8, dtype=F64)
    padding = torch.tensor([[False, False], [False, True], [False, True], [False, False]]).T
    per_head = (torch.rand(4, 4, 4) < 0.3).transpose(1, 2)  # (B·H, L, S), a transposed view
    per_head[..., 0] = False
    assert not padding.is_contiguous() and not per_head.is_contiguous()
    expected = theirs(x, x, x, key_padding_mask=padding, attn_mask=per_head)
    got = ours(x, x, x, key_padding_mask=padding, attn_mask=per_head)
    torch.testing.assert_close(got[0], expected[0], **TOL)
    torch.testing.assert_close(got[1], expected[1], **TOL)
