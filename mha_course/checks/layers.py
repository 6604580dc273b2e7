"""Checkers for lesson 03: LayerNorm and the sinusoidal positional encoding."""

from __future__ import annotations

import math

import torch
from torch import nn

from .. import reference
from .._validate import shape_str
from ._core import (
    ExerciseFailure,
    Mistake,
    _close,
    call_candidate,
    checker,
    compare,
    diagnose,
    require_shape,
)

__all__ = ["check_layer_norm", "check_positional_encoding"]


# ---------------------------------------------------------------- LayerNorm


def _normalise(x, eps, dims=(-1,), correction=0, eps_inside=True, subtract_mean=True, divide=True):
    """LayerNorm's normalisation with each classic mistake as a switch (no affine)."""
    mean = x.mean(dim=dims, keepdim=True)
    centred = x - mean if subtract_mean else x
    if not divide:
        return centred
    var = x.var(dim=dims, keepdim=True, correction=correction)
    std = torch.sqrt(var + eps) if eps_inside else torch.sqrt(var) + eps
    return centred / std


def _ln_mistakes() -> list[Mistake]:
    def plain(**switches):  # the normalisation goes wrong, the affine is right
        return lambda x, w, b, eps: _normalise(x, eps, **switches) * w + b

    def affine(combine):  # the normalisation is right, the affine goes wrong
        return lambda x, w, b, eps: combine(_normalise(x, eps), w, b)

    all_dims = lambda x: tuple(range(x.dim()))  # noqa: E731
    return [
        Mistake(
            "over the batch axis",
            plain(dims=(0,)),
            "you normalised over the batch axis (dim=0), as BatchNorm does. LayerNorm normalises each "
            "token on its own, over its features: mean and var over the last axis, dim=-1.",
        ),
        Mistake(
            "over the tokens",
            plain(dims=(-2,)),
            "you normalised over the sequence axis (the tokens); LayerNorm normalises over the "
            "features of each token: dim=-1, keepdim=True.",
        ),
        Mistake(
            "over everything",
            lambda x, w, b, eps: _normalise(x, eps, dims=all_dims(x)) * w + b,
            "you took one mean and variance for the whole tensor; each token gets its own: "
            "x.mean(dim=-1, keepdim=True) and x.var(dim=-1, keepdim=True, unbiased=False).",
        ),
        Mistake(
            "unbiased variance",
            plain(correction=1),
            "you used the unbiased variance (divide by n - 1), which is what x.var() and x.std() give "
            "by default. LayerNorm divides by n: x.var(dim=-1, keepdim=True, unbiased=False).",
        ),
        Mistake(
            "std + eps",
            lambda x, w, b, eps: (
                (x - x.mean(-1, keepdim=True)) / (x.std(-1, keepdim=True) + eps) * w + b
            ),
            "you divided by x.std() + eps: x.std() is the unbiased std (n - 1) and eps belongs inside "
            "the square root: torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=False) + eps).",
        ),
        Mistake(
            "eps outside the sqrt",
            plain(eps_inside=False),
            "eps is outside the square root: divide by torch.sqrt(var + eps), not torch.sqrt(var) + eps.",
        ),
        Mistake(
            "eps ignored",
            lambda x, w, b, eps: _normalise(x, 0.0) * w + b,
            "eps is missing (or not the one passed to __init__): store self.eps = eps and divide by "
            "torch.sqrt(var + self.eps).",
        ),
        Mistake(
            "no mean subtraction",
            plain(subtract_mean=False),
            "you divided by the standard deviation but did not subtract the mean first: "
            "(x - mean) / torch.sqrt(var + eps).",
        ),
        Mistake(
            "not divided",
            plain(divide=False),
            "you subtracted the mean but did not divide by the standard deviation, torch.sqrt(var + eps).",
        ),
        Mistake(
            "divided by the variance",
            lambda x, w, b, eps: (
                (x - x.mean(-1, keepdim=True)) / (x.var(-1, keepdim=True, correction=0) + eps) * w
                + b
            ),
            "you divided by the variance; divide by the standard deviation, its square root: "
            "torch.sqrt(var + eps).",
        ),
        Mistake(
            "no affine",
            affine(lambda n, w, b: n),
            "the learned scale and shift are missing: return x_hat * self.weight + self.bias.",
        ),
        Mistake(
            "weight and bias swapped",
            affine(lambda n, w, b: n * b + w),
            "weight and bias are swapped: the weight (γ) multiplies and the bias (β) is added: "
            "x_hat * self.weight + self.bias.",
        ),
        Mistake(
            "bias multiplied",
            affine(lambda n, w, b: n * w * b),
            "the bias multiplies; it should be added: x_hat * self.weight + self.bias.",
        ),
        Mistake(
            "weight added",
            affine(lambda n, w, b: n + w + b),
            "the weight is added; it should multiply: x_hat * self.weight + self.bias.",
        ),
        Mistake(
            "bias missing",
            affine(lambda n, w, b: n * w),
            "the bias is missing: x_hat * self.weight + self.bias.",
        ),
        Mistake(
            "weight missing",
            affine(lambda n, w, b: n + b),
            "the weight is missing: x_hat * self.weight + self.bias.",
        ),
    ]


