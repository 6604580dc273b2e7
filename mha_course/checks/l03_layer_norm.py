"""Lesson 03's LayerNorm, held to torch's on its values and on the gradients it sends back to
its input, weight and bias."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .. import layernorm
from .._validate import shape_str
from . import families
from ._core import call_candidate, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, build_module, seeded_randn

LAYER_NORM_ROUTINES = {  # what the exercise asks the learner to write themselves
    "torch's layer_norm (torch.nn.functional)": F.layer_norm,
    "torch's layer_norm": torch.layer_norm,
    "torch's nn.LayerNorm": nn.LayerNorm,
    "the course's LayerNorm (mha_course)": layernorm.LayerNorm,
}


def _normed(x, eps, dims=(-1,), centre=True, divisor=lambda var, eps: (var + eps).sqrt()):
    """The normalisation over ``dims`` (without γ and β), a step of it changed."""
    mean = x.mean(dims, keepdim=True)
    return (x - mean if centre else x) / divisor(x.var(dims, keepdim=True, unbiased=False), eps)


_NORMALISED = {  # flaw: (x, ε) -> the normalised x with it
    "over the tokens": lambda x, eps: _normed(x, eps, (-2,)),
    "over everything": lambda x, eps: _normed(x, eps, tuple(range(x.dim()))),
    "std + eps": lambda x, eps: (x - x.mean(-1, True)) / (x.std(-1, keepdim=True) + eps),
    "no mean subtraction": lambda x, eps: _normed(x, eps, centre=False),
    "not divided": lambda x, eps: _normed(x, eps, divisor=lambda var, eps: 1.0),
    "divided by the variance": lambda x, eps: _normed(x, eps, divisor=lambda var, eps: var + eps),
}
_AFFINE = {  # flaw: (normalised, γ, β) -> the result with it
    "weight and bias swapped": lambda n, w, b: n * b + w,
    "bias multiplied": lambda n, w, b: n * w * b,
    "weight added": lambda n, w, b: n + w + b,
    "bias missing": lambda n, w, b: n * w,
    "weight missing": lambda n, w, b: n + b,
}
_OWN_FEATURES = "LayerNorm takes them over each token's own features, the last axis."
_LN_WHY = {
    "normalised over the wrong axis": "the mean and variance are taken over the first axis (the "
    f"batch, as BatchNorm does); {_OWN_FEATURES}",
    "unbiased variance": "the variance is the unbiased one, divided by n − 1 (what torch's var "
    "and std give by default); LayerNorm's divides by n, the number of features.",
    "over the tokens": "the mean and variance are taken over the tokens (the sequence axis); "
    + _OWN_FEATURES,
    "over everything": "one mean and one variance for the whole tensor; each token gets its own, "
    "over its features (the last axis).",
    "std + eps": "the divisor is the standard deviation plus ε: torch's std is the unbiased one "
    "(n − 1), and ε belongs inside the square root, added to the variance.",
    "no mean subtraction": "the mean is not subtracted before dividing by the standard deviation.",
    "not divided": "the mean is subtracted, but nothing divides by the standard deviation, "
    "√(σ² + ε).",
    "divided by the variance": "the centred values are divided by the variance; LayerNorm "
    "divides by the standard deviation, its square root √(σ² + ε).",
    "weight and bias swapped": "the weight and the bias are swapped: the weight γ multiplies, the "
    "bias β is added.",
    "bias multiplied": "the bias multiplies; it is added, after the weight γ multiplies.",
    "weight added": "the weight is added; it multiplies, before the bias β is added.",
    "bias missing": "the bias β is missing: it is added after the weight multiplies.",
    "weight missing": "the weight γ is missing: it multiplies before the bias is added.",
}


def _layer_norm(flaw=""):
    """torch's LayerNorm (or with a flaw of families.NORM, :data:`_NORMALISED`, :data:`_AFFINE`)
    as the checker calls one: (output, and the gradients of x, γ and β for the upstream ``up``)."""

    def run(x, w, b, eps):
        if not flaw:
            return F.layer_norm(x, x.shape[-1:], w, b, eps)
        if flaw in families.NORM:
            return families.layer_norm(x, w, b, eps, flaw)
        normed = _NORMALISED.get(flaw, _normed)(x, eps)
        return _AFFINE.get(flaw, lambda n, w, b: n * w + b)(normed, w, b)

    def run_and_differentiate(x, w, b, eps, up):
        x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
        with torch.enable_grad():
            y = run(x, w, b, eps)
            return (y.detach(), *torch.autograd.grad(y, (x, w, b), up, allow_unused=True))

    return run_and_differentiate


def _ln_cases():
    randn = seeded_randn(3)

    def args(x, eps=1e-5):  # (x, γ, β, ε, the upstream gradient)
        return x, 1 + 0.5 * randn(x.size(-1)), randn(x.size(-1)), eps, randn(*x.shape)

    # a non-zero mean and a variance far from 1, so every step shows; a large eps first, so that
    # where eps goes (and which variance is used) shows from the first case on
    yield Case(
        "LayerNorm(8, eps=0.1) (eps large on purpose), fresh: weight 1, bias 0; then random ones "
        "copied in, on a batch (2, 5, 8)",
        args(1 + 0.3 * randn(2, 5, 8), 0.1),
        extra={"fresh": True},
    )
    yield Case(
        "LayerNorm(16), random weight and bias; a batch (3, 4, 16)", args(3 * randn(3, 4, 16))
    )
    yield Case(
        "LayerNorm(8, eps=0.1), random weight and bias; (2, 3, 8)", args(randn(2, 3, 8), 0.1)
    )
    yield Case("LayerNorm(6) on 2-D input (4, 6): four tokens, no sequence axis", args(randn(4, 6)))


def _require_parameters(module, case: str, size: int) -> None:
    """weight and bias exist, are registered parameters of shape (size,)."""
    registered = {id(p) for p in module.parameters()}
    for name, what in (("weight", "the weight γ, starting at 1"), ("bias", "the bias β, at 0")):
        p = getattr(module, name, None)
        if not isinstance(p, torch.Tensor):
            problem = f"your LayerNorm has no tensor attribute `{name}`: __init__ creates {what}"
        elif id(p) not in registered:
            problem = (
                f"self.{name} is a plain tensor, not a registered parameter, so an optimiser never "
                "learns it (and moving the module to a device leaves it behind): wrap it in "
                "nn.Parameter"
            )
        elif tuple(p.shape) != (size,):
            problem = f"self.{name} has shape {shape_str(p.shape)}, expected {shape_str((size,))}"
        else:
            continue
        raise ExerciseFailure(f"Case {case!r}: {problem}; one learnable value per feature.")


def _call_layer_norm(candidate, case: Case, table: Table):
    """Build the learner's LayerNorm, give it the case's γ and β, run it forward and backward."""
    x, w, b, eps, up = case.args
    module = build_module(candidate, case, (x.size(-1),), eps=eps)
    _require_parameters(module, case.name, x.size(-1))
    identity = bool((module.weight == 1).all() and (module.bias == 0).all())
    if case.extra.get("fresh") and not identity:
        raise ExerciseFailure(
            f"Case {case.name!r}: a fresh LayerNorm starts as 'no change' after normalising: its "
            "weight all ones and its bias all zeros, as torch.nn.LayerNorm; yours starts with "
            "other values."
        )
    with torch.no_grad():
        module.weight.copy_(w)
        module.bias.copy_(b)
    x = x.clone().requires_grad_()
    y = call_candidate(module, case.name, x, crash_hint=_FIXED_AXIS if x.dim() == 2 else "")
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        return y, None, None, None
    if not y.requires_grad:
        raise ExerciseFailure(
            f"Case {case.name!r}: your output is cut off from autograd (it has no grad_fn), so "
            "nothing before it could learn.\nLikely cause: a step in forward that leaves torch's "
            "operations on x (a detach, .item(), NumPy, or torch.no_grad)."
        )
    (y * up).sum().backward()
    params = (x, module.weight, module.bias)
    return (y.detach(), *(torch.zeros_like(t) if t.grad is None else t.grad for t in params))


_GRADS = ("input", "weight", "bias")
_FIXED_AXIS = "a fixed axis number that only 3-D input has: the features are the last axis."
_DETACHED = (
    "the values are right but not their gradient: part of the computation is cut off from "
    "autograd (a detach, .data or .item() on the way)."
)
LAYER_NORM = Table(
    cases=_ln_cases,
    reference=_layer_norm(),
    mistakes=families.mistakes(_layer_norm, [*families.NORM, *_NORMALISED, *_AFFINE], **_LN_WHY),
    call=_call_layer_norm,
    outputs=[
        Out(
            "the outputs",
            0,
            shape_hint="LayerNorm keeps the input's shape: a mean or variance that loses its axis "
            "broadcasts the wrong way; it keeps a last axis of length 1.",
            fallback="more than one thing differs. Check each step on one token: the mean and the "
            "biased variance over its features (the last axis), ε inside the square root, then "
            "γ times the result plus β.",
        ),
        *(Out(f"the {x} gradients", i, fallback=_DETACHED) for i, x in enumerate(_GRADS, 1)),
    ],
    atol=1e-4,
    rtol=1e-4,
)
check_layer_norm = exercise(
    "LayerNorm",
    "03",
    reference=layernorm.LayerNorm,
    todo="Replace `raise NotImplementedError` in your LayerNorm: the statistics, then the affine.",
    points=2,
    own_work=LAYER_NORM_ROUTINES,
    table=LAYER_NORM,
)
