"""The lesson 03/04 checkers (LayerNorm, positional encoding, encoder layer) accept correct answers
written in different styles and name each classic mistake."""

import functools
import math

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from einops import einsum, rearrange
from torch import nn

import mha_course
from mha_course import MultiHeadAttention as TorchStyleMHA
from mha_course import reference
from mha_course.checks import (
    check_encoder_layer,
    check_layer_norm,
    check_positional_encoding,
)
from mha_course.exercises import by_name

from checker_helpers import Projections, fails_with, not_done, passes

# ---------------------------------------------------------------- LayerNorm


def layer_norm_class(normalise, weight=torch.ones, bias=torch.zeros, parameter=nn.Parameter):
    """A learner's LayerNorm whose forward is ``normalise(self, x)``."""

    class LayerNorm(nn.Module):
        def __init__(self, normalized_shape, eps=1e-5):
            super().__init__()
            self.eps = eps
            self.weight = parameter(weight(normalized_shape))
            self.bias = parameter(bias(normalized_shape))

        def forward(self, x):
            return normalise(self, x)

    return LayerNorm


def ln_var(self, x):
    mean = x.mean(dim=-1, keepdim=True)
    var = x.var(dim=-1, keepdim=True, unbiased=False)
    return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


def ln_var_mean(self, x):
    var, mean = torch.var_mean(x, dim=-1, keepdim=True, correction=0)
    return self.weight * ((x - mean) * torch.rsqrt(var + self.eps)) + self.bias


def ln_squares(self, x):
    centred = x - x.mean(-1, keepdim=True)
    std = ((centred**2).mean(-1, keepdim=True) + self.eps).sqrt()
    return torch.addcmul(self.bias, centred / std, self.weight)


def ln_functional(self, x):
    return F.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


@pytest.mark.parametrize("normalise", [ln_var, ln_var_mean, ln_squares])
def test_layer_norm_accepts_correct_answers(normalise, capsys):
    passes(check_layer_norm, layer_norm_class(normalise), capsys)


def ln_torch(self, x):
    return torch.layer_norm(x, x.shape[-1:], self.weight, self.bias, self.eps)


class WrapsTorchs(nn.Module):
    def __init__(self, normalized_shape, eps=1e-5):
        super().__init__()
        self.inner = nn.LayerNorm(normalized_shape, eps=eps)
        self.weight, self.bias = self.inner.weight, self.inner.bias

    def forward(self, x):
        return self.inner(x)


class SubclassesTorchs(nn.LayerNorm):
    pass


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (layer_norm_class(ln_functional), "calls torch's layer_norm (torch.nn.functional)"),
        (layer_norm_class(ln_torch), "calls torch's layer_norm"),
        (WrapsTorchs, "calls torch's nn.LayerNorm"),
        (SubclassesTorchs, "subclasses torch's nn.LayerNorm"),
    ],
    ids=["F.layer_norm", "torch.layer_norm", "wraps nn.LayerNorm", "subclasses nn.LayerNorm"],
)
def test_layer_norm_that_calls_torchs_is_told_to_write_it(candidate, phrase):
    fails_with(check_layer_norm, candidate, f"Your LayerNorm {phrase}", "write it yourself")


def test_layer_norm_accepts_the_reference_and_torchs_own(capsys):
    passes(check_layer_norm, reference.LayerNorm, capsys)
    passes(check_layer_norm, nn.LayerNorm, capsys)


def _affine(combine):
    def normalise(self, x):
        x_hat = (x - x.mean(-1, keepdim=True)) / torch.sqrt(
            x.var(-1, keepdim=True, unbiased=False) + self.eps
        )
        return combine(x_hat, self.weight, self.bias)

    return normalise


def _stats(
    dim=-1, unbiased=False, eps_inside=True, use_eps=True, subtract=True, divide=True, use_var=False
):
    def normalise(self, x):
        mean = x.mean(dim=dim, keepdim=True)
        var = x.var(dim=dim, keepdim=True, unbiased=unbiased)
        eps = self.eps if use_eps else 0.0
        std = torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps
        centred = x - mean if subtract else x
        scaled = centred / (var + eps if use_var else std) if divide else centred
        return scaled * self.weight + self.bias

    return normalise


def ln_std_plus_eps(self, x):
    return (x - x.mean(-1, keepdim=True)) / (
        x.std(-1, keepdim=True) + self.eps
    ) * self.weight + self.bias