def _ln_parameters(module, case: str, size: int) -> None:
    """weight and bias exist, are learnable nn.Parameters of shape (size,)."""
    registered = {id(p) for p in module.parameters()} if isinstance(module, nn.Module) else set()
    for name, init in (("weight", "torch.ones"), ("bias", "torch.zeros")):
        p = getattr(module, name, None)
        make = f"self.{name} = nn.Parameter({init}(normalized_shape))"
        if not isinstance(p, torch.Tensor):
            raise ExerciseFailure(
                f"Case {case!r}: your LayerNorm has no tensor attribute `{name}`. "
                f"Create it in __init__: {make}"
            )
        if id(p) not in registered:
            raise ExerciseFailure(
                f"Case {case!r}: self.{name} is a plain tensor, not a registered parameter, so an optimiser "
                f"would never learn it (and .to(device) would not move it). Wrap it: {make}"
                + ("" if isinstance(module, nn.Module) else ", and make the class an nn.Module")
            )
        if tuple(p.shape) != (size,):
            raise ExerciseFailure(
                f"Case {case!r}: self.{name} has shape {shape_str(p.shape)}, expected "
                f"({size},), one value per feature: {make}"
            )


def _ln_cases():
    g = torch.Generator().manual_seed(3)

    def randn(*shape):
        return torch.randn(*shape, generator=g)

    # inputs with a non-zero mean and a variance far from 1, so every step shows; a large eps
    # first, so that where eps goes (and which variance is used) shows from the first case on
    yield (
        "a fresh LayerNorm(8, eps=0.1) (weight 1, bias 0; eps large on purpose) on a batch (2, 5, 8)",
        8,
        0.1,
        1 + 0.3 * randn(2, 5, 8),
        False,
    )
    yield (
        "LayerNorm(16), random weight and bias copied in; batch (3, 4, 16)",
        16,
        1e-5,
        -1 + 3 * randn(3, 4, 16),
        True,
    )
    yield (
        "LayerNorm(8, eps=0.1), random weight and bias; batch (2, 3, 8)",
        8,
        0.1,
        0.3 * randn(2, 3, 8),
        True,
    )
    yield (
        "LayerNorm(6) on 2-D input (4, 6): four tokens, no sequence axis",
        6,
        1e-5,
        1 + randn(4, 6),
        True,
    )


