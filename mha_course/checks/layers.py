"""Checkers for lesson 03: LayerNorm (here) and the sinusoidal positional encoding (in
:mod:`mha_course.checks.positional`, re-exported here)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import layernorm
from .._validate import shape_str
from ._core import Mistake, call_candidate, checker, compare, require_shape
from ._failure import ExerciseFailure
from ._steps import seeded_randn
from .positional import check_positional_encoding

__all__ = ["check_layer_norm", "check_positional_encoding"]

# What lesson 03 asks the learner to write themselves (the checker names the one called).
LAYER_NORM_ROUTINES = {
    "torch's layer_norm (torch.nn.functional)": F.layer_norm,
    "torch's layer_norm": torch.layer_norm,
    "torch's nn.LayerNorm": nn.LayerNorm,
    "the course's LayerNorm (mha_course)": layernorm.LayerNorm,
}


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
            "the learned scale and shift are missing: after normalising, multiply by self.weight (γ) "
            "and add self.bias (β).",
        ),
        Mistake(
            "weight and bias swapped",
            affine(lambda n, w, b: n * b + w),
            "weight and bias are swapped: the weight (γ) multiplies and the bias (β) is added.",
        ),
        Mistake(
            "bias multiplied",
            affine(lambda n, w, b: n * w * b),
            "the bias multiplies; it should be added, after the weight (γ) multiplies.",
        ),
        Mistake(
            "weight added",
            affine(lambda n, w, b: n + w + b),
            "the weight is added; it should multiply, before the bias (β) is added.",
        ),
        Mistake(
            "bias missing",
            affine(lambda n, w, b: n * w),
            "the bias is missing: add self.bias (β) after multiplying by the weight.",
        ),
        Mistake(
            "weight missing",
            affine(lambda n, w, b: n + b),
            "the weight is missing: multiply by self.weight (γ) before adding the bias.",
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
    randn = seeded_randn(3)

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
    "LayerNorm",
    "Replace `raise NotImplementedError` in your LayerNorm with the mean, the variance, "
    "the normalisation and the affine.",
    own_work=LAYER_NORM_ROUTINES,
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
        compare(
            case,
            "outputs",
            got,
            expected,
            atol=1e-4,
            rtol=1e-4,
            mistakes=mistakes,
            args=(x.double(), w, b, eps),
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
            raise failure.with_cause(
                "a fixed axis such as dim=2 only exists for 3-D input; use dim=-1 (the last "
                "axis, the features) so any input works."
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
