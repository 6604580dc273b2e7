"""The sinusoidal positional encoding: the paper's formula, the usual implementation, the module."""

import functools
import math

import pytest
import torch

from mha_course import PositionalEncoding, positional_encoding

f64 = torch.float64
randn = functools.partial(torch.randn, dtype=f64)


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