def ln_everything(self, x):
    return (x - x.mean()) / torch.sqrt(x.var(unbiased=False) + self.eps) * self.weight + self.bias


@pytest.mark.parametrize(
    "normalise, phrase",
    [
        (_stats(dim=0), "over the first axis (the batch"),
        (_stats(dim=1), "over the tokens (the sequence axis)"),
        (ln_everything, "one mean and one variance for the whole tensor"),
        (_stats(unbiased=True), "the unbiased one, divided by n − 1"),
        (ln_std_plus_eps, "the standard deviation plus ε"),
        (_stats(eps_inside=False), "eps is added after the square root"),
        (_stats(use_eps=False), "eps is missing"),
        (_stats(subtract=False), "the mean is not subtracted"),
        (_stats(divide=False), "nothing divides by the standard deviation"),
        (_stats(use_var=True), "divided by the variance"),
        (_affine(lambda n, w, b: n), "returned as they are"),
        (_affine(lambda n, w, b: n * b + w), "the weight and the bias are swapped"),
        (_affine(lambda n, w, b: n * w * b), "the bias multiplies"),
        (_affine(lambda n, w, b: n + w + b), "the weight is added"),
        (_affine(lambda n, w, b: n * w), "the bias β is missing"),
        (_affine(lambda n, w, b: n + b), "the weight γ is missing"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_layer_norm_names_the_mistake(normalise, phrase):
    fails_with(
        check_layer_norm,
        layer_norm_class(normalise),
        "Likely cause",
        phrase,
        "differ from the reference",
    )


def test_layer_norm_parameters_must_be_learnable_and_start_at_identity():
    fails_with(
        check_layer_norm,
        layer_norm_class(ln_var, parameter=lambda t: t),
        "not a registered parameter",
        "nn.Parameter",
    )
    fails_with(
        check_layer_norm,
        layer_norm_class(ln_var, weight=torch.randn),
        "weight all ones and its bias all zeros",
    )
    fails_with(
        check_layer_norm,
        layer_norm_class(ln_var, bias=lambda n: torch.zeros(1)),
        "self.bias has shape (1)",
    )

    class NoWeight(nn.Module):
        def __init__(self, normalized_shape, eps=1e-5):
            super().__init__()
            self.gamma = nn.Parameter(torch.ones(normalized_shape))

    fails_with(
        check_layer_norm,
        NoWeight,
        "no tensor attribute `weight`",
        "one learnable value per feature",
    )


def test_layer_norm_fixed_axis_and_detached_statistics():
    def dim_two(self, x):
        return _stats(dim=2)(self, x)

    fails_with(
        check_layer_norm, layer_norm_class(dim_two), "2-D input", "the features are the last axis"
    )

    def detached_mean(self, x):
        mean = x.detach().mean(-1, keepdim=True)
        return (x - mean) / torch.sqrt(
            x.var(-1, keepdim=True, unbiased=False) + self.eps
        ) * self.weight + self.bias

    fails_with(
        check_layer_norm,
        layer_norm_class(detached_mean),
        "input gradients",
        "cut off from autograd",
    )

    def numpy_forward(self, x):
        a = x.detach().numpy()
        x_hat = (a - a.mean(-1, keepdims=True)) / np.sqrt(a.var(-1, keepdims=True) + self.eps)
        return torch.from_numpy(x_hat) * self.weight.detach() + self.bias.detach()

    fails_with(check_layer_norm, layer_norm_class(numpy_forward), "cut off from autograd")


def test_layer_norm_not_done_yet(capsys):
    class Skeleton(nn.Module):
        def __init__(self, normalized_shape, eps=1e-5):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(normalized_shape))
            self.bias = nn.Parameter(torch.zeros(normalized_shape))

        def forward(self, x):
            raise NotImplementedError("Exercise: write this part, then run the check below.")

    not_done(check_layer_norm, Skeleton, capsys)


# ---------------------------------------------------------------- positional encoding


def pe_loop(max_len, d_model):
    pe = torch.zeros(max_len, d_model)
    for pos in range(max_len):
        for i in range(0, d_model, 2):
            angle = pos / 10000 ** (i / d_model)
            pe[pos, i] = math.sin(angle)
            pe[pos, i + 1] = math.cos(angle)
    return pe


def pe_annotated(max_len, d_model):
    position = torch.arange(0, max_len).unsqueeze(1)
    div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(position * div_term)
    pe[:, 1::2] = torch.cos(position * div_term)
    return pe


def pe_stacked(max_len, d_model):
    angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    return torch.stack([angles.sin(), angles.cos()], dim=-1).flatten(1)  # sin, cos, sin, cos, ...


def pe_numpy(max_len, d_model):
    pos, j = np.arange(max_len)[:, None], np.arange(d_model)[None, :]
    angles = pos / np.power(10000, (2 * (j // 2)) / d_model)
    return torch.from_numpy(np.where(j % 2 == 0, np.sin(angles), np.cos(angles)))


@pytest.mark.parametrize(
    "candidate", [pe_loop, pe_annotated, pe_stacked, pe_numpy, reference.positional_encoding]
)
def test_positional_encoding_accepts_correct_answers(candidate, capsys):
    passes(check_positional_encoding, candidate, capsys)


def pe_variant(
    exponent=lambda two_i, d: two_i / d,
    base=10000.0,
    first=0,
    sin_even=True,
    multiply=False,
    per_column=False,
):
    def candidate(max_len, d_model):
        position = torch.arange(first, first + max_len, dtype=torch.float32).unsqueeze(1)
        if per_column:  # every column its own exponent
            columns = torch.arange(d_model, dtype=torch.float32)
            angles = position / base ** exponent(columns, d_model)
            pe = angles.clone()
            pe[:, 0::2], pe[:, 1::2] = angles[:, 0::2].sin(), angles[:, 1::2].cos()
            return pe
        two_i = torch.arange(0, d_model, 2, dtype=torch.float32)
        freq = base ** exponent(two_i, d_model)
        angles = position * freq if multiply else position / freq
        pe = torch.zeros(max_len, d_model)
        first_fn, second_fn = (torch.sin, torch.cos) if sin_even else (torch.cos, torch.sin)
        pe[:, 0::2], pe[:, 1::2] = first_fn(angles), second_fn(angles)
        return pe

    return candidate


def pe_halves(max_len, d_model):
    angles = torch.arange(max_len)[:, None] / 10000 ** (torch.arange(0, d_model, 2) / d_model)
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (pe_variant(sin_even=False), "sin and cos are swapped"),
        (pe_halves, "all the sines are in the first half"),
        (pe_variant(first=1), "the positions start at 1"),
        (pe_variant(exponent=lambda two_i, d: (two_i / 2) / d), "the exponent is i/d_model"),
        (pe_variant(exponent=lambda two_i, d: 2 * two_i / d), "the 2 is counted twice"),
        (
            pe_variant(exponent=lambda j, d: j / d, per_column=True),
            "each column got its own frequency",
        ),
        (
            pe_variant(exponent=lambda j, d: 2 * j / d, per_column=True),
            "takes the column index for i",
        ),
        (pe_variant(multiply=True), "multiplied by 10000^(2i/d_model)"),
        (pe_variant(base=1000.0), "the base is 1000"),
        (pe_variant(base=5000.0), "your frequencies use the base 5000"),
        (lambda max_len, d_model: pe_annotated(max_len, d_model).T, "your table is transposed"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_positional_encoding_names_the_mistake(candidate, phrase):
    fails_with(check_positional_encoding, candidate, "Likely cause", phrase)


def test_positional_encoding_square_transposed_is_diagnosed_from_values():
    def transposed_when_square(max_len, d_model):
        pe = pe_annotated(max_len, d_model)
        return pe.T if max_len == d_model else pe

    fails_with(
        check_positional_encoding,
        transposed_when_square,
        "max_len=16, d_model=16",
        "differ from the reference",
        "transposed",
    )


def test_positional_encoding_that_calls_the_courses_is_told_to_write_it():
    def course_table(max_len, d_model):
        return mha_course.positional_encoding(max_len, d_model)

    fails_with(
        check_positional_encoding,
        course_table,
        "Your positional_encoding calls the course's positional_encoding",
    )


def test_positional_encoding_integer_table_and_not_done(capsys):
    def integer_table(max_len, d_model):
        pe = torch.zeros(max_len, d_model, dtype=torch.long)
        pe[:, 1::2] = 1
        return pe

    fails_with(check_positional_encoding, integer_table, "dtype torch.int64", "float")

    def skeleton(max_len, d_model):
        raise NotImplementedError

    not_done(check_positional_encoding, skeleton, capsys)


# ---------------------------------------------------------------- encoder layer


class LoopFreeMHA(Projections):
    """A learner's lesson-02 MultiHeadAttention: view/transpose, bool mask True = may attend."""

    def forward(self, query, key, value, attn_mask=None):
        B, L, E = query.shape
        S = key.size(1)
        q = self.q_proj(query).view(B, L, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(key).view(B, S, self.num_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(value).view(B, S, self.num_heads, self.head_dim).transpose(1, 2)
        scores = q @ k.transpose(-2, -1) / math.sqrt(self.head_dim)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        out = (weights @ v).transpose(1, 2).reshape(B, L, E)
        return self.out_proj(out), weights


class EinsumMHA(LoopFreeMHA):
    """Another learner's: einops and einsum, masks through F.scaled_dot_product_attention's rules."""

    def forward(self, query, key, value, attn_mask=None):
        split = functools.partial(rearrange, pattern="b l (h d) -> b h l d", h=self.num_heads)
        q, k, v = split(self.q_proj(query)), split(self.k_proj(key)), split(self.v_proj(value))
        scores = einsum(q, k, "b h l d, b h s d -> b h l s") * self.head_dim**-0.5
        if attn_mask is not None:
            scores = scores.masked_fill(attn_mask.logical_not(), -torch.inf)
        weights = torch.softmax(scores, dim=-1)
        heads = einsum(weights, v, "b h l s, b h s d -> b h l d")
        return self.out_proj(rearrange(heads, "b h l d -> b l (h d)")), weights


def encoder_class(forward, mha=LoopFreeMHA, norm=nn.LayerNorm):
    """A learner's EncoderLayer with the skeleton's parts; ``forward(self, x, attn_mask)``."""

    class EncoderLayer(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__()
            self.self_attn = mha(d_model, num_heads)
            self.linear1 = nn.Linear(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model)
            self.norm1 = norm(d_model)
            self.norm2 = norm(d_model)
            self.dropout = nn.Dropout(dropout)

        def attend(self, x, attn_mask):
            return self.dropout(self.self_attn(x, x, x, attn_mask=attn_mask)[0])

        def ffn(self, z, activation=torch.relu):
            return self.dropout(self.linear2(activation(self.linear1(z))))

        def forward(self, x, attn_mask=None):
            return forward(self, x, attn_mask)

    return EncoderLayer


def post_ln(self, x, attn_mask):
    z = self.norm1(x + self.attend(x, attn_mask))  # Step 2
    return self.norm2(z + self.ffn(z))  # Step 3


def post_ln_compact(self, x, attn_mask):
    x = self.norm1(x + self.attend(x, attn_mask))
    return self.norm2(x + self.linear2(F.relu(self.linear1(x))))


class ReferenceLN(nn.Module):  # a learner's own LayerNorm
    def __init__(self, d):
        super().__init__()
        self.weight, self.bias, self.eps = (
            nn.Parameter(torch.ones(d)),
            nn.Parameter(torch.zeros(d)),
            1e-5,
        )

    def forward(self, x):
        return ln_var(self, x)


def torch_style_forward(self, x, attn_mask):
    """With the package's torch-style MultiHeadAttention: its masks are True = masked OUT."""
    if attn_mask is None:
        attended = self.self_attn(x, x, x, need_weights=False)[0]
    elif attn_mask.dim() == 4:  # (B, 1, 1, S) padding
        attended = self.self_attn(
            x, x, x, key_padding_mask=~attn_mask.flatten(1), need_weights=False
        )[0]
    else:
        attended = self.self_attn(x, x, x, attn_mask=~attn_mask, need_weights=False)[0]
    z = self.norm1(x + attended)
    return self.norm2(z + self.ffn(z))


@pytest.mark.parametrize(
    "candidate",
    [
        encoder_class(post_ln),
        encoder_class(post_ln_compact, mha=EinsumMHA, norm=ReferenceLN),
        encoder_class(torch_style_forward, mha=TorchStyleMHA),
        functools.partial(reference.EncoderLayer, mha_class=LoopFreeMHA, norm_class=ReferenceLN),
    ],
    ids=[
        "view-transpose",
        "einsum+own-LayerNorm",
        "torch-style-MHA",
        "reference-with-learner-parts",
    ],
)
def test_encoder_layer_accepts_correct_answers(candidate, capsys):
    passes(check_encoder_layer, candidate, capsys)


def test_encoder_layer_accepts_the_reference(capsys):
    passes(check_encoder_layer, reference.EncoderLayer, capsys)
    assert by_name("EncoderLayer").reference is reference.EncoderLayer


def _wrong(steps):
    """Build a forward from ``steps(self, x, attn_mask) -> out``."""
    return encoder_class(steps)


@pytest.mark.parametrize(
    "steps, phrase",
    [
        (
            lambda s, x, m: (lambda y: y + s.ffn(s.norm2(y)))(x + s.attend(s.norm1(x), m)),
            "you wrote the pre-LN layer",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(s.ffn(z)))(s.norm1(s.attend(x, m))),
            "around both sub-layers, the residual is missing",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(z + s.ffn(z)))(s.norm1(s.attend(x, m))),
            "around the attention, the residual is missing",
        ),
        (
            lambda s, x, m: s.norm2(s.ffn(s.norm1(x + s.attend(x, m)))),
            "around the feed-forward network, the residual is missing",
        ),
        (
            lambda s, x, m: (lambda z: z + s.norm2(s.ffn(z)))(x + s.norm1(s.attend(x, m))),
            "around both sub-layers, the sub-layer's output is normalised",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(z + s.ffn(z)))(x + s.norm1(s.attend(x, m))),
            "around the attention, the sub-layer's output is normalised",
        ),
        (
            lambda s, x, m: (lambda z: z + s.norm2(s.ffn(z)))(s.norm1(x + s.attend(x, m))),
            "around the feed-forward network, the sub-layer's output is normalised",
        ),
        (
            lambda s, x, m: (lambda z: z + s.ffn(z))(s.norm1(x + s.attend(x, m))),
            "around the feed-forward network, the LayerNorm is missing",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(z + s.ffn(z)))(x + s.attend(x, m)),
            "around the attention, the LayerNorm is missing",
        ),
        (
            lambda s, x, m: (lambda z: s.norm1(z + s.ffn(z)))(s.norm1(x + s.attend(x, m))),
            "norm1 is used twice",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(z + s.ffn(z)))(s.norm2(x + s.attend(x, m))),
            "norm2 is used twice",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(z + s.ffn(z, lambda t: t)))(
                s.norm1(x + s.attend(x, m))
            ),
            "has no activation",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(z + s.ffn(z, F.gelu)))(s.norm1(x + s.attend(x, m))),
            "activation is GELU",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(z + s.ffn(x)))(s.norm1(x + s.attend(x, m))),
            "reads the layer's input x",
        ),
        (lambda s, x, m: post_ln(s, x, None), "the mask has no effect"),
        (lambda s, x, m: post_ln(s, x, None if m is None else ~m), "the mask is inverted"),
        (
            lambda s, x, m: (lambda z: s.norm1(z + s.ffn(z)))(s.norm2(x + s.attend(x, m))),
            "norm1 and norm2 are swapped",
        ),
        # the feed-forward network's own mistakes, inside the layer
        (
            lambda s, x, m: (lambda z: s.norm2(z + F.relu(s.ffn(z))))(s.norm1(x + s.attend(x, m))),
            "a ReLU after linear2 as well",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(z + s.linear2(s.linear1(F.relu(z)))))(
                s.norm1(x + s.attend(x, m))
            ),
            "the ReLU is on the feed-forward network's input",
        ),
        (
            lambda s, x, m: (lambda z: s.norm2(z + z + s.ffn(z)))(s.norm1(x + s.attend(x, m))),
            "the feed-forward network adds its own input",
        ),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_encoder_layer_names_the_mistake(steps, phrase):
    fails_with(
        check_encoder_layer, _wrong(steps), "Likely cause", phrase, "differ from the reference"
    )


class InlineMHA(LoopFreeMHA):
    """Attention written inline, with a flaw: ``split(t)`` (B, L, E) -> (B, H, L, D), ``scale``."""

    split, scale = "b l (h d) -> b h l d", True

    def forward(self, query, key, value, attn_mask=None):
        B, L, E = query.shape
        q, k, v = (
            rearrange(p(t), self.split, h=self.num_heads)
            if "(h d)" in self.split
            else p(t).reshape(B, self.num_heads, L, -1)
            for p, t in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        scores = q @ k.transpose(-2, -1) / (math.sqrt(self.head_dim) if self.scale else 1)
        if attn_mask is not None:
            scores = scores.masked_fill(~attn_mask, float("-inf"))
        weights = scores.softmax(dim=-1)
        return self.out_proj(rearrange(weights @ v, "b h l d -> b l (h d)")), weights


NoScaleMHA = type("NoScaleMHA", (InlineMHA,), {"scale": False})
SplitWithoutTransposeMHA = type("SplitWithoutTransposeMHA", (InlineMHA,), {"split": "reshape"})


@pytest.mark.parametrize(
    "mha, phrase",
    [(NoScaleMHA, "the scores are not scaled"), (SplitWithoutTransposeMHA, "the heads are split")],
)
def test_encoder_layer_names_attention_mistakes_written_inside(mha, phrase):
    fails_with(check_encoder_layer, encoder_class(post_ln, mha=mha), "Likely cause", phrase)


@pytest.mark.parametrize(
    "ffn",
    [lambda s, z: s.linear1(F.relu(s.linear2(z))), lambda s, z: F.relu(s.linear1(z))],
    ids=["Linears in the wrong order", "no linear2"],
)
def test_encoder_layer_feed_forward_shape_mix_ups_are_named(ffn):
    steps = lambda s, x, m: (lambda z: s.norm2(z + ffn(s, z)))(s.norm1(x + s.attend(x, m)))  # noqa: E731
    fails_with(check_encoder_layer, _wrong(steps), "your code raised", "linear1 goes from d_model")


def test_encoder_layer_mask_mistakes_show_in_the_masked_cases():
    message = fails_with(
        check_encoder_layer, _wrong(lambda s, x, m: post_ln(s, x, None)), "the mask has no effect"
    )
    assert "causal mask" in message


def test_encoder_layer_structure_problems():
    fails_with(
        check_encoder_layer,
        _wrong(lambda s, x, m: (post_ln(s, x, m), None)),
        "got tuple",
        "not a tuple",
    )

    class Renamed(encoder_class(post_ln)):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__(d_model, num_heads, d_ff, dropout)
            self.ffn_in = self.linear1
            del self.linear1

    fails_with(
        check_encoder_layer,
        Renamed,
        "no attribute `linear1`",
        "self_attn, linear1, linear2, norm1, norm2",
    )

    class NoProjections(nn.Module):
        def __init__(self, d_model, num_heads):
            super().__init__()
            self.wq = nn.Linear(d_model, d_model)

    fails_with(check_encoder_layer, encoder_class(post_ln, mha=NoProjections), "no q_proj, k_proj")

    class WrongWidth(encoder_class(post_ln)):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__(d_model, num_heads, d_ff, dropout)
            self.linear1 = nn.Linear(d_model, 4 * d_model)

    fails_with(
        check_encoder_layer,
        WrongWidth,
        "linear1.weight has shape (64, 16), expected (32, 16)",
        "a Linear from d_model = 16 to dim_feedforward = 32 features",
    )

    class NoBias(encoder_class(post_ln)):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__(d_model, num_heads, d_ff, dropout)
            self.linear2 = nn.Linear(d_ff, d_model, bias=False)

    fails_with(check_encoder_layer, NoBias, "self.linear2 has no bias")
    layer = encoder_class(post_ln)(16, 4, 32)
    fails_with(check_encoder_layer, layer, "Pass the class itself")


def test_encoder_layer_that_wraps_torchs_is_told_to_write_it():
    class EncoderLayer(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__()
            self.layer = nn.TransformerEncoderLayer(d_model, num_heads, d_ff, dropout)

    fails_with(check_encoder_layer, EncoderLayer, "calls torch's nn.TransformerEncoderLayer")


def test_encoder_layer_dropout_must_stop_in_eval():
    def always_dropped(self, x, attn_mask):
        z = self.norm1(x + F.dropout(self.attend(x, attn_mask), p=self.dropout.p, training=True))
        return self.norm2(z + self.ffn(z))

    fails_with(
        check_encoder_layer, encoder_class(always_dropped), "dropout=0.3", "dropout is still on"
    )


def test_encoder_layer_not_done_yet_and_leaves_the_seed_alone(capsys):
    class Skeleton(nn.Module):
        def __init__(self, d_model, num_heads, d_ff, dropout=0.0):
            super().__init__()
            raise NotImplementedError

    not_done(check_encoder_layer, Skeleton, capsys)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_encoder_layer(encoder_class(post_ln))
    torch.testing.assert_close(torch.rand(3), expected)


def test_exercises_are_registered_in_lesson_order():
    for name, lesson, check in [
        ("LayerNorm", "03", check_layer_norm),
        ("positional_encoding", "03", check_positional_encoding),
        ("EncoderLayer", "04", check_encoder_layer),
    ]:
        exercise = by_name(name)
        assert (exercise.lesson, exercise.check) == (lesson, check)
        assert check.passes(exercise.reference)
