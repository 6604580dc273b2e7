"""LayerNorm, positional encoding, EncoderLayer and Encoder against PyTorch's own modules."""

import functools
import math

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from mha_course import (
    Encoder,
    EncoderLayer,
    LayerNorm,
    MultiHeadAttention,
    PositionalEncoding,
    positional_encoding,
)
from mha_course.encoder import _is_causal_mask
from mha_course.layernorm import layer_norm_by_hand

f64 = torch.float64
randn = functools.partial(torch.randn, dtype=f64)
quick = settings(max_examples=30, deadline=None)


def randomise_(module: nn.Module, generator: torch.Generator) -> nn.Module:
    """Every parameter random (norms and zero-initialised biases included), so nothing hides."""
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(0.3 * torch.randn(p.shape, generator=generator, dtype=p.dtype))
    return module


def assert_same_grads(ours: nn.Module, theirs: nn.Module) -> None:
    theirs_params = dict(theirs.named_parameters())
    for name, p in ours.named_parameters():
        assert p.grad is not None, name
        torch.testing.assert_close(p.grad, theirs_params[name].grad, msg=f"gradient of {name}")


# ---------------------------------------------------------------- LayerNorm


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


# ---------------------------------------------------------------- positional encoding


@pytest.mark.parametrize("max_len, d_model", [(1, 2), (7, 4), (30, 16), (12, 7), (5, 1)])
def test_positional_encoding_follows_the_formula(max_len, d_model):
    pe = positional_encoding(max_len, d_model, dtype=f64)
    assert pe.shape == (max_len, d_model)
    for pos in range(max_len):
        for j in range(d_model):
            angle = pos / 10000 ** (2 * (j // 2) / d_model)
            expected = math.sin(angle) if j % 2 == 0 else math.cos(angle)
            assert pe[pos, j].item() == pytest.approx(expected, abs=1e-12), (pos, j)


def test_positional_encoding_equals_the_usual_implementation():
    """The Annotated Transformer's version (exp/log frequencies) gives the same table."""
    max_len, d_model = 100, 64
    position = torch.arange(max_len, dtype=f64).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2, dtype=f64) * -(math.log(10000.0) / d_model))
    expected = torch.zeros(max_len, d_model, dtype=f64)
    expected[:, 0::2] = torch.sin(position * div_term)
    expected[:, 1::2] = torch.cos(position * div_term)
    torch.testing.assert_close(positional_encoding(max_len, d_model, dtype=f64), expected)
    pe32 = positional_encoding(max_len, d_model)
    assert pe32.dtype == torch.float32
    torch.testing.assert_close(pe32, expected.float())


def test_positional_encoding_row_zero_and_odd_width():
    torch.testing.assert_close(positional_encoding(3, 6)[0], torch.tensor([0.0, 1, 0, 1, 0, 1]))
    odd = positional_encoding(10, 5, dtype=f64)  # columns sin, cos, sin, cos, sin
    torch.testing.assert_close(odd[:, 4], torch.sin(torch.arange(10, dtype=f64) / 10000 ** (4 / 5)))
    with pytest.raises(ValueError, match="d_model"):
        positional_encoding(10, 0)
    with pytest.raises(TypeError, match="max_len"):
        positional_encoding(10.0, 4)


@pytest.mark.parametrize("batch_first", [True, False])
def test_positional_encoding_module_adds_the_table(batch_first):
    d_model = 8
    module = PositionalEncoding(d_model, dropout=0.0, max_len=20, batch_first=batch_first)
    x = randn(3, 6, d_model)  # (B, L, E)
    table = positional_encoding(20, d_model, dtype=f64)[:6]
    if batch_first:
        torch.testing.assert_close(module(x), x + table)
    else:
        x_seq_first = x.transpose(0, 1)  # (L, B, E)
        torch.testing.assert_close(module(x_seq_first), (x + table).transpose(0, 1))
    torch.testing.assert_close(module(x[0]), x[0] + table)  # unbatched (L, E)
    assert "pe" not in module.state_dict()  # a fixed function of the position, not saved


def test_positional_encoding_dropout_only_in_training():
    module = PositionalEncoding(16, dropout=0.5, max_len=10)
    x = torch.randn(4, 10, 16)
    summed = x + positional_encoding(10, 16)
    torch.testing.assert_close(module.eval()(x), summed)
    torch.manual_seed(0)
    out = module.train()(x)
    dropped = out == 0
    assert 0.3 < dropped.float().mean() < 0.7
    torch.testing.assert_close(out[~dropped], 2 * summed[~dropped])  # survivors scaled by 1/(1-p)


