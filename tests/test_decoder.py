"""DecoderLayer and Decoder against torch.nn.TransformerDecoderLayer / TransformerDecoder."""

import functools

import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from module_helpers import assert_same_grads, randomise_
from torch import nn

from mha_course import Decoder, DecoderLayer, LayerNorm, MultiHeadAttention, masks

f64 = torch.float64
randn = functools.partial(torch.randn, dtype=f64)
quick = settings(max_examples=25, deadline=None)
E, H, FF = 16, 4, 24


def torch_layer(d_model=E, nhead=H, d_ff=FF, *, seed=0, **kwargs):
    g = torch.Generator().manual_seed(seed)
    kwargs = {"dropout": 0.0, "batch_first": True, "dtype": f64, **kwargs}
    return randomise_(nn.TransformerDecoderLayer(d_model, nhead, d_ff, **kwargs), g)


def padding_mask(lengths, n):
    return masks.padding_mask(torch.tensor(lengths), n)  # (B, n), True at the padding


def causal(T):
    return torch.ones(T, T, dtype=torch.bool).triu(1)  # True = masked out


MASKS = {
    "none": {},
    "causal": {"tgt_mask": "causal"},
    "causal+padding": {"tgt_mask": "causal", "tgt_pad": [5, 3, 2], "mem_pad": [7, 4, 1]},
    "float": {"tgt_mask": "float", "memory_mask": "float"},
    "memory mask": {"memory_mask": "bool", "mem_pad": [7, 7, 5]},
}


def build_masks(kind, B, T, S):
    spec = MASKS[kind]
    g = torch.Generator().manual_seed(7)
    out = {}
    if spec.get("tgt_mask") == "causal":
        out["tgt_mask"] = causal(T)
    elif spec.get("tgt_mask") == "float":
        out["tgt_mask"] = randn(T, T, generator=g)
    if spec.get("memory_mask") == "float":
        out["memory_mask"] = randn(T, S, generator=g)
    elif spec.get("memory_mask") == "bool":
        blocked = torch.rand(T, S, generator=g) < 0.3
        blocked[:, 0] = False  # every query keeps a key
        out["memory_mask"] = blocked
    if "tgt_pad" in spec:
        out["tgt_key_padding_mask"] = padding_mask(spec["tgt_pad"], T)
    if "mem_pad" in spec:
        out["memory_key_padding_mask"] = padding_mask(spec["mem_pad"], S)
    return out


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("activation", ["relu", "gelu"])
@pytest.mark.parametrize("mode", ["train", "eval"])
@pytest.mark.parametrize("kind", list(MASKS))
def test_decoder_layer_matches_torch(norm_first, activation, mode, kind):
    theirs = torch_layer(norm_first=norm_first, activation=activation).train(mode == "train")
    ours = DecoderLayer.from_torch(theirs)
    B, T, S = 3, 5, 7
    g = torch.Generator().manual_seed(1)
    tgt, memory = randn(B, T, E, generator=g), randn(B, S, E, generator=g)
    kwargs = build_masks(kind, B, T, S)
    pad = kwargs.get("tgt_key_padding_mask")
    real = ~pad if pad is not None else torch.ones(B, T, dtype=torch.bool)

    inputs = [
        (t.clone().requires_grad_(), m.clone().requires_grad_()) for t, m in [(tgt, memory)] * 2
    ]
    out_ours = ours(*inputs[0], **kwargs)
    out_theirs = theirs(*inputs[1], **kwargs)
    torch.testing.assert_close(out_ours[real], out_theirs[real])
    upstream = randn(B, T, E, generator=g) * real.unsqueeze(-1)
    (out_ours * upstream).sum().backward()
    (out_theirs * upstream).sum().backward()
    torch.testing.assert_close(inputs[0][0].grad[real], inputs[1][0].grad[real])
    torch.testing.assert_close(inputs[0][1].grad, inputs[1][1].grad)  # memory's gradient
    assert_same_grads(ours, theirs)


