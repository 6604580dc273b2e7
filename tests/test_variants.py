"""The four styles of lesson 02 are one function: each equals torch.nn.MultiheadAttention with the
same weights (float64), with and without masks, for self- and cross-attention, gradients included."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from mha_course import MultiHeadAttention
from mha_course.variants import VARIANTS, MHAParams, mha_einops, mha_loop, mha_sdpa

DT = torch.float64
ALL = list(VARIANTS.items())


def torch_mha(E, H, kdim=None, vdim=None, bias=True, seed=0):
    """A torch module with torch's own initialisation and random (nonzero) biases."""
    torch.manual_seed(seed)
    module = torch.nn.MultiheadAttention(
        E, H, bias=bias, kdim=kdim, vdim=vdim, batch_first=True, dtype=DT
    )
    if bias:
        with torch.no_grad():
            module.in_proj_bias.uniform_(-0.5, 0.5)
            module.out_proj.bias.uniform_(-0.5, 0.5)
    return module.eval()


def inputs(B, L, S, E, kdim=None, vdim=None, seed=1):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(B, L, E, generator=g, dtype=DT)
    k = torch.randn(B, S, kdim or E, generator=g, dtype=DT)
    v = torch.randn(B, S, vdim or E, generator=g, dtype=DT)
    return q, k, v


def random_mask(shape, seed=2):
    """A may-attend mask in which every query may attend to at least one key (torch gives NaN
    otherwise; that case has its own test)."""
    mask = torch.rand(shape, generator=torch.Generator().manual_seed(seed)) > 0.4
    mask[..., 0] = True
    return mask


def torch_reference(module, q, k, v, may_attend=None, key_padding=None):
    """torch's output and per-head weights; our True = may attend becomes torch's True = masked out."""
    H = module.num_heads
    attn_mask = None
    if may_attend is not None:
        blocked = ~may_attend
        if blocked.dim() == 3:  # (B, L, S) -> torch's (B·H, L, S)
            blocked = blocked.repeat_interleave(H, dim=0)
        elif blocked.dim() == 4:  # (B, H, L, S) -> (B·H, L, S)
            blocked = blocked.flatten(0, 1)
        attn_mask = blocked
    kpm = None if key_padding is None else ~key_padding
    return module(
        q,
        k,
        v,
        attn_mask=attn_mask,
        key_padding_mask=kpm,
        need_weights=True,
        average_attn_weights=False,
    )


def assert_matches(name, variant, module, q, k, v, our_mask=None, **torch_masks):
    params = MHAParams.from_module(module)
    expected, expected_weights = torch_reference(module, q, k, v, **torch_masks)
    out, weights = variant(q, k, v, params, attn_mask=our_mask)
    torch.testing.assert_close(out, expected, atol=1e-10, rtol=1e-10, msg=f"{name}: output")
    if weights is not None:
        torch.testing.assert_close(
            weights, expected_weights, atol=1e-12, rtol=1e-10, msg=f"{name}: weights"
        )
    else:
        assert name == "sdpa"  # only the fused kernel keeps its weights to itself


@pytest.mark.parametrize("name, variant", ALL)
def test_self_attention_equals_torch(name, variant):
    module = torch_mha(16, 4)
    x, _, _ = inputs(2, 7, 7, 16)
    assert_matches(name, variant, module, x, x, x)


@pytest.mark.parametrize("name, variant", ALL)
def test_cross_attention_with_other_key_and_value_widths_equals_torch(name, variant):
    module = torch_mha(12, 3, kdim=5, vdim=9)
    assert_matches(name, variant, module, *inputs(3, 4, 6, 12, kdim=5, vdim=9))


@pytest.mark.parametrize("name, variant", ALL)
@pytest.mark.parametrize("mask_shape", ["LS", "BLS", "BHLS"])
def test_masks_equal_torch(name, variant, mask_shape):
    B, L, S, E, H = 2, 5, 6, 8, 2
    module = torch_mha(E, H)
    shape = {"LS": (L, S), "BLS": (B, L, S), "BHLS": (B, H, L, S)}[mask_shape]
    mask = random_mask(shape)
    assert_matches(name, variant, module, *inputs(B, L, S, E), our_mask=mask, may_attend=mask)