def test_positional_encoding_module_bad_inputs():
    module = PositionalEncoding(8, max_len=5)
    with pytest.raises(ValueError, match=r"sequence length 6 .* longer than max_len = 5"):
        module(torch.randn(2, 6, 8))
    with pytest.raises(ValueError, match=r"x has 7 features .* expected d_model = 8"):
        module(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match="3-D"):
        module(torch.randn(2, 2, 3, 8))
    with pytest.raises(ValueError, match="dropout"):
        PositionalEncoding(8, dropout=1.5)


# ---------------------------------------------------------------- EncoderLayer


def torch_layer(d_model=16, nhead=4, d_ff=24, *, seed=0, **kwargs):
    g = torch.Generator().manual_seed(seed)
    kwargs = {"dropout": 0.0, "batch_first": True, "dtype": f64, **kwargs}
    return randomise_(nn.TransformerEncoderLayer(d_model, nhead, d_ff, **kwargs), g)


def padding_mask(lengths, L):
    """(B, L) bool, True at the padded positions (torch's convention)."""
    return torch.arange(L) >= torch.tensor(lengths).unsqueeze(1)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("masks", ["none", "padding", "causal+padding", "float"])
def test_encoder_layer_matches_torch(norm_first, activation, mode, masks):
    theirs = torch_layer(norm_first=norm_first, activation=activation).train(mode == "train")
    ours = EncoderLayer.from_torch(theirs)
    B, L = 3, 6
    x = randn(B, L, 16, generator=torch.Generator().manual_seed(1))
    src_mask = pad = None
    if "padding" in masks:
        pad = padding_mask([6, 4, 1], L)
    if "causal" in masks:
        src_mask = torch.ones(L, L, dtype=torch.bool).triu(1)  # True = masked out
    if masks == "float":
        src_mask = randn(L, L)
    real = ~pad if pad is not None else torch.ones(B, L, dtype=torch.bool)

    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours = ours(x_ours, src_mask=src_mask, src_key_padding_mask=pad)
    out_theirs = theirs(x_theirs, src_mask=src_mask, src_key_padding_mask=pad)
    torch.testing.assert_close(out_ours[real], out_theirs[real])
    upstream = randn(B, L, 16) * real.unsqueeze(-1)  # a loss on the real tokens only
    (out_ours * upstream).sum().backward()
    (out_theirs * upstream).sum().backward()
    torch.testing.assert_close(x_ours.grad[real], x_theirs.grad[real])
    assert_same_grads(ours, theirs)


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_layer_matches_torch_fused_inference_path(norm_first):
    """Under no_grad in eval mode torch runs its fused C++ layer; ours agrees on the real tokens."""
    theirs = torch_layer(norm_first=norm_first).eval()
    ours = EncoderLayer.from_torch(theirs)
    x, pad = randn(2, 5, 16), padding_mask([5, 3], 5)
    with torch.no_grad():
        torch.testing.assert_close(
            ours(x, src_key_padding_mask=pad)[~pad], theirs(x, src_key_padding_mask=pad)[~pad]
        )


@quick
@given(
    st.integers(1, 4),
    st.integers(1, 7),
    st.sampled_from([(8, 1), (8, 2), (12, 3), (6, 6)]),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_encoder_layer_property(B, L, shape, norm_first, seed):
    d_model, nhead = shape
    theirs = torch_layer(d_model, nhead, 10, seed=seed, norm_first=norm_first)
    ours = EncoderLayer.from_torch(theirs)
    g = torch.Generator().manual_seed(seed)
    x = randn(B, L, d_model, generator=g)
    lengths = torch.randint(1, L + 1, (B,), generator=g).tolist()
    pad = padding_mask(lengths, L)
    torch.testing.assert_close(
        ours(x, src_key_padding_mask=pad)[~pad], theirs(x, src_key_padding_mask=pad)[~pad]
    )


def test_encoder_layer_layouts_and_is_causal():
    theirs = torch_layer(batch_first=False)
    ours = EncoderLayer.from_torch(theirs)
    assert ours.batch_first is False
    x = randn(5, 2, 16)  # (L, B, E)
    torch.testing.assert_close(ours(x), theirs(x))
    torch.testing.assert_close(ours(x[:, 0]), theirs(x[:, 0]))  # unbatched (L, E)
    causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=f64)
    torch.testing.assert_close(
        ours(x, src_mask=causal, is_causal=True), theirs(x, src_mask=causal, is_causal=True)
    )
    # the package also builds the causal mask itself when only the hint is given
    torch.testing.assert_close(ours(x, is_causal=True), theirs(x, src_mask=causal))