@checker(
    "layer_norm",
    "Replace `raise NotImplementedError` in your LayerNorm with the mean, the variance, "
    "the normalisation and the affine.",
)
def check_layer_norm(candidate) -> int:
    """Check ``candidate(normalized_shape, eps=1e-5)`` (a LayerNorm class with ``weight`` and
    ``bias``) against ``torch.nn.LayerNorm``: fresh, with a random affine copied in, with a large
    eps, on 2-D input, and its gradients."""
    mistakes = _ln_mistakes()
    g = torch.Generator().manual_seed(2)
    n = 0
    for case, size, eps, x, random_affine in _ln_cases():
        module = call_candidate(candidate, case, size, eps=eps)
        _ln_parameters(module, case, size)
        expected_module = nn.LayerNorm(size, eps=eps, dtype=torch.float64)
        if random_affine:
            with torch.no_grad():
                expected_module.weight.copy_(
                    1 + 0.5 * torch.randn(size, generator=g, dtype=torch.float64)
                )
                expected_module.bias.copy_(torch.randn(size, generator=g, dtype=torch.float64))
                module.weight.copy_(expected_module.weight)
                module.bias.copy_(expected_module.bias)
        elif not (torch.all(module.weight == 1) and torch.all(module.bias == 0)):
            raise ExerciseFailure(
                f"Case {case!r}: a fresh LayerNorm should start as 'no change' after normalising: "
                f"weight = torch.ones(normalized_shape), bias = torch.zeros(normalized_shape) "
                f"(as torch.nn.LayerNorm); yours starts with other values."
            )
        got = _call_layer_norm(module, case, x.clone())
        expected = expected_module(x.double())
        require_shape(
            case,
            "the result",
            got,
            x.shape,
            "LayerNorm keeps the input's shape; did you take the mean without keepdim=True?",
        )
        w, b = expected_module.weight.detach(), expected_module.bias.detach()
        if not _close(got, expected, atol=1e-4, rtol=1e-4):  # only a wrong answer needs a diagnosis
            cause = diagnose(mistakes, got, lambda r: r, x.double(), w, b, eps)
            compare(
                case,
                "outputs",
                got,
                expected,
                atol=1e-4,
                rtol=1e-4,
                cause=cause,
                fallback_cause="more than one thing differs. Check each step on one token: the mean and "
                "the *biased* variance (correction=0) over the last axis with keepdim=True, ε added "
                "inside the square root, then * weight + bias.",
            )
        n += 1
    _ln_gradients(candidate)
    return n + 1


def _call_layer_norm(module, case: str, x: torch.Tensor) -> torch.Tensor:
    try:
        return call_candidate(module, case, x)
    except ExerciseFailure as failure:
        if isinstance(failure.__cause__, IndexError) and x.dim() == 2:
            raise ExerciseFailure(
                str(failure).split("\nLikely cause")[0]
                + "\nLikely cause: a fixed axis such as dim=2 only "
                "exists for 3-D input; use dim=-1 (the last axis, the features) so any input works."
            ) from failure.__cause__
        raise


def _ln_gradients(candidate) -> None:
    case = "gradients: backward through your LayerNorm(8) reach the input, weight and bias"
    g = torch.Generator().manual_seed(4)
    x = 2 + torch.randn(2, 3, 8, generator=g)
    upstream = torch.randn(2, 3, 8, generator=g, dtype=torch.float64)
    module = call_candidate(candidate, case, 8)
    expected_module = nn.LayerNorm(8, dtype=torch.float64)
    with torch.no_grad():
        expected_module.weight.copy_(1 + torch.randn(8, generator=g, dtype=torch.float64))
        expected_module.bias.copy_(torch.randn(8, generator=g, dtype=torch.float64))
        module.weight.copy_(expected_module.weight)
        module.bias.copy_(expected_module.bias)
    x_mine, x_ref = x.clone().requires_grad_(), x.double().requires_grad_()
    got = call_candidate(module, case, x_mine)
    require_shape(case, "the result", got, x.shape)
    if not got.requires_grad:
        raise ExerciseFailure(
            f"Case {case!r}: your output is cut off from autograd (it has no grad_fn), so nothing before "
            f"it could learn.\nLikely cause: .detach(), .item(), .numpy() or torch.no_grad() inside forward; "
            f"compute everything with torch operations on x."
        )
    (got.double() * upstream).sum().backward()
    (expected_module(x_ref) * upstream).sum().backward()
    because = (
        "the values are right but not their gradient: is part of the computation detached "
        "(.detach(), .data, .item())?"
    )
    for what, mine, ref in (
        ("input gradients", x_mine.grad, x_ref.grad),
        ("weight gradients", module.weight.grad, expected_module.weight.grad),
        ("bias gradients", module.bias.grad, expected_module.bias.grad),
    ):
        if mine is None:
            raise ExerciseFailure(f"Case {case!r}: the {what} are None.\nLikely cause: {because}")
        compare(case, what, mine, ref, atol=1e-4, rtol=1e-4, fallback_cause=because)


