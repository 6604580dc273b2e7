"""check_multi_head_attention accepts every correct style and names each classic mistake, on the
lesson's skeleton (bool and float masks, need_weights) and on the first one (bool masks only);
check_load_torch_weights does the same for the copy of torch's packed weights."""

from __future__ import annotations

import contextlib
import math
import textwrap

import pytest
import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from torch import nn

from mha_course import reference
from mha_course.checks import check_load_torch_weights, check_multi_head_attention

import checker_helpers as shared
from checker_helpers import MHA_INIT_SOURCE, NOTEBOOK_IMPORTS, Projections, notebook_cell


def passes(candidate, capsys, cases=5):
    out = shared.passes(check_multi_head_attention, candidate, capsys)
    assert out.startswith(f"✅ MultiHeadAttention: all {cases} cases"), out


def fails_with(candidate, *phrases):
    return shared.fails_with(check_multi_head_attention, candidate, *phrases)


# ---------------------------------------------------------------- correct answers, four ways


class Loop(Projections):
    """One head at a time: head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V), then Concat."""

    def forward(self, query, key, value, attn_mask=None):
        Q, K, V = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        heads, weights = [], []
        for i in range(self.num_heads):
            cols = slice(i * self.head_dim, (i + 1) * self.head_dim)
            scores = Q[..., cols] @ K[..., cols].transpose(-2, -1) / math.sqrt(self.head_dim)
            if attn_mask is not None:  # (L, S) or (B, 1, 1, S): drop the heads axis
                mask = attn_mask if attn_mask.dim() == 2 else attn_mask[:, 0]
                scores = scores.masked_fill(~mask, float("-inf"))
            w = torch.softmax(scores, dim=-1)
            heads.append(w @ V[..., cols])
            weights.append(w)
        return self.out_proj(torch.cat(heads, dim=-1)), torch.stack(weights, dim=1)


class Einsum(Projections):
    def forward(self, query, key, value, attn_mask=None):
        def split(x):
            return x.unflatten(-1, (self.num_heads, self.head_dim))  # (B, L, H, D)

        Q, K, V = split(self.q_proj(query)), split(self.k_proj(key)), split(self.v_proj(value))
        scores = torch.einsum("blhd,bshd->bhls", Q, K) / self.head_dim**0.5
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        heads = einsum(weights, V, "b h l s, b s h d -> b l h d")
        return self.out_proj(heads.flatten(-2)), weights