def test_encoder_layer_need_weights_gives_every_heads_weights():
    theirs = torch_layer(norm_first=False)
    ours = EncoderLayer.from_torch(theirs)
    x, pad = randn(2, 5, 16), padding_mask([5, 3], 5)
    out, weights = ours(x, src_key_padding_mask=pad, need_weights=True)
    torch.testing.assert_close(out, ours(x, src_key_padding_mask=pad))
    _, expected = theirs.self_attn(x, x, x, key_padding_mask=pad, average_attn_weights=False)
    assert weights.shape == (2, 4, 5, 5)
    torch.testing.assert_close(weights, expected)
    assert weights[1, :, :, 3:].abs().max() == 0  # no weight on padding


def test_encoder_layer_has_torchs_parameters_and_state_dict():
    ours = EncoderLayer(16, 4, dim_feedforward=24, dropout=0.0)
    theirs = nn.TransformerEncoderLayer(16, 4, dim_feedforward=24, dropout=0.0, batch_first=True)
    assert isinstance(ours.self_attn, MultiHeadAttention) and isinstance(ours.norm1, LayerNorm)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {
        k: v.shape for k, v in theirs.state_dict().items()
    }
    theirs.load_state_dict(ours.state_dict())  # and back: interchangeable both ways
    x = torch.randn(2, 3, 16)
    torch.testing.assert_close(ours(x), theirs(x))
    assert EncoderLayer(16, 4).batch_first and EncoderLayer(16, 4).activation is F.relu
    no_bias = EncoderLayer(16, 4, 24, bias=False)
    assert (
        no_bias.linear1.bias is None
        and no_bias.norm1.bias is None
        and no_bias.self_attn.in_proj_bias is None
    )


def test_encoder_layer_from_torch_copies_configuration():
    theirs = nn.TransformerEncoderLayer(
        8,
        2,
        12,
        dropout=0.2,
        activation=F.silu,
        layer_norm_eps=1e-3,
        batch_first=True,
        norm_first=True,
        bias=False,
    ).eval()
    ours = EncoderLayer.from_torch(theirs)
    assert (ours.norm_first, ours.norm1.eps, ours.dropout.p, ours.activation, ours.training) == (
        True,
        1e-3,
        0.2,
        F.silu,
        False,
    )
    assert ours.linear1.bias is None
    x = torch.randn(2, 4, 8)
    torch.testing.assert_close(ours(x), theirs(x))
    gelu_tanh = nn.TransformerEncoderLayer(
        8, 2, 12, dropout=0.0, activation=nn.GELU("tanh"), batch_first=True
    )
    torch.testing.assert_close(EncoderLayer.from_torch(gelu_tanh)(x), gelu_tanh(x))
    with pytest.raises(TypeError, match="TransformerEncoderLayer"):
        EncoderLayer.from_torch(nn.Linear(2, 2))


