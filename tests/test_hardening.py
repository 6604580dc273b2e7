"""Bad input that once slipped through, and deliberate bugs that once survived the whole suite:
each test here fails on one of them (planted, seen failing, removed)."""

import math
import shutil
import sys
from pathlib import Path

import nbformat
import pytest
import torch
from einops import rearrange
from torch import nn

from mha_course import Encoder, EncoderLayer, LayerNorm, MultiHeadAttention, kernel
from mha_course import scaled_dot_product_attention as attention
from mha_course.checks import ExerciseFailure, check_multi_head_attention
from tools import authoring

from checker_helpers import Projections, passes

# ---------------------------------------------------------------- bad input


def test_attention_with_no_features_says_the_head_dimension_must_be_positive():
    q, k, v = torch.randn(2, 3, 0), torch.randn(2, 4, 0), torch.randn(2, 4, 5)
    with pytest.raises(
        ValueError, match=r"positive feature size E .* shape \(2, 3, 0\) with E = 0"
    ):
        attention(q, k, v)
    assert attention(torch.randn(2, 3, 1), torch.randn(2, 4, 1), v)[0].shape == (2, 3, 5)


@pytest.mark.parametrize("shape", ["16", ("1", "6"), 16.0, True, None, (4, 2.0)])
def test_layer_norm_takes_sizes_only(shape):
    with pytest.raises(TypeError, match="normalized_shape must be an int"):
        LayerNorm(shape)


def test_layer_norm_sizes_as_torch_takes_them():
    for shape, expected in ((16, (16,)), ([4, 8], (4, 8)), (torch.Size([3]), (3,))):
        assert LayerNorm(shape).normalized_shape == expected


@pytest.mark.parametrize("eps", [float("nan"), float("inf"), -1e-5])
def test_layer_norm_eps_is_a_finite_number_at_least_zero(eps):
    with pytest.raises(ValueError, match="eps must be a finite number >= 0"):
        LayerNorm(16, eps=eps)
    with pytest.raises(TypeError, match="eps must be a float"):
        LayerNorm(16, eps="1e-5")


# ---------------------------------------------------------------- weights that do not fit


def _allocator_fails(message: str, kind=RuntimeError):
    def attention_that_runs_out(*args, **kwargs):
        raise kind(message)

    return attention_that_runs_out


@pytest.mark.parametrize(
    "kind, message",
    [
        (torch.OutOfMemoryError, "CUDA out of memory. Tried to allocate 64.00 GiB (GPU 0; ...)"),
        (
            RuntimeError,
            "DefaultCPUAllocator: can't allocate memory: you tried to allocate 68719476736 bytes.",
        ),
    ],
)
def test_weights_that_do_not_fit_point_to_need_weights_false(kind, message, monkeypatch):
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    monkeypatch.setattr(kernel, "attention", _allocator_fails(message, kind))
    with pytest.raises(kind) as info:
        mha(x, x, x)
    text = str(info.value)
    assert "(B, H, L, S) = (2, 2, 5, 5)" in text and "in float32" in text
    assert "need_weights=False avoids building them" in text
    assert message.splitlines()[0] in text and isinstance(info.value.__cause__, kind)
    assert mha(x, x, x, need_weights=False)[1] is None  # that route never builds them


def test_other_errors_of_the_attention_are_left_as_they_are(monkeypatch):
    mha = MultiHeadAttention(8, 2)
    x = torch.randn(2, 5, 8)
    monkeypatch.setattr(kernel, "attention", _allocator_fails("some other failure"))
    with pytest.raises(RuntimeError, match="^some other failure$"):
        mha(x, x, x)


@pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or Path("/proc/sys/vm/overcommit_memory").read_text().strip() == "1",
    reason="needs an allocator that refuses an impossible request at once (Linux, overcommit 0 or 2)",
)
def test_weights_that_cannot_fit_on_this_machine_are_named():
    mha = MultiHeadAttention(2, 2)
    x = torch.randn(1, 2**21, 2)  # the weights (1, 2, 2²¹, 2²¹) would take 32 TiB
    with pytest.raises(RuntimeError, match=r"32,768.0 GiB in float32.*need_weights=False"):
        with torch.no_grad():
            mha(x, x, x)