# ---------------------------------------------------------------- positional encoding


def _sinusoids(
    max_len,
    d_model,
    *,
    base=10000.0,
    exponent=lambda j, d: 2 * (j // 2) / d,
    first=0,
    interleave=True,
    sin_even=True,
    multiply=False,
):
    """The positional-encoding table with each classic mistake as a switch (float64)."""
    position = torch.arange(first, first + max_len, dtype=torch.float64).unsqueeze(1)
    j = torch.arange(d_model, dtype=torch.float64)  # the column index
    if interleave:
        freq = base ** (-exponent(j, d_model))  # one frequency per column
        angle = position * freq if not multiply else position / freq
        even = (j % 2 == 0) == sin_even
        return torch.where(even, torch.sin(angle), torch.cos(angle))
    # halves: the sines of every pair first, then the cosines
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)
    angle = position / base ** (two_i / d_model)
    return torch.cat([torch.sin(angle), torch.cos(angle)], dim=-1)[:, :d_model]


def _pe_mistakes() -> list[Mistake]:
    return [
        Mistake(
            "transposed",
            lambda n, d: _sinusoids(n, d).T,
            "your table is transposed: rows are positions and columns are features, shape "
            "(max_len, d_model).",
        ),
        Mistake(
            "sin and cos swapped",
            lambda n, d: _sinusoids(n, d, sin_even=False),
            "sin and cos are swapped: sin goes in the even columns (pe[:, 0::2]) and cos in the odd "
            "ones (pe[:, 1::2]); row 0 (position 0) should read [0, 1, 0, 1, ...].",
        ),
        Mistake(
            "halves",
            lambda n, d: _sinusoids(n, d, interleave=False),
            "you put all the sines in the first half and all the cosines in the second; they are "
            "interleaved: pe[:, 0::2] = sin(...), pe[:, 1::2] = cos(...).",
        ),
        Mistake(
            "positions from 1",
            lambda n, d: _sinusoids(n, d, first=1),
            "the positions start at 1; they start at 0 (torch.arange(max_len)), so row 0 is [0, 1, 0, 1, ...].",
        ),
        Mistake(
            "exponent i/d_model",
            lambda n, d: _sinusoids(n, d, exponent=lambda j, d: (j // 2) / d),
            "the exponent is i/d_model; it is 2i/d_model, where 2i is the even column of the pair: "
            "torch.arange(0, d_model, 2) / d_model.",
        ),
        Mistake(
            "exponent 4i/d_model",
            lambda n, d: _sinusoids(n, d, exponent=lambda j, d: 4 * (j // 2) / d),
            "the 2 is counted twice: torch.arange(0, d_model, 2) already gives 2i, so the exponent is "
            "torch.arange(0, d_model, 2) / d_model, not 2 * torch.arange(0, d_model, 2) / d_model.",
        ),
        Mistake(
            "exponent j/d_model",
            lambda n, d: _sinusoids(n, d, exponent=lambda j, d: j / d),
            "each column got its own frequency; columns 2i and 2i+1 share one: both use "
            "10000^(2i/d_model). Compute the frequencies for the even columns only "
            "(torch.arange(0, d_model, 2)) and use them for sin and for cos.",
        ),
        Mistake(
            "exponent 2j/d_model",
            lambda n, d: _sinusoids(n, d, exponent=lambda j, d: 2 * j / d),
            "the exponent uses the column index as i; i counts pairs of columns: columns 2i and 2i+1 "
            "both use 10000^(2i/d_model), i.e. torch.arange(0, d_model, 2) / d_model.",
        ),
        Mistake(
            "multiplied",
            lambda n, d: _sinusoids(n, d, multiply=True),
            "the position is multiplied by 10000^(2i/d_model); it is divided: pos / 10000^(2i/d_model) "
            "(so the frequencies fall from 1 down to about 1/10000).",
        ),
        Mistake(
            "base 1000",
            lambda n, d: _sinusoids(n, d, base=1000.0),
            "the base is 1000; it is 10000 (ten thousand): pos / 10000 ** (2i / d_model).",
        ),
    ]


def _base_hint(got: torch.Tensor, max_len: int, d_model: int) -> str | None:
    """When the table is right but for its base, say which base it used."""
    if max_len < 2 or d_model < 4 or tuple(got.shape) != (max_len, d_model):
        return None
    pe = got.detach().double()
    if not torch.allclose(
        pe[0], _sinusoids(1, d_model)[0], atol=1e-4
    ):  # row 0 must be [0, 1, 0, 1, ...]
        return None
    freq = torch.asin(pe[1, 2].clamp(-1, 1))  # = 1 / base^(2/d_model) when the rest is right
    if not 0 < freq < 1:
        return None
    base = freq.item() ** (-d_model / 2)
    if not math.isfinite(base) or not torch.allclose(
        pe, _sinusoids(max_len, d_model, base=base), atol=1e-3
    ):
        return None
    return (
        f"your frequencies use the base {base:.4g}; the formula uses 10000: "
        f"pos / 10000 ** (2i / d_model)."
    )


def _pe_cases():
    yield "max_len=1, d_model=4: position 0 only, sin(0) = 0 and cos(0) = 1", 1, 4
    yield "max_len=6, d_model=8", 6, 8
    yield "max_len=16, d_model=16 (square, so a transposed table has the right shape)", 16, 16
    yield "max_len=50, d_model=32", 50, 32
    yield "max_len=20, d_model=128: the low frequencies of a wide model", 20, 128


@checker(
    "positional_encoding",
    "Replace `raise NotImplementedError` with the table of sines and cosines.",
)
def check_positional_encoding(candidate) -> int:
    """Check ``candidate(max_len, d_model) -> (max_len, d_model)`` against the sinusoidal table:
    PE(pos, 2i) = sin(pos / 10000^(2i/d_model)), PE(pos, 2i+1) = cos(same angle)."""
    mistakes = _pe_mistakes()
    n = 0
    for case, max_len, d_model in _pe_cases():
        got = call_candidate(candidate, case, max_len, d_model)
        expected = reference.positional_encoding(max_len, d_model).double()
        transposed = isinstance(got, torch.Tensor) and tuple(got.shape) == (d_model, max_len)
        require_shape(
            case,
            "the table",
            got,
            expected.shape,
            "your table is transposed: rows are positions, columns are features, shape "
            "(max_len, d_model)."
            if transposed
            else "one row per position and one column per feature: shape (max_len, d_model).",
        )
        if not got.is_floating_point():
            raise ExerciseFailure(
                f"Case {case!r}: the table has dtype {got.dtype}; it should be float "
                f"(sines and cosines). Did you build it with an integer torch.arange?"
            )
        if not _close(got, expected, atol=1e-4, rtol=1e-4):
            cause = diagnose(mistakes, got, lambda r: r, max_len, d_model) or _base_hint(
                got, max_len, d_model
            )
            compare(case, "encodings", got, expected, atol=1e-4, rtol=1e-4, cause=cause)
        n += 1
    return n
