"""EncoderLayer and Encoder against torch.nn.TransformerEncoderLayer / TransformerEncoder."""

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import assert_same_grads, randomise_
from torch import nn

from mha_course import Encoder, EncoderLayer, LayerNorm, MultiHeadAttention, masks

f64 = torch.float64
randn = functools.partial(torch.randn, dtype=f64)
quick = settings(max_examples=30, deadline=None)

# ---------------------------------------------------------------- EncoderLayer


def torch_layer(d_model=16, nhead=4, d_ff=24, *, seed=0, **kwargs):
    g = torch.Generator().manual_seed(seed)
    kwargs = {"dropout": 0.0, "batch_first": True, "dtype": f64, **kwargs}
    return randomise_(nn.TransformerEncoderLayer(d_model, nhead, d_ff, **kwargs), g)


def padding_mask(lengths, L):
    """(B, L) bool, True at the padded positions (torch's convention)."""
    return masks.padding_mask(torch.tensor(lengths), L)


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
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by nhead \(4\)"):
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
    with pytest.raises(
        ValueError,
        match=r"src_key_padding_mask has dtype torch.int64; expected torch.bool \(True = masked "
        r"out\) .* src_key_padding_mask.bool\(\)",
    ):
        layer(torch.randn(2, 3, 8), src_key_padding_mask=torch.zeros(2, 3, dtype=torch.long))
    with pytest.raises(ValueError, match=r"src_mask has dtype torch.float64; .* torch.float32"):
        layer(torch.randn(2, 3, 8), src_mask=torch.zeros(3, 3, dtype=f64))
    with pytest.raises(ValueError, match=r"src has dtype torch.float64 but .* torch.float32"):
        layer(torch.randn(2, 3, 8, dtype=f64))
    with pytest.raises(TypeError, match="src_mask must be a torch.Tensor, got list"):
        layer(torch.randn(2, 3, 8), src_mask=[[0.0]])
    encoder = Encoder(layer, 2)
    with pytest.raises(ValueError, match=r"src_key_padding_mask has shape \(2, 4\)"):
        encoder(torch.randn(2, 3, 8), src_key_padding_mask=torch.zeros(2, 4, dtype=torch.bool))
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


@pytest.mark.parametrize("need_weights", [False, True])
def test_encoder_causal_mask_is_torchs_and_is_causal_is_only_a_hint(need_weights):
    """torch's TransformerEncoder compares ``mask`` with the causal mask when is_causal is None;
    ours reads no mask values (that would wait for a GPU) and gives the same answer whatever
    the flag says."""
    theirs = nn.TransformerEncoder(torch_layer(), num_layers=2, enable_nested_tensor=False)
    encoder = Encoder.from_torch(theirs)
    x = randn(2, 5, 16)
    float_causal = nn.Transformer.generate_square_subsequent_mask(5, dtype=f64)
    bool_causal = torch.ones(5, 5, dtype=torch.bool).triu(1)
    expected = theirs(x, mask=float_causal)
    for mask in (float_causal, bool_causal):
        for is_causal in (None, False, True):
            got = encoder(x, mask=mask, is_causal=is_causal, need_weights=need_weights)
            torch.testing.assert_close(got[0] if need_weights else got, expected)
    # is_causal=True without a mask builds the causal mask
    got = encoder(x, is_causal=True, need_weights=need_weights)
    torch.testing.assert_close(got[0] if need_weights else got, expected)
    # causal: a token's output does not depend on later tokens
    changed = x.clone()
    changed[:, 3:] = randn(2, 2, 16)
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


# ---------------------------------------------------------------- one mask conversion, no host sync


def test_encoder_checks_and_converts_the_masks_once_for_all_its_layers(monkeypatch):
    """Six layers, one key padding mask: checked and converted once in Encoder.forward, and the
    same canonical mask is handed to every layer."""
    calls, seen = [], []
    canonical, attend = masks.canonical, MultiHeadAttention.attend

    def spy(*args, **kwargs):
        calls.append(args)
        return canonical(*args, **kwargs)

    def attend_spy(self, query, key, value, mask, **kwargs):
        seen.append(mask)
        return attend(self, query, key, value, mask, **kwargs)

    monkeypatch.setattr(masks, "canonical", spy)
    monkeypatch.setattr(MultiHeadAttention, "attend", attend_spy)
    encoder = Encoder(EncoderLayer(8, 2, 16, dropout=0.0), num_layers=6).eval()
    x, pad = torch.randn(2, 4, 8), padding_mask([4, 2], 4)
    for need_weights in (False, True):
        calls.clear(), seen.clear()
        encoder(x, src_key_padding_mask=pad, need_weights=need_weights)
        assert len(calls) == 1 and len(seen) == 6
        assert all(mask is seen[0] for mask in seen)
    calls.clear()
    encoder.layers[0](x, src_key_padding_mask=pad)  # one layer on its own: once too
    assert len(calls) == 1


def compile_and_compare(module, x, **kwargs):
    torch.compiler.reset()
    compiled = torch.compile(module, fullgraph=True, backend="eager")
    with torch.no_grad():
        got, expected = compiled(x, **kwargs), module(x, **kwargs)
    if kwargs.get("need_weights"):
        (got, got_weights), (expected, expected_weights) = got, expected
        for a, b in zip(
            got_weights if isinstance(got_weights, list) else [got_weights],
            expected_weights if isinstance(expected_weights, list) else [expected_weights],
        ):
            torch.testing.assert_close(a, b)
    torch.testing.assert_close(got, expected)


@pytest.mark.parametrize("need_weights", [False, True])
@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_torch_compile_fullgraph_traces_a_layer(need_weights, norm_first):
    """No graph break (so no host sync) anywhere in a layer, with a padding mask that leaves one
    sequence nothing to attend to."""
    layer = EncoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first).eval()
    x, pad = torch.randn(3, 5, 16), padding_mask([5, 2, 0], 5)
    compile_and_compare(layer, x, src_key_padding_mask=pad, need_weights=need_weights)


@pytest.mark.parametrize("need_weights", [False, True])
def test_torch_compile_fullgraph_traces_a_six_layer_stack(need_weights):
    encoder = Encoder(EncoderLayer(16, 4, 32, dropout=0.0), num_layers=6).eval()
    x, pad = torch.randn(3, 5, 16), padding_mask([5, 2, 0], 5)
    compile_and_compare(encoder, x, src_key_padding_mask=pad, need_weights=need_weights)