@pytest.mark.parametrize("name, variant", ALL)
def test_key_padding_as_a_broadcast_mask_equals_torch_key_padding_mask(name, variant):
    B, L, S, E, H = 3, 4, 6, 8, 2
    lengths = torch.tensor([6, 3, 1])
    keep = torch.arange(S)[None, :] < lengths[:, None]  # (B, S), True = a real token
    module = torch_mha(E, H)
    assert_matches(
        name,
        variant,
        module,
        *inputs(B, L, S, E),
        our_mask=keep[:, None, None, :],
        key_padding=keep,
    )


@pytest.mark.parametrize("name, variant", ALL)
def test_causal_mask_equals_torch(name, variant):
    L, E, H = 6, 8, 4
    causal = torch.ones(L, L, dtype=torch.bool).tril()
    x, _, _ = inputs(2, L, L, E)
    assert_matches(name, variant, torch_mha(E, H), x, x, x, our_mask=causal, may_attend=causal)


@pytest.mark.parametrize("name, variant", ALL)
def test_without_bias_equals_torch(name, variant):
    module = torch_mha(8, 2, bias=False)
    params = MHAParams.from_module(module)
    assert all(b.abs().sum() == 0 for b in (params.b_Q, params.b_K, params.b_V, params.b_O))
    assert_matches(name, variant, module, *inputs(2, 3, 5, 8))


@pytest.mark.parametrize("name, variant", ALL)
def test_gradients_equal_torch(name, variant):
    """Gradients reach the inputs and, through the views from_module makes, the module's own
    parameters, and equal torch's."""
    B, L, S, E, H = 2, 4, 5, 8, 2
    module = torch_mha(E, H)
    q, k, v = (t.requires_grad_() for t in inputs(B, L, S, E))
    mask = random_mask((B, L, S))
    upstream = torch.randn(B, L, E, dtype=DT)
    leaves = [q, k, v, *module.parameters()]

    expected, _ = torch_reference(module, q, k, v, may_attend=mask)
    expected_grads = torch.autograd.grad(expected, leaves, upstream)
    out, _ = variant(q, k, v, MHAParams.from_module(module), attn_mask=mask)
    grads = torch.autograd.grad(out, leaves, upstream)
    for (pname, _), g, e in zip(
        [("query", 0), ("key", 0), ("value", 0), *module.named_parameters()], grads, expected_grads
    ):
        torch.testing.assert_close(g, e, atol=1e-10, rtol=1e-9, msg=f"{name}: gradient of {pname}")


@given(
    B=st.integers(1, 3),
    L=st.integers(1, 6),
    S=st.integers(1, 6),
    H=st.sampled_from([1, 2, 4]),
    D=st.integers(1, 4),
    kdim=st.sampled_from([None, 3]),
    masked=st.booleans(),
    seed=st.integers(0, 99),
)
@settings(max_examples=30, deadline=None)
def test_property_all_styles_equal_torch(B, L, S, H, D, kdim, masked, seed):
    E = H * D
    module = torch_mha(E, H, kdim=kdim, vdim=kdim, seed=seed)
    q, k, v = inputs(B, L, S, E, kdim=kdim, vdim=kdim, seed=seed)
    mask = random_mask((B, L, S), seed=seed) if masked else None
    for name, variant in ALL:
        assert_matches(name, variant, module, q, k, v, our_mask=mask, may_attend=mask)


def test_fully_masked_query_gets_zero_weights_and_the_output_bias_in_every_style():
    """torch gives NaN here; the course's convention is zero weights, so the output is b_O."""
    params = MHAParams.random(8, 2, dtype=DT)
    q, k, v = inputs(1, 3, 4, 8)
    mask = torch.ones(3, 4, dtype=torch.bool)
    mask[1] = False  # query 1 may attend to nothing
    outputs = {name: variant(q, k, v, params, attn_mask=mask) for name, variant in ALL}
    for name, (out, weights) in outputs.items():
        assert torch.isfinite(out).all(), name
        torch.testing.assert_close(out[0, 1], params.b_O, msg=name)
        if weights is not None:
            assert (weights[:, :, 1] == 0).all(), name
        torch.testing.assert_close(out, outputs["loop"][0], atol=1e-12, rtol=1e-12, msg=name)


def test_params_to_torch_and_back_are_the_same_weights():
    params = MHAParams.random(12, 3, kdim=5, vdim=7, dtype=DT, seed=4)
    again = MHAParams.from_module(params.to_torch())
    for a, b in zip(params.tensors(), again.tensors()):
        assert torch.equal(a, b)
    q, k, v = inputs(2, 3, 4, 12, kdim=5, vdim=7)
    torch.testing.assert_close(
        mha_loop(q, k, v, params)[0], params.to_torch()(q, k, v)[0], atol=1e-12, rtol=1e-12
    )


