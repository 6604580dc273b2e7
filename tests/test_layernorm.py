"""mha_course.LayerNorm against torch.nn.LayerNorm, and the written-out formula against both."""

import functools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import assert_same_grads, randomise_
from torch import nn

from mha_course import LayerNorm
from mha_course.layernorm import layer_norm_by_hand

f64 = torch.float64
randn = functools.partial(torch.randn, dtype=f64)
quick = settings(max_examples=30, deadline=None)


@st.composite
def layer_norm_setups(draw):
    normalized = tuple(draw(st.lists(st.integers(1, 6), min_size=1, max_size=2)))
    lead = tuple(draw(st.lists(st.integers(1, 4), min_size=0, max_size=2)))
    eps = draw(st.sampled_from([1e-5, 1e-3, 0.5]))
    affine = draw(st.booleans())
    bias = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    return normalized, lead, eps, affine, bias, seed


@quick
@given(layer_norm_setups())
def test_layer_norm_matches_torch_values_and_gradients(setup):
    normalized, lead, eps, affine, bias, seed = setup
    g = torch.Generator().manual_seed(seed)
    theirs = nn.LayerNorm(normalized, eps=eps, elementwise_affine=affine, bias=bias, dtype=f64)
    randomise_(theirs, g)
    ours = LayerNorm(normalized, eps=eps, elementwise_affine=affine, bias=bias, dtype=f64)
    ours.load_state_dict(theirs.state_dict())
    x = (3 * randn(*lead, *normalized, generator=g) + 2).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    upstream = randn(*lead, *normalized, generator=g)
    out_ours, out_theirs = ours(x), theirs(x2)
    torch.testing.assert_close(out_ours, out_theirs)
    (out_ours * upstream).sum().backward()
    (out_theirs * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    assert_same_grads(ours, theirs)


@quick
@given(layer_norm_setups())
def test_layer_norm_by_hand_is_the_formula_torch_computes(setup):
    """The written-out formula (what lesson 03 teaches) equals the fused kernel the module uses,
    values and gradients."""
    normalized, lead, eps, affine, bias, seed = setup
    g = torch.Generator().manual_seed(seed)
    module = LayerNorm(normalized, eps=eps, elementwise_affine=affine, bias=bias, dtype=f64)
    randomise_(module, g)
    x = (3 * randn(*lead, *normalized, generator=g) + 2).requires_grad_()
    x2 = x.detach().clone().requires_grad_()
    by_hand = layer_norm_by_hand(x, module.normalized_shape, module.weight, module.bias, eps)
    fused = module(x2)
    torch.testing.assert_close(by_hand, fused)
    upstream = randn(*lead, *normalized, generator=g)
    (by_hand * upstream).sum().backward()
    (fused * upstream).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)


def test_layer_norm_normalises_each_token_over_its_features():
    x = randn(4, 3, 8) * 5 + 7
    y = LayerNorm(8, dtype=f64)(x)
    torch.testing.assert_close(y.mean(-1), torch.zeros(4, 3, dtype=f64))
    torch.testing.assert_close(
        y.var(-1, correction=0), torch.ones(4, 3, dtype=f64), atol=1e-4, rtol=0
    )
    # each token on its own: the batch around it does not matter (unlike BatchNorm)
    torch.testing.assert_close(LayerNorm(8, dtype=f64)(x[1:2]), y[1:2])


def test_layer_norm_of_a_constant_token_is_its_bias_not_nan():
    ln = LayerNorm(4)
    with torch.no_grad():
        ln.bias.copy_(torch.tensor([1.0, 2.0, 3.0, 4.0]))
    out = ln(torch.full((2, 4), 3.0))
    torch.testing.assert_close(out, torch.tensor([[1.0, 2.0, 3.0, 4.0]] * 2))


def test_layer_norm_parameters_and_float32_match_torch():
    ours, theirs = LayerNorm(6), nn.LayerNorm(6)
    assert (
        [n for n, _ in ours.named_parameters()]
        == [n for n, _ in theirs.named_parameters()]
        == ["weight", "bias"]
    )
    torch.testing.assert_close(ours.weight, torch.ones(6))
    torch.testing.assert_close(ours.bias, torch.zeros(6))
    x = torch.randn(3, 5, 6) * 4 + 1
    torch.testing.assert_close(ours(x), theirs(x))
    assert (
        LayerNorm(6, bias=False).bias is None
        and LayerNorm(6, elementwise_affine=False).weight is None
    )


def test_layer_norm_bad_arguments():
    with pytest.raises(
        ValueError, match=r"input of shape \(2, 5\) must end with normalized_shape \(6\)"
    ):
        LayerNorm(6)(torch.randn(2, 5))
    with pytest.raises(ValueError, match=r"must end with normalized_shape \(3, 4\)"):
        LayerNorm((3, 4))(torch.randn(2, 4, 3))
    with pytest.raises(ValueError, match="floating-point"):
        LayerNorm(3)(torch.ones(2, 3, dtype=torch.long))
    with pytest.raises(TypeError, match="torch.Tensor"):
        LayerNorm(3)([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="normalized_shape"):
        LayerNorm(0)
    with pytest.raises(ValueError, match="eps"):
        LayerNorm(3, eps=-1.0)