@quick
@given(
    st.integers(1, 3),
    st.integers(1, 6),
    st.integers(1, 6),
    st.sampled_from([(8, 1), (8, 2), (12, 3)]),
    st.booleans(),
    st.integers(0, 2**16),
)
def test_decoder_layer_property(B, T, S, shape, norm_first, seed):
    d_model, nhead = shape
    theirs = torch_layer(d_model, nhead, 10, seed=seed, norm_first=norm_first)
    ours = DecoderLayer.from_torch(theirs)
    g = torch.Generator().manual_seed(seed)
    tgt, memory = randn(B, T, d_model, generator=g), randn(B, S, d_model, generator=g)
    lengths = torch.randint(1, S + 1, (B,), generator=g).tolist()
    kwargs = {"tgt_mask": causal(T), "memory_key_padding_mask": padding_mask(lengths, S)}
    torch.testing.assert_close(ours(tgt, memory, **kwargs), theirs(tgt, memory, **kwargs))


def test_decoder_layer_layouts_unbatched_and_is_causal():
    theirs = torch_layer(batch_first=False)
    ours = DecoderLayer.from_torch(theirs)
    assert ours.batch_first is False
    tgt, memory = randn(5, 2, E), randn(6, 2, E)  # (T, B, E), (S, B, E)
    torch.testing.assert_close(ours(tgt, memory), theirs(tgt, memory))
    torch.testing.assert_close(ours(tgt[:, 0], memory[:, 0]), theirs(tgt[:, 0], memory[:, 0]))
    mask = causal(5)
    expected = theirs(tgt, memory, tgt_mask=mask, tgt_is_causal=True)
    torch.testing.assert_close(ours(tgt, memory, tgt_mask=mask, tgt_is_causal=True), expected)
    # the package builds the causal mask itself when only the hint is given
    torch.testing.assert_close(ours(tgt, memory, tgt_is_causal=True), expected)
    # causal: a target position does not depend on later target positions
    changed = tgt.clone()
    changed[3:] = randn(2, 2, E)
    torch.testing.assert_close(
        ours(changed, memory, tgt_is_causal=True)[:3], ours(tgt, memory, tgt_is_causal=True)[:3]
    )


TARGET_MASKS = {  # the target's masks, each tried with tgt_is_causal None, False and True
    "no mask": {},
    "padding only": {"tgt_pad": [5, 3, 2]},
    "causal mask": {"tgt_mask": "causal"},
    "causal mask and padding": {"tgt_mask": "causal", "tgt_pad": [5, 3, 2]},
}


@pytest.mark.parametrize("is_causal", [None, False, True])
@pytest.mark.parametrize("kind", list(TARGET_MASKS))
@pytest.mark.parametrize("stack", [False, True], ids=["DecoderLayer", "Decoder"])
def test_tgt_is_causal_in_each_state_against_torch(stack, kind, is_causal):
    """tgt_is_causal is a hint: None and False add no mask (torch's Decoder reads None off
    tgt_mask), True without tgt_mask stands for the causal mask. Against torch's layer or stack
    given the mask that stands for, with the same weights."""
    theirs = torch_layer()
    if stack:
        theirs = nn.TransformerDecoder(theirs, num_layers=2)
    ours = (Decoder if stack else DecoderLayer).from_torch(theirs)
    B, T, S = 3, 5, 7
    g = torch.Generator().manual_seed(2)
    tgt, memory = randn(B, T, E, generator=g), randn(B, S, E, generator=g)
    spec, given = TARGET_MASKS[kind], {}
    if "tgt_pad" in spec:
        given["tgt_key_padding_mask"] = padding_mask(spec["tgt_pad"], T)
    if "tgt_mask" in spec:
        given["tgt_mask"] = causal(T)
    meant = {**given, "tgt_mask": causal(T)} if is_causal else given  # spelled out for torch
    torch.testing.assert_close(
        ours(tgt, memory, tgt_is_causal=is_causal, **given), theirs(tgt, memory, **meant)
    )


def test_decoder_layer_need_weights_gives_self_and_cross_weights():
    theirs = torch_layer()
    ours = DecoderLayer.from_torch(theirs)
    tgt, memory = randn(2, 4, E), randn(2, 6, E)
    mem_pad = padding_mask([6, 3], 6)
    out, (self_w, cross_w) = ours(
        tgt, memory, tgt_is_causal=True, memory_key_padding_mask=mem_pad, need_weights=True
    )
    torch.testing.assert_close(
        out, ours(tgt, memory, tgt_is_causal=True, memory_key_padding_mask=mem_pad)
    )
    assert self_w.shape == (2, H, 4, 4) and cross_w.shape == (2, H, 4, 6)
    assert self_w.triu(1).abs().max() == 0  # causal: no weight on a later token
    assert cross_w[1, :, :, 3:].abs().max() == 0  # no weight on the memory's padding
    # the cross-attention weights are those of multihead_attn on the first sub-layer's output
    x = theirs.norm1(tgt + theirs.self_attn(tgt, tgt, tgt, attn_mask=causal(4))[0])
    _, expected = theirs.multihead_attn(
        x, memory, memory, key_padding_mask=mem_pad, average_attn_weights=False
    )
    torch.testing.assert_close(cross_w, expected)
    _, weights = ours(tgt[0], memory[0], need_weights=True)  # unbatched
    assert weights[0].shape == (H, 4, 4) and weights[1].shape == (H, 4, 6)