def test_head_slices_are_the_dli_per_head_matrices():
    """Columns i·D:(i+1)·D of W_Q are head i's W_i^Q (d_model × d_k): rows of torch's in_proj block."""
    module = torch_mha(8, 4)
    params = MHAParams.from_module(module)
    D = params.head_dim
    assert params.W_Q.shape == (8, 8) and D == 2
    W_Q_torch = module.in_proj_weight[:8]  # (E_out, E_in), rows = output features
    for i in range(4):
        assert torch.equal(params.W_Q[:, i * D : (i + 1) * D], W_Q_torch[i * D : (i + 1) * D].T)


def test_from_module_reads_the_package_multi_head_attention():
    torch_module = torch_mha(12, 3, kdim=4, vdim=6)
    ours = MultiHeadAttention.from_torch(torch_module)
    a, b = MHAParams.from_module(torch_module), MHAParams.from_module(ours)
    for x, y in zip(a.tensors(), b.tensors()):
        assert torch.equal(x, y)
    q, k, v = inputs(2, 3, 5, 12, kdim=4, vdim=6)
    torch.testing.assert_close(
        mha_einops(q, k, v, b)[0], ours(q, k, v, need_weights=False)[0], atol=1e-10, rtol=1e-10
    )


def test_float32_and_float64_agree():
    params = MHAParams.random(16, 4, dtype=DT)
    q, k, v = inputs(2, 5, 5, 16)
    ref = mha_loop(q, k, v, params)[0]
    for name, variant in ALL:
        out = variant(q.float(), k.float(), v.float(), params.to(torch.float32))[0]
        torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5, msg=name)


@pytest.mark.parametrize("name, variant", ALL)
def test_bad_arguments_raise_clear_errors(name, variant):
    params = MHAParams.random(8, 2, dtype=DT)
    q, k, v = inputs(2, 3, 4, 8)
    with pytest.raises(ValueError, match=r"query must be \(B, length, 8\).*\(2, 3, 6\)"):
        variant(q[..., :6], k, v, params)
    with pytest.raises(ValueError, match=r"key and value must have the same length S"):
        variant(q, k, v[:, :3], params)
    with pytest.raises(ValueError, match="batch size"):
        variant(q, k[:1], v[:1], params)
    with pytest.raises(ValueError, match="dtype torch.float32 but the weights are torch.float64"):
        variant(q.float(), k, v, params)
    with pytest.raises(ValueError, match="attn_mask must be a bool tensor"):
        variant(q, k, v, params, attn_mask=torch.ones(3, 4, dtype=torch.long))
    with pytest.raises(
        ValueError,
        match=r"attn_mask of shape \(3, 5\) does not fit the scores: expected \(L, S\) = \(3, 4\)",
    ):
        variant(q, k, v, params, attn_mask=torch.ones(3, 5, dtype=torch.bool))
    with pytest.raises(TypeError, match="params must be an MHAParams"):
        variant(q, k, v, torch_mha(8, 2))


def test_params_check_their_shapes():
    params = MHAParams.random(8, 2)
    with pytest.raises(ValueError, match=r"embed_dim \(8\) must be divisible by num_heads \(3\)"):
        MHAParams(*params.tensors(), num_heads=3)
    with pytest.raises(ValueError, match=r"W_O has shape \(8, 6\)"):
        MHAParams(*params.tensors()[:3], params.W_O[:, :6], *params.tensors()[4:], num_heads=2)
    with pytest.raises(ValueError, match=r"b_K has shape \(7,\)"):
        MHAParams(*params.tensors()[:5], params.b_K[:7], *params.tensors()[6:], num_heads=2)


def test_sdpa_style_uses_no_weights_and_works_with_each_cpu_kernel():
    from torch.nn.attention import SDPBackend, sdpa_kernel

    params = MHAParams.random(16, 4, dtype=torch.float32)
    q, k, v = (t.float() for t in inputs(2, 9, 9, 16))
    reference = mha_loop(q, k, v, params)[0]
    for backend in (SDPBackend.MATH, SDPBackend.FLASH_ATTENTION):
        with sdpa_kernel(backend):
            out, weights = mha_sdpa(q, k, v, params)
        assert weights is None
        torch.testing.assert_close(out, reference, atol=1e-5, rtol=1e-5, msg=str(backend))