class ViewTransposeSDPA(Projections):
    """view/transpose, torch's fused kernel for the output and the weights computed alongside."""

    def forward(self, query, key, value, attn_mask=None):
        B, L, E = query.shape
        q, k, v = (
            proj(x).view(B, -1, self.num_heads, self.head_dim).transpose(1, 2)
            for proj, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        return self.out_proj(out.transpose(1, 2).reshape(B, L, E)), scores.softmax(-1)


class EinopsOwnAttention(Projections):
    """einops rearrange around the learner's lesson-01 attention."""

    def forward(self, query, key, value, attn_mask=None):
        q, k, v = (
            rearrange(proj(x), "b l (h d) -> b h l d", h=self.num_heads)
            for proj, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        heads, weights = reference.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
        return self.out_proj(rearrange(heads, "b h l d -> b l (h d)")), weights


@pytest.mark.parametrize("candidate", [Loop, Einsum, ViewTransposeSDPA, EinopsOwnAttention])
def test_accepts_every_correct_style_of_the_first_skeleton(candidate, capsys):
    """A forward without need_weights (the first skeleton, bool masks) is held to its 5 cases."""
    passes(candidate, capsys)
    assert check_multi_head_attention.passes(candidate) is True


# ---------------------------------------------------------------- the lesson's skeleton: float masks


def _masked(scores, attn_mask):
    if attn_mask is None:
        return scores
    if attn_mask.dtype == torch.bool:
        return scores.masked_fill(~attn_mask, float("-inf"))
    return scores + attn_mask


class ViewTranspose(Projections):
    """The lesson's solution: view/transpose, bool or float mask, need_weights."""

    def split(self, x):  # (B, L, E) -> (B, H, L, D)
        return x.view(x.size(0), x.size(1), self.num_heads, self.head_dim).transpose(1, 2)

    def scores(self, q, k, attn_mask):
        return _masked(q @ k.transpose(-2, -1) / math.sqrt(self.head_dim), attn_mask)

    def forward(self, query, key, value, attn_mask=None, need_weights=True):
        q, k, v = (
            self.split(self.q_proj(query)),
            self.split(self.k_proj(key)),
            self.split(self.v_proj(value)),
        )
        weights = torch.softmax(self.scores(q, k, attn_mask), dim=-1)
        out = self.out_proj((weights @ v).transpose(1, 2).flatten(2))
        return out, (weights if need_weights else None)


class FusedWhenNoWeights(Projections):
    """einops; torch's fused kernel when the weights are not needed (same mask conventions)."""

    def forward(self, query, key, value, attn_mask=None, need_weights=True):
        q, k, v = (
            rearrange(proj(x), "b l (h d) -> b h l d", h=self.num_heads)
            for proj, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        if not need_weights:
            heads = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)
            return self.out_proj(rearrange(heads, "b h l d -> b l (h d)")), None
        scores = _masked(
            einsum(q, k, "b h l d, b h s d -> b h l s") / self.head_dim**0.5, attn_mask
        )
        weights = scores.softmax(dim=-1)
        return self.out_proj(rearrange(weights @ v, "b h l d -> b l (h d)")), weights


class LoopWithKwargs(Projections):
    """One head at a time, the options taken as **kwargs."""

    def forward(self, query, key, value, attn_mask=None, **options):
        B, L, S = query.size(0), query.size(1), key.size(1)
        Q, K, V = self.q_proj(query), self.k_proj(key), self.v_proj(value)
        mask = None if attn_mask is None else attn_mask.expand(B, self.num_heads, L, S)
        heads, weights = [], []
        for i in range(self.num_heads):
            cols = slice(i * self.head_dim, (i + 1) * self.head_dim)
            scores = Q[..., cols] @ K[..., cols].transpose(-2, -1) / math.sqrt(self.head_dim)
            w = torch.softmax(_masked(scores, None if mask is None else mask[:, i]), dim=-1)
            heads.append(w @ V[..., cols])
            weights.append(w)
        out = self.out_proj(torch.cat(heads, dim=-1))
        return out, (torch.stack(weights, dim=1) if options.get("need_weights", True) else None)


@pytest.mark.parametrize(
    "candidate", [ViewTranspose, FusedWhenNoWeights, LoopWithKwargs, reference.MultiHeadAttention]
)
def test_accepts_every_correct_style_of_the_lessons_skeleton(candidate, capsys):
    passes(candidate, capsys, cases=9)


class WrongFloat(ViewTranspose):
    """The lesson's solution with one classic float-mask mistake switched on."""

    mistake = None

    def scores(self, q, k, attn_mask):
        m, scores = self.mistake, q @ k.transpose(-2, -1)
        if attn_mask is None or attn_mask.dtype == torch.bool:
            return super().scores(q, k, attn_mask)
        if m == "before the scale":
            return (scores + attn_mask) / math.sqrt(self.head_dim)
        scores = scores / math.sqrt(self.head_dim)
        if m == "subtracted":
            return scores - attn_mask
        if m == "read as bool":
            return scores.masked_fill(~attn_mask.bool(), float("-inf"))
        if m == "used to block":
            return scores.masked_fill(attn_mask != 0, float("-inf"))
        return scores if m == "ignored" else scores + attn_mask

    def forward(self, query, key, value, attn_mask=None, need_weights=True):
        keep = need_weights or self.mistake == "need_weights ignored"
        return super().forward(query, key, value, attn_mask, keep)


@pytest.mark.parametrize(
    "mistake, phrases",
    [
        ("before the scale", ["Case 'float mask (5, 7)", "added before the scores are scaled"]),
        ("subtracted", ["Case 'float mask (5, 7)", "the float mask is subtracted"]),
        ("read as bool", ["Case 'float mask (5, 7)", "read as a bool one"]),
        ("used to block", ["Case 'float mask (5, 7)", "used to block the keys"]),
        ("ignored", ["Case 'float mask (5, 7)", "the float mask has no effect"]),
        ("need_weights ignored", ["Case 'need_weights False", "should be None", "need_weights"]),
    ],
)
def test_names_each_float_mask_and_need_weights_mistake(mistake, phrases):
    candidate = type(f"WrongFloat_{mistake}", (WrongFloat,), {"mistake": mistake})
    message = fails_with(candidate, "Likely cause", *phrases)
    assert message.count("Likely cause") == 1


def test_the_right_version_of_the_float_mistakes_class_passes(capsys):
    passes(WrongFloat, capsys, cases=9)


def test_a_bool_only_mask_step_crashes_on_a_float_mask_and_is_told_why():
    class BoolOnly(ViewTranspose):
        def forward(self, query, key, value, attn_mask=None, need_weights=True):
            if attn_mask is not None:  # what lesson 01's attention does
                attn_mask = ~attn_mask
                attn_mask = ~attn_mask
            return super().forward(query, key, value, attn_mask, need_weights)

    fails_with(BoolOnly, "Case 'float mask (5, 7)", "TypeError", "a float mask is added", "dtype")


def test_a_head_axis_added_to_every_mask_fails_on_the_bias_per_head():
    class Unsqueezed(ViewTranspose):
        def forward(self, query, key, value, attn_mask=None, need_weights=True):
            if attn_mask is not None and attn_mask.dim() == 3:  # (H, L, S) read as (B, L, S)
                attn_mask = attn_mask.unsqueeze(1)
            return super().forward(query, key, value, attn_mask, need_weights)

    fails_with(Unsqueezed, "Case 'a bias per head (4, 6, 6)", "(H, L, S) being a bias per head")


def test_the_fused_branch_with_torchs_module_convention_is_named():
    class InvertedForSDPA(FusedWhenNoWeights):
        def forward(self, query, key, value, attn_mask=None, need_weights=True):
            if not need_weights and attn_mask is not None:
                attn_mask = ~attn_mask  # as if F.scaled_dot_product_attention wanted True = masked
            return super().forward(query, key, value, attn_mask, need_weights)

    fails_with(
        InvertedForSDPA, "Case 'need_weights False", "outputs differ", "True = may attend too"
    )


def test_no_weights_by_default_is_named():
    class NoneByDefault(ViewTranspose):
        def forward(self, query, key, value, attn_mask=None, need_weights=True):
            return super().forward(query, key, value, attn_mask, need_weights=False)

    fails_with(NoneByDefault, "the weights should be a torch.Tensor, got NoneType", "default")


def test_leaves_the_learners_random_stream_alone(capsys):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_multi_head_attention(Einsum)
    assert torch.equal(torch.rand(3), expected)


# ---------------------------------------------------------------- the classic mistakes


class Wrong(Projections):
    """view/transpose multi-head attention with one classic mistake switched on."""

    mistake = None

    def split(self, x):
        B, L, E = x.shape
        if self.mistake == "view without transpose":
            return x.view(B, self.num_heads, L, self.head_dim)
        return x.view(B, L, self.num_heads, self.head_dim).transpose(1, 2)

    def forward(self, query, key, value, attn_mask=None):
        m = self.mistake
        B, L, E = query.shape
        q = self.split(self.q_proj(query))
        k = self.split((self.q_proj if m == "keys with q_proj" else self.k_proj)(key))
        v = self.split(self.v_proj(key if m == "values from key" else value))
        d = {"sqrt(d_model)": E, "no scale": 1}.get(m, self.head_dim)
        scores = q @ k.transpose(-2, -1) / math.sqrt(d)
        if attn_mask is not None and m != "mask ignored":
            blocked = attn_mask if m == "mask inverted" else ~attn_mask
            scores = scores.masked_fill(
                blocked, 0.0 if m == "mask filled with 0" else float("-inf")
            )
        dim = {"softmax over queries": -2, "softmax over heads": 1}.get(m, -1)
        weights = torch.softmax(scores, dim=dim)
        heads = weights @ v
        if m == "merge without transpose back":
            merged = heads.reshape(B, L, E)
        else:
            merged = heads.transpose(1, 2).reshape(B, L, E)
        out = merged if m == "no out_proj" else self.out_proj(merged)
        return out, (weights.mean(dim=1) if m == "weights averaged" else weights)


def wrong(mistake):
    return type(f"Wrong_{mistake}", (Wrong,), {"mistake": mistake})


@pytest.mark.parametrize(
    "mistake, phrases",
    [
        (
            "view without transpose",
            ["per-head weights differ", "straight as (B, H, L, D)"],
        ),
        ("merge without transpose back", ["outputs differ", "straight as (B, L, H·D)"]),
        ("sqrt(d_model)", ["√d_model", "d_k = d_model / h"]),
        ("no scale", ["not scaled"]),
        ("no out_proj", ["outputs differ", "output projection W^O is missing"]),
        ("keys with q_proj", ["keys are projected with q_proj", "through k_proj"]),
        ("values from key", ["computed from the key input"]),
        ("mask ignored", ["Case 'padding mask", "the mask has no effect"]),
        ("mask inverted", ["Case 'padding mask", "the mask is inverted"]),
        ("mask filled with 0", ["exp(0) = 1"]),
        (
            "weights averaged",
            [
                "have shape (2, 5, 5), expected (2, 4, 5, 5)",
                "averaged the weights over the heads",
            ],
        ),
        ("softmax over queries", ["down each column, over the queries"]),
        ("softmax over heads", ["sum to 1 over the heads"]),
    ],
)
def test_names_each_classic_mistake(mistake, phrases):
    message = fails_with(wrong(mistake), "Likely cause", *phrases)
    assert message.count("Likely cause") == 1


def test_the_right_version_of_the_mistakes_class_passes(capsys):
    passes(Wrong, capsys)  # so each failure above is due to its mistake alone


def test_inverted_causal_mask_is_named_even_though_it_gives_nan():
    class InvertedCausalOnly(Wrong):
        def forward(self, query, key, value, attn_mask=None):
            inverted = attn_mask is not None and attn_mask.dim() == 2
            return super().forward(query, key, value, ~attn_mask if inverted else attn_mask)

    fails_with(InvertedCausalOnly, "Case 'causal mask", "NaN", "the mask is inverted")


def test_one_head_over_all_features_is_told_to_split():
    class OneHead(Projections):
        def forward(self, query, key, value, attn_mask=None):
            q, k, v = self.q_proj(query), self.k_proj(key), self.v_proj(value)
            weights = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1)
            return self.out_proj(weights @ v), weights

    fails_with(OneHead, "weights have shape (2, 5, 5)", "no heads axis", "(B, H, L, D)")


# ---------------------------------------------------------------- structure, skeleton and crashes


def test_unsolved_skeleton_is_not_done_yet(capsys):
    class Skeleton(Projections):
        def forward(self, query, key, value, attn_mask=None):
            raise NotImplementedError

    class EmptySkeleton(nn.Module):  # not even the projections yet
        def __init__(self, embed_dim, num_heads):
            super().__init__()

        def forward(self, query, key, value, attn_mask=None):
            raise NotImplementedError

    for skeleton in (Skeleton, EmptySkeleton):
        assert check_multi_head_attention(skeleton) is None
        assert "⏳ MultiHeadAttention: not done yet" in capsys.readouterr().out
        assert check_multi_head_attention.passes(skeleton) is False


def test_missing_projection_is_named():
    class NoKProj(Einsum):
        def __init__(self, embed_dim, num_heads):
            super().__init__(embed_dim, num_heads)
            del self.k_proj
            self.key_proj = nn.Linear(embed_dim, embed_dim)

    fails_with(NoKProj, "has no k_proj", "self.k_proj", "from embed_dim to embed_dim features")


def test_projection_of_the_wrong_shape_is_named():
    class SmallV(Einsum):
        def __init__(self, embed_dim, num_heads):
            super().__init__(embed_dim, num_heads)
            self.v_proj = nn.Linear(
                embed_dim, self.head_dim
            )  # one head's W_i^V instead of all of them

    fails_with(
        SmallV, "self.v_proj.weight has shape (6, 24), expected (24, 24)", "= 24 to 24 features"
    )


def test_projection_without_bias_is_named():
    class NoBias(Einsum):
        def __init__(self, embed_dim, num_heads):
            super().__init__(embed_dim, num_heads)
            self.out_proj = nn.Linear(embed_dim, embed_dim, bias=False)

    fails_with(NoBias, "self.out_proj has no bias")


def test_an_instance_instead_of_the_class():
    fails_with(Einsum(24, 4), "Pass the class itself")


def test_forgetting_the_weights():
    class OutputOnly(Einsum):
        def forward(self, query, key, value, attn_mask=None):
            return super().forward(query, key, value, attn_mask)[0]

    fails_with(OutputOnly, "should be a pair (output, weights)")


def test_a_hard_coded_number_of_heads_is_named():
    class HardCodedHeads(Einsum):  # right for 4 heads of 6, wrong for 3 heads of 8
        def forward(self, query, key, value, attn_mask=None):
            self.num_heads, self.head_dim = 4, 6
            return super().forward(query, key, value, attn_mask)

    fails_with(HardCodedHeads, "Case 'causal mask", "your weights have 4 heads", "module with 3")


def test_a_crash_names_the_case():
    class HardCodedHeadSize(Einsum):  # right for 4 heads of 6, a crash for 8 heads of 4
        def forward(self, query, key, value, attn_mask=None):
            self.head_dim = 24 // self.num_heads
            return super().forward(query, key, value, attn_mask)

    fails_with(HardCodedHeadSize, "Case '8 heads of size 4", "RuntimeError", "Likely cause")


# ---------------------------------------------------------------- causes that were named wrongly


def test_forgetting_super_init_is_named():
    class NoSuperInit(Einsum):
        def __init__(self, embed_dim, num_heads):  # no super().__init__()
            self.num_heads, self.head_dim = num_heads, embed_dim // num_heads
            self.q_proj = nn.Linear(embed_dim, embed_dim)

    message = fails_with(
        NoSuperInit, "raised AttributeError", "own __init__ (through super) must run first"
    )
    assert "shape mix-up" not in message and "_core.py" not in message


def test_weights_and_output_swapped_are_named():
    class Swapped(Einsum):
        def forward(self, query, key, value, attn_mask=None):
            return tuple(reversed(super().forward(query, key, value, attn_mask)))

    fails_with(Swapped, "the pair came as (weights, output)", "output comes first")


def test_a_mask_unsqueezed_once_too_often_is_named():
    class Unsqueezed(Wrong):
        def forward(self, query, key, value, attn_mask=None):
            if attn_mask is not None and attn_mask.dim() == 4:  # as if it came as (B, S)
                attn_mask = attn_mask.unsqueeze(1)
            return super().forward(query, key, value, attn_mask)

    message = fails_with(
        Unsqueezed, "Case 'padding mask", "runs without a mask but not with this one", "unsqueeze"
    )
    assert "notebook's variables" not in message


def test_scores_summed_over_the_keys_are_named():
    class KeysSummed(Einsum):
        def forward(self, query, key, value, attn_mask=None):
            B, L, E = query.shape
            S = key.size(1)
            q = self.q_proj(query).unflatten(-1, (self.num_heads, self.head_dim))
            k = self.k_proj(key).unflatten(-1, (self.num_heads, self.head_dim))
            v = self.v_proj(value).unflatten(-1, (self.num_heads, self.head_dim))
            scores = torch.einsum("blhd,bshd->bhl", q, k)[..., None].expand(B, -1, L, S)
            weights = (scores / self.head_dim**0.5).softmax(dim=-1)
            heads = torch.einsum("bhls,bshd->blhd", weights, v)
            return self.out_proj(heads.flatten(-2)), weights

    fails_with(KeysSummed, "every key gets the same weight")


@pytest.mark.parametrize(
    "wrapped, routine",
    [
        ("nn.MultiheadAttention(embed_dim, num_heads, batch_first=True)", "torch's nn.Multihead"),
        ("mha_course.MultiHeadAttention(embed_dim, num_heads)", "the course's MultiHeadAttention"),
    ],
)
def test_wrapping_a_library_multi_head_attention_is_named(wrapped, routine):
    cells = notebook_cell(NOTEBOOK_IMPORTS + "import mha_course\n", {}, 1)
    notebook_cell(
        f"""
        class MultiHeadAttention(nn.Module):
            def __init__(self, embed_dim, num_heads):
                super().__init__()
                self.attention = {wrapped}

            def forward(self, query, key, value, attn_mask=None):
                return self.attention(query, key, value, need_weights=True)
        """,
        cells,
        2,
    )
    fails_with(cells["MultiHeadAttention"], f"Your MultiHeadAttention calls {routine}", "yourself")


def test_subclassing_torchs_module_is_named():
    class MultiHeadAttention(nn.MultiheadAttention):
        def __init__(self, embed_dim, num_heads):
            super().__init__(embed_dim, num_heads, batch_first=True)

    fails_with(MultiHeadAttention, "subclasses torch's nn.MultiheadAttention")


def test_a_variable_of_the_notebook_is_named():
    cells = notebook_cell(
        NOTEBOOK_IMPORTS + "B, L, d_model, h = 2, 5, 24, 4\nd_k = d_model // h\n", {}, 1
    )
    forward = """
    def forward(self, query, key, value, attn_mask=None):
        B, L, E = query.shape
        q, k, v = (
            p(x).view(B, -1, self.num_heads, E // self.num_heads).transpose(1, 2)
            for p, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        return self.out_proj((weights @ v).transpose(1, 2).reshape(B, L, E)), weights
"""
    notebook_cell(MHA_INIT_SOURCE + textwrap.indent(forward, "    "), cells, 2)
    message = fails_with(
        cells["MultiHeadAttention"],
        "Your MultiHeadAttention uses `d_k` (= 6), a variable of the notebook",
        "<notebook cell 2>, line 17:",
        "kept on self",
    )
    assert "Case" not in message  # caught before any case, though this one would pass them


# ---------------------------------------------------------------- load_torch_weights


def load_chunks(module, torch_mha):
    """The lesson's answer: the three row blocks, copied under no_grad."""
    W = torch_mha.in_proj_weight.chunk(3)
    b = torch_mha.in_proj_bias.chunk(3)
    with torch.no_grad():
        for linear, weight, bias in zip((module.q_proj, module.k_proj, module.v_proj), W, b):
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
        module.out_proj.load_state_dict(torch_mha.out_proj.state_dict())
    return module


def load_slices(module, torch_mha):
    """Row slices and .data, a state dict for out_proj."""
    E = torch_mha.embed_dim
    for i, name in enumerate(("q_proj", "k_proj", "v_proj")):
        getattr(module, name).weight.data.copy_(torch_mha.in_proj_weight.data[i * E : (i + 1) * E])
        getattr(module, name).bias.data.copy_(torch_mha.in_proj_bias.data[i * E : (i + 1) * E])
    module.out_proj.weight.data.copy_(torch_mha.out_proj.weight.data)
    module.out_proj.bias.data.copy_(torch_mha.out_proj.bias.data)
    return module


def load_parameters(module, torch_mha):
    """New parameters made of cloned numbers."""
    W = torch_mha.in_proj_weight.detach().clone().chunk(3)
    b = torch_mha.in_proj_bias.detach().clone().chunk(3)
    for linear, weight, bias in zip((module.q_proj, module.k_proj, module.v_proj), W, b):
        linear.weight = nn.Parameter(weight.clone())
        linear.bias = nn.Parameter(bias.clone())
    module.out_proj.weight = nn.Parameter(torch_mha.out_proj.weight.detach().clone())
    module.out_proj.bias = nn.Parameter(torch_mha.out_proj.bias.detach().clone())
    return module


@pytest.mark.parametrize(
    "candidate", [load_chunks, load_slices, load_parameters, reference.load_torch_weights]
)
def test_load_accepts_every_correct_style(candidate, capsys):
    out = shared.passes(check_load_torch_weights, candidate, capsys)
    assert out.startswith("✅ load_torch_weights: all 3 cases"), out


def wrong_load(mistake):
    def load(module, torch_mha):
        W = list(torch_mha.in_proj_weight.chunk(3))
        b = list(torch_mha.in_proj_bias.chunk(3))
        if mistake == "transposed":
            W = [w.T for w in W]
        if mistake == "q and k swapped":
            W[0], W[1], b[0], b[1] = W[1], W[0], b[1], b[0]
        parts = [module.q_proj, module.k_proj, module.v_proj]
        if mistake == "the other way":
            with torch.no_grad():
                torch_mha.in_proj_weight.copy_(torch.cat([p.weight for p in parts]))
            return module
        if mistake == "shared":
            for linear, weight, bias in zip(parts, W, b):
                linear.weight, linear.bias = nn.Parameter(weight), nn.Parameter(bias)
            module.out_proj = torch_mha.out_proj
            return module
        with torch.no_grad() if mistake != "no no_grad" else contextlib.nullcontext():
            for linear, weight, bias in zip(parts, W, b):
                linear.weight.copy_(weight)
                if mistake != "biases left out":
                    linear.bias.copy_(bias)
            if mistake != "out_proj left out":
                module.out_proj.load_state_dict(torch_mha.out_proj.state_dict())
        return None if mistake == "returns None" else module

    return load


@pytest.mark.parametrize(
    "mistake, phrases",
    [
        ("transposed", ["module.q_proj.weight is not torch's", "no transpose is needed"]),
        (
            "q and k swapped",
            ["module.q_proj.weight", "holds the weight of k_proj", "in that order"],
        ),
        ("biases left out", ["module.q_proj.bias is not torch's", "not copied"]),
        ("out_proj left out", ["module.out_proj.weight", "not copied", "out_proj is an nn.Linear"]),
        ("the other way", ["torch's module changed (in_proj_weight)", "the other way"]),
        ("shared", ["shares its memory with torch's module", "copy of its numbers"]),
        ("no no_grad", ["RuntimeError", "torch.no_grad"]),
        ("returns None", ["the weights are right", "returned NoneType", "gives the module back"]),
    ],
)
def test_load_names_each_classic_mistake(mistake, phrases):
    shared.fails_with(check_load_torch_weights, wrong_load(mistake), "Likely cause", *phrases)


def test_load_the_right_version_of_the_mistakes_passes(capsys):
    shared.passes(check_load_torch_weights, wrong_load(None), capsys)


def test_load_unsolved_skeleton_is_not_done_yet(capsys):
    shared.not_done(check_load_torch_weights, shared.skeleton, capsys)


def test_load_leaves_the_learners_random_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_load_torch_weights.passes(load_chunks)
    assert torch.equal(torch.rand(3), expected)


def test_a_helper_that_is_not_defined_is_named():
    """An answer written for the first skeleton, calling split_heads, loaded without it."""
    cells = notebook_cell(NOTEBOOK_IMPORTS, {}, 1)
    forward = """
    def forward(self, query, key, value, attn_mask=None):
        q, k, v = (split_heads(p(x), self.num_heads) for p, x in
                   ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value)))
        return q, k
"""
    notebook_cell(MHA_INIT_SOURCE + forward, cells, 2)  # forward is indented as a method already
    message = fails_with(cells["MultiHeadAttention"], "NameError", "uses `split_heads`", "helper")
    assert "shape mix-up" not in message


def test_view_after_transpose_is_named():
    class ViewToMerge(ViewTranspose):
        def forward(self, query, key, value, attn_mask=None, need_weights=True):
            q, k, v = (
                self.split(p(x))
                for p, x in zip((self.q_proj, self.k_proj, self.v_proj), (query, key, value))
            )
            weights = torch.softmax(self.scores(q, k, attn_mask), dim=-1)
            merged = (weights @ v).transpose(1, 2).view(query.shape)
            return self.out_proj(merged), weights

    fails_with(ViewToMerge, "RuntimeError", "view cannot merge the axes of a transposed tensor")