# ---------------------------------------------------------------- the encoder layer's dropouts

D_MODEL, NHEAD, D_FF = 8, 2, 16


def _feed_forward(layer, z):
    return layer.linear2(torch.relu(layer.linear1(z)))


def _closed_form(layer, x, dropped: str):
    """The layer's output in training mode when only the dropout ``dropped`` has p = 1 (its
    sub-layer's contribution is 0) and the others p = 0."""
    attend = lambda z: layer.self_attn(z, z, z, need_weights=False)[0]  # noqa: E731
    feed_forward = {
        "dropout": lambda z: layer.linear2.bias.expand_as(z),  # linear2(0)
        "dropout2": lambda z: torch.zeros_like(z),
    }.get(dropped, lambda z: _feed_forward(layer, z))
    if dropped == "dropout1":
        attend = torch.zeros_like
    if layer.norm_first:
        x = x + attend(layer.norm1(x))
        return x + feed_forward(layer.norm2(x))
    z = layer.norm1(x + attend(x))
    return layer.norm2(z + feed_forward(z))


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
@pytest.mark.parametrize("dropped", ["dropout1", "dropout", "dropout2"])
def test_each_dropout_of_the_encoder_layer_acts_where_torch_puts_it(dropped, norm_first):
    """dropout1 after self-attention, dropout inside the feed-forward network (after the
    activation), dropout2 after it: with one of them at p = 1 its part of the sum is 0."""
    torch.manual_seed(0)
    layer = EncoderLayer(D_MODEL, NHEAD, D_FF, dropout=0.0, norm_first=norm_first).train()
    with torch.no_grad():
        layer.linear2.bias.normal_()  # so that linear2(0) is not 0
    getattr(layer, dropped).p = 1.0
    x = torch.randn(3, 5, D_MODEL)
    torch.testing.assert_close(layer(x), _closed_form(layer, x, dropped))
    layer.eval()  # and no dropout at all in eval mode
    torch.testing.assert_close(layer(x), _closed_form(layer, x, "none"))


# ---------------------------------------------------------------- every eps where it belongs


def _torch_layer(eps: float, norm_first: bool = False) -> nn.TransformerEncoderLayer:
    torch.manual_seed(1)
    layer = nn.TransformerEncoderLayer(
        D_MODEL,
        NHEAD,
        D_FF,
        dropout=0.0,
        layer_norm_eps=eps,
        batch_first=True,
        norm_first=norm_first,
        dtype=torch.float64,
    )
    with torch.no_grad():
        for norm in (layer.norm1, layer.norm2):
            norm.weight.normal_()
            norm.bias.normal_()
    return layer.eval()


@pytest.mark.parametrize("norm_first", [False, True], ids=["post-LN", "pre-LN"])
def test_the_layer_built_with_an_eps_uses_it_in_both_norms(norm_first):
    """Built from its arguments, not copied with from_torch (which sets every eps itself)."""
    ours = EncoderLayer(
        D_MODEL,
        NHEAD,
        D_FF,
        dropout=0.0,
        layer_norm_eps=0.5,
        norm_first=norm_first,
        dtype=torch.float64,
    ).eval()
    assert ours.norm1.eps == ours.norm2.eps == 0.5
    theirs = _torch_layer(0.5, norm_first)
    ours.load_state_dict(theirs.state_dict())
    x = torch.randn(2, 4, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x))


def test_an_encoder_from_torch_keeps_its_final_norms_eps():
    theirs = nn.TransformerEncoder(
        _torch_layer(1e-5, norm_first=True),
        num_layers=2,
        norm=nn.LayerNorm(D_MODEL, eps=0.5, dtype=torch.float64),
        enable_nested_tensor=False,
    ).eval()
    ours = Encoder.from_torch(theirs)
    assert ours.norm.eps == 0.5
    x = torch.randn(2, 4, D_MODEL, dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x))