def test_decoder_layer_has_torchs_parameters_and_state_dict():
    ours = DecoderLayer(E, H, dim_feedforward=FF, dropout=0.0)
    theirs = nn.TransformerDecoderLayer(E, H, dim_feedforward=FF, dropout=0.0, batch_first=True)
    assert isinstance(ours.multihead_attn, MultiHeadAttention) and isinstance(ours.norm3, LayerNorm)
    assert {k: v.shape for k, v in ours.state_dict().items()} == {
        k: v.shape for k, v in theirs.state_dict().items()
    }
    theirs.load_state_dict(ours.state_dict())  # and back: interchangeable both ways
    tgt, memory = torch.randn(2, 3, E), torch.randn(2, 5, E)
    torch.testing.assert_close(ours(tgt, memory), theirs(tgt, memory))
    no_bias = DecoderLayer(E, H, FF, bias=False)
    assert no_bias.linear2.bias is None and no_bias.norm3.bias is None
    assert no_bias.multihead_attn.in_proj_bias is None


def test_decoder_layer_from_torch_copies_configuration_and_every_eps():
    theirs = nn.TransformerDecoderLayer(
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
    theirs.norm3.eps = 1e-7
    ours = DecoderLayer.from_torch(theirs)
    assert (ours.norm_first, ours.dropout.p, ours.activation, ours.training) == (
        True,
        0.2,
        F.silu,
        False,
    )
    assert (ours.norm1.eps, ours.norm2.eps, ours.norm3.eps) == (1e-3, 1e-3, 1e-7)
    tgt, memory = torch.randn(2, 4, 8), torch.randn(2, 3, 8)
    torch.testing.assert_close(ours(tgt, memory), theirs(tgt, memory))
    with pytest.raises(TypeError, match="TransformerDecoderLayer"):
        DecoderLayer.from_torch(nn.TransformerEncoderLayer(8, 2))
    # layer_norm_eps reaches all three norms when the layer is built directly
    assert {
        n.eps
        for n in DecoderLayer(8, 2, layer_norm_eps=1e-12).modules()
        if isinstance(n, LayerNorm)
    } == {1e-12}


def test_decoder_layer_dropout_in_training_only():
    layer = DecoderLayer(E, H, FF, dropout=0.5).double()
    tgt, memory = randn(2, 4, E), randn(2, 5, E)
    layer.train()
    torch.manual_seed(0)
    a = layer(tgt, memory)
    torch.manual_seed(1)
    b = layer(tgt, memory)
    assert not torch.allclose(a, b)
    layer.eval()
    torch.testing.assert_close(layer(tgt, memory), layer(tgt, memory))


def test_decoder_layer_bad_arguments():
    layer = DecoderLayer(8, 2, 16)
    tgt, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    with pytest.raises(ValueError, match=r"d_model \(10\) must be divisible by nhead \(4\)"):
        DecoderLayer(10, 4)
    with pytest.raises(ValueError, match=r"memory has 6 features .* expected d_model = 8"):
        layer(tgt, torch.randn(2, 5, 6))
    with pytest.raises(ValueError, match=r"tgt and memory must have the same batch size"):
        layer(tgt, torch.randn(3, 5, 8))
    with pytest.raises(ValueError, match=r"must both be batched \(3-D\) or both unbatched"):
        layer(tgt, memory[0])
    with pytest.raises(
        ValueError,
        match=r"memory_key_padding_mask has shape \(2, 3\), expected \(B, S\) = \(2, 5\)",
    ):
        layer(tgt, memory, memory_key_padding_mask=torch.zeros(2, 3, dtype=torch.bool))
    with pytest.raises(
        ValueError, match=r"tgt_mask has shape \(3, 5\), expected \(T, T\) = \(3, 3\)"
    ):
        layer(tgt, memory, tgt_mask=torch.zeros(3, 5, dtype=torch.bool))
    with pytest.raises(
        ValueError, match=r"memory_mask has shape \(3, 3\), expected \(T, S\) = \(3, 5\)"
    ):
        layer(tgt, memory, memory_mask=torch.zeros(3, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"tgt has dtype torch.float64"):
        layer(tgt.double(), memory)


# ---------------------------------------------------------------- Decoder


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_decoder_matches_torch_with_gradients(norm_first):
    layer = torch_layer(norm_first=norm_first)
    final = randomise_(nn.LayerNorm(E, dtype=f64), torch.Generator().manual_seed(3))
    final.eps = 1e-3
    theirs = nn.TransformerDecoder(layer, num_layers=3, norm=final)
    with torch.no_grad():  # make the copies differ, so a layer that shared weights would show
        for p in theirs.parameters():
            p.add_(0.05 * torch.randn_like(p))
    ours = Decoder.from_torch(theirs)
    assert isinstance(ours.norm, LayerNorm) and ours.norm.eps == 1e-3 and len(ours.layers) == 3
    tgt, memory = randn(3, 5, E), randn(3, 6, E)
    kwargs = {"tgt_mask": causal(5), "memory_key_padding_mask": padding_mask([6, 2, 4], 6)}
    t_ours, t_theirs = tgt.clone().requires_grad_(), tgt.clone().requires_grad_()
    out_ours, out_theirs = ours(t_ours, memory, **kwargs), theirs(t_theirs, memory, **kwargs)
    torch.testing.assert_close(out_ours, out_theirs)
    upstream = randn(3, 5, E)
    (out_ours * upstream).sum().backward()
    (out_theirs * upstream).sum().backward()
    torch.testing.assert_close(t_ours.grad, t_theirs.grad)
    assert_same_grads(ours, theirs)
    # is_causal without a mask, and need_weights: one (self, cross) pair per layer
    out, weights = ours(tgt, memory, tgt_is_causal=True, need_weights=True)
    torch.testing.assert_close(out, theirs(tgt, memory, tgt_mask=causal(5)))
    assert len(weights) == 3 and all(w[1].shape == (3, H, 5, 6) for w in weights)


def test_decoder_stacks_independent_copies_and_checks_masks_once(monkeypatch):
    decoder = Decoder(DecoderLayer(8, 2, 16, dropout=0.0), num_layers=4).eval()
    assert len({id(layer.linear1.weight) for layer in decoder.layers}) == 4
    calls = []
    canonical = masks.canonical

    def spy(*args, **kwargs):
        calls.append(args)
        return canonical(*args, **kwargs)

    monkeypatch.setattr(masks, "canonical", spy)
    tgt, memory = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    decoder(tgt, memory, tgt_is_causal=True, memory_key_padding_mask=padding_mask([4, 2], 4))
    assert len(calls) == 2  # the self-attention mask and the cross-attention mask, once each
    with pytest.raises(ValueError, match="num_layers"):
        Decoder(DecoderLayer(8, 2), 0)
    with pytest.raises(TypeError, match="TransformerDecoder"):
        Decoder.from_torch(nn.Linear(2, 2))


def test_a_fully_padded_memory_gives_a_finite_answer():
    """torch gives NaN when a sequence's memory is all padding; ours reads nothing from it."""
    layer = DecoderLayer(8, 2, 16, dropout=0.0).eval()
    tgt, memory = torch.randn(2, 3, 8), torch.randn(2, 4, 8)
    out = layer(tgt, memory, memory_key_padding_mask=padding_mask([4, 0], 4))
    assert torch.isfinite(out).all()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_torch_compile_fullgraph_traces_the_decoder(norm_first):
    decoder = Decoder(DecoderLayer(16, 4, 32, dropout=0.0, norm_first=norm_first), 2).eval()
    tgt, memory = torch.randn(2, 5, 16), torch.randn(2, 6, 16)
    kwargs = {"tgt_is_causal": True, "memory_key_padding_mask": padding_mask([6, 3], 6)}
    torch.compiler.reset()
    compiled = torch.compile(decoder, fullgraph=True, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(compiled(tgt, memory, **kwargs), decoder(tgt, memory, **kwargs))