def test_encoder_layer_bad_arguments():
    with pytest.raises(
        ValueError, match=r"d_model must be divisible by nhead.*d_model=10, nhead=4"
    ):
        EncoderLayer(10, 4)
    with pytest.raises(ValueError, match=r"unknown activation 'swish'; use one of 'relu', 'gelu'"):
        EncoderLayer(8, 2, activation="swish")
    with pytest.raises(TypeError, match="activation"):
        EncoderLayer(8, 2, activation=3)
    layer = EncoderLayer(8, 2, 16)
    with pytest.raises(
        ValueError, match=r"src has 6 features .*\(2, 3, 6\).* expected d_model = 8"
    ):
        layer(torch.randn(2, 3, 6))
    with pytest.raises(
        ValueError, match=r"src_key_padding_mask has shape \(2, 4\), expected \(B, L\) = \(2, 3\)"
    ):
        layer(torch.randn(2, 3, 8), src_key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"src_mask has shape \(3, 4\)"):
        layer(torch.randn(2, 3, 8), src_mask=torch.zeros(3, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match="4-D|3-D"):
        layer(torch.randn(1, 2, 3, 8))
    with pytest.raises(ValueError, match="dropout"):
        EncoderLayer(8, 2, dropout=-0.1)


# ---------------------------------------------------------------- Encoder


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_encoder_matches_torch_with_gradients(norm_first):
    layer = torch_layer(norm_first=norm_first)
    final = randomise_(nn.LayerNorm(16, dtype=f64), torch.Generator().manual_seed(3))
    theirs = nn.TransformerEncoder(layer, num_layers=3, norm=final, enable_nested_tensor=False)
    with torch.no_grad():  # make the copies differ, so a layer that shared weights would show
        for p in theirs.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ours = Encoder.from_torch(theirs)
    assert isinstance(ours.norm, LayerNorm) and len(ours.layers) == 3
    x, pad = randn(3, 6, 16), padding_mask([6, 2, 4], 6)
    real = ~pad
    x_ours, x_theirs = x.clone().requires_grad_(), x.clone().requires_grad_()
    out_ours = ours(x_ours, src_key_padding_mask=pad)
    out_theirs = theirs(x_theirs, src_key_padding_mask=pad)
    torch.testing.assert_close(out_ours[real], out_theirs[real])
    upstream = randn(3, 6, 16) * real.unsqueeze(-1)
    (out_ours * upstream).sum().backward()
    (out_theirs * upstream).sum().backward()
    torch.testing.assert_close(x_ours.grad, x_theirs.grad)
    assert_same_grads(ours, theirs)


@pytest.mark.filterwarnings("ignore:The PyTorch API of nested tensors:UserWarning")
def test_encoder_matches_torch_in_eval_with_nested_tensors():
    """torch's eval path packs padded batches into nested tensors (zeros at the padding)."""
    theirs = nn.TransformerEncoder(torch_layer(), num_layers=2).eval()
    ours = Encoder.from_torch(theirs)
    x, pad = randn(2, 5, 16), padding_mask([5, 2], 5)
    with torch.no_grad():
        torch.testing.assert_close(
            ours(x, src_key_padding_mask=pad)[~pad], theirs(x, src_key_padding_mask=pad)[~pad]
        )


def test_encoder_stacks_independent_copies():
    layer = EncoderLayer(8, 2, 16, dropout=0.0)
    encoder = Encoder(layer, num_layers=4)
    assert len(encoder.layers) == encoder.num_layers == 4
    assert (
        len({id(each.linear1.weight) for each in encoder.layers} | {id(layer.linear1.weight)}) == 5
    )
    count = sum(p.numel() for p in encoder.parameters())
    theirs = nn.TransformerEncoder(
        nn.TransformerEncoderLayer(8, 2, 16, batch_first=True), 4, enable_nested_tensor=False
    )
    assert (
        count
        == sum(p.numel() for p in theirs.parameters())
        == 4 * sum(p.numel() for p in layer.parameters())
    )
    with pytest.raises(ValueError, match="num_layers"):
        Encoder(layer, 0)


def test_encoder_need_weights_returns_each_layers_weights():
    encoder = Encoder(EncoderLayer(8, 2, 16, dropout=0.0), num_layers=3).double()
    x, pad = randn(2, 4, 8), padding_mask([4, 3], 4)
    out, weights = encoder(x, src_key_padding_mask=pad, need_weights=True)
    torch.testing.assert_close(out, encoder(x, src_key_padding_mask=pad))
    assert len(weights) == 3 and all(w.shape == (2, 2, 4, 4) for w in weights)
    # layer 2's weights are those of its own attention on layer 1's output
    hidden = encoder.layers[0](x, src_key_padding_mask=pad)
    _, expected = encoder.layers[1].self_attn(
        hidden, hidden, hidden, key_padding_mask=pad, average_attn_weights=False
    )
    torch.testing.assert_close(weights[1], expected)


def test_encoder_detects_a_causal_mask():
    encoder = Encoder(EncoderLayer(8, 2, 16, dropout=0.0), num_layers=2).double()
    x = randn(2, 5, 8)
    float_causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=f64)
    bool_causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    layer = encoder.layers[0]
    assert _is_causal_mask(float_causal, x, layer) and _is_causal_mask(bool_causal, x, layer)
    assert not _is_causal_mask(~bool_causal, x, layer) and not _is_causal_mask(None, x, layer)
    assert not _is_causal_mask(torch.zeros(5, 5, dtype=f64), x, layer)
    torch.testing.assert_close(
        encoder(x, mask=float_causal), encoder(x, mask=float_causal, is_causal=False)
    )
    # causal: a token's output does not depend on later tokens
    changed = x.clone()
    changed[:, 3:] = randn(2, 2, 8)
    torch.testing.assert_close(
        encoder(changed, mask=bool_causal)[:, :3], encoder(x, mask=bool_causal)[:, :3]
    )


@quick
@given(
    st.lists(st.integers(1, 6), min_size=1, max_size=4),
    st.integers(0, 3),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_padding_does_not_change_the_real_tokens(lengths, extra, norm_first, seed):
    """Each sentence alone, unpadded, gives the same outputs as inside a padded batch."""
    torch.manual_seed(seed)
    layer = EncoderLayer(8, 2, 16, dropout=0.0, norm_first=norm_first, dtype=f64)
    encoder = Encoder(
        layer, num_layers=2, norm=LayerNorm(8, dtype=f64) if norm_first else None
    ).eval()
    L = max(lengths) + extra
    g = torch.Generator().manual_seed(seed)
    batch = randn(len(lengths), L, 8, generator=g) * 10  # the padding is junk, on purpose
    pad = padding_mask(lengths, L)
    out = encoder(batch, src_key_padding_mask=pad)
    assert torch.isfinite(out).all()
    for i, n in enumerate(lengths):
        alone = encoder(batch[i : i + 1, :n])
        torch.testing.assert_close(out[i : i + 1, :n], alone)