def test_layer_norm_reset_parameters_gives_torchs_start():
    ours, theirs = LayerNorm((2, 3)), nn.LayerNorm((2, 3))
    with torch.no_grad():
        for p in (*ours.parameters(), *theirs.parameters()):
            p.uniform_(2.0, 3.0)
    ours.reset_parameters()
    theirs.reset_parameters()
    for name, p in theirs.named_parameters():
        torch.testing.assert_close(getattr(ours, name), p)
    LayerNorm(4, elementwise_affine=False).reset_parameters()  # nothing to reset: no error


# ---------------------------------------------------------------- MiniLM's token types


def test_minilm_reads_token_type_ids_as_bert_does():
    from transformers import BertModel

    from mha_course.pretrained import load_minilm, model_directory

    ours = load_minilm("cpu")
    bert = BertModel.from_pretrained(str(model_directory()), attn_implementation="eager").eval()
    batch = ours.tokenize(["Which do you like better, coffee or tea?", "Tea."])
    types = torch.zeros_like(batch["input_ids"])
    types[:, 4:] = 1  # a second segment, as in a sentence pair
    real = batch["attention_mask"].bool()
    with torch.no_grad():
        mine = ours(**batch, token_type_ids=types).last_hidden_state
        expected = bert(**batch, token_type_ids=types).last_hidden_state
        without = ours(**batch).last_hidden_state
    assert (mine - expected)[real].abs().max() <= 1e-4
    assert (without - expected)[real].abs().max() > 1e-2  # the types matter here


# ---------------------------------------------------------------- the multi-head checker's tolerance


class Scaled(Projections):
    """A correct multi-head attention whose output is multiplied by ``factor``."""

    factor = 1.0

    def forward(self, query, key, value, attn_mask=None):
        h = self.num_heads
        q, k, v = (
            rearrange(proj(x), "b l (h d) -> b h l d", h=h)
            for proj, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = scores.softmax(dim=-1).nan_to_num()
        out = self.out_proj(rearrange(weights @ v, "b h l d -> b l (h d)"))
        return out * self.factor, weights


class OnePercentOff(Scaled):
    factor = 1.01


def test_the_multi_head_checker_fails_an_answer_one_percent_off(capsys):
    passes(check_multi_head_attention, Scaled, capsys)
    with pytest.raises(ExerciseFailure, match="outputs differ from the reference"):
        check_multi_head_attention(OnePercentOff)


# ---------------------------------------------------------------- a check cell that goes missing


def test_every_registered_exercise_has_its_check_in_both_versions_of_its_lesson():
    problems = authoring.missing_check_calls()
    assert not problems, "\n".join(problems)


def test_a_check_cell_removed_from_a_lesson_is_found(tmp_path):
    copies = []
    for source in (authoring.NOTEBOOKS, authoring.SOLUTIONS):
        copy = tmp_path / source.name / "00_setup.ipynb"
        copy.parent.mkdir()
        shutil.copy(source / "00_setup.ipynb", copy)
        copies.append(copy)
    assert authoring.missing_check_calls(copies) == []
    for copy in copies:  # the check cell removed from the solution, and the lesson rebuilt
        nb = nbformat.read(copy, as_version=4)
        nb.cells = [c for c in nb.cells if "check_softmax(softmax)" not in c.source]
        for cell in nb.cells:  # a call commented out does not count either
            cell.source = cell.source.replace(
                "check_soft_lookup(soft_lookup)", "# check_soft_lookup(soft_lookup)"
            )
        nbformat.write(nb, copy)
    problems = authoring.missing_check_calls(copies)
    assert len(problems) == 4, problems
    assert any("no check cell for softmax (`check_softmax(softmax)`)" in p for p in problems)
    assert sum("soft_lookup" in p for p in problems) == 2
