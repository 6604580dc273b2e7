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


def _norm(x, w, b, eps, flaw=""):
    """torch's LayerNorm, or with a flaw of families.NORM or :data:`_LN_WHY`."""
    if not flaw:
        return F.layer_norm(x, x.shape[-1:], w, b, eps)
    if flaw in families.NORM:
        return families.layer_norm(x, w, b, eps, flaw)
    dims = {"over the tokens": (-2,), "over everything": tuple(range(x.dim()))}.get(flaw, (-1,))
    var, mean = torch.var_mean(x, dims, keepdim=True, correction=0)
    std = x.std(-1, keepdim=True) + eps if flaw == "std + eps" else (var + eps).sqrt()
    divisor = {"not divided": 1.0, "divided by the variance": var + eps}.get(flaw, std)
    n = (x if flaw == "no mean subtraction" else x - mean) / divisor
    affine = {"weight and bias swapped": n * b + w, "bias multiplied": n * w * b}
    affine |= {"weight added": n + w + b, "bias missing": n * w, "weight missing": n + b}
    return affine.get(flaw, n * w + b)


_OWN_FEATURES = "LayerNorm takes them over each token's own features, the last axis."
_LN_WHY = {
    "normalised over the wrong axis": "the mean and variance are taken over the first axis (the "
    f"batch, as BatchNorm does); {_OWN_FEATURES}",
    "unbiased variance": "the variance is the unbiased one, divided by n − 1; LayerNorm's by n.",
    "over the tokens": "the mean and variance are taken over the tokens (the sequence axis); "
    + _OWN_FEATURES,
    "over everything": "one mean and one variance for the whole tensor; each token gets its own.",
    "std + eps": "the divisor is the standard deviation plus ε: torch's std is the unbiased one "
    "(n − 1), and ε goes inside the square root.",
    "no mean subtraction": "the mean is not subtracted before dividing by the standard deviation.",
    "not divided": "the mean is subtracted, but nothing divides by the standard deviation.",
    "divided by the variance": "the centred values are divided by the variance, not its root.",
    "weight and bias swapped": "the weight and the bias are swapped: γ multiplies, β is added.",
    "bias multiplied": "the bias multiplies; it is added, after the weight γ multiplies.",
    "weight added": "the weight is added; it multiplies, before the bias β is added.",
    "bias missing": "the bias β is missing: it is added after the weight multiplies.",
    "weight missing": "the weight γ is missing: it multiplies before the bias is added.",
}


def _layer_norm(x, w, b, eps, up, flaw=""):
    """:func:`_norm`'s output, and the gradients of x, γ and β it sends back for ``up``."""
    x, w, b = (t.detach().requires_grad_() for t in (x, w, b))
    with torch.enable_grad():
        y = _norm(x, w, b, eps, flaw)
        return (y.detach(), *torch.autograd.grad(y, (x, w, b), up, allow_unused=True))


def _ln_cases():
    randn = seeded_randn(3)

    def data(x, eps=1e-5, **extra):  # a Case's fields; args (x, γ, β, ε, the upstream gradient)
        d = x.size(-1)
        return {"args": (x, 1 + 0.5 * randn(d), randn(d), eps, randn(*x.shape)), "extra": extra}

    # a non-zero mean and a variance far from 1, so every step shows; a large eps first, so that
    # where eps goes (and which variance is used) shows from the first case on
    fresh = data(1 + 0.3 * randn(2, 5, 8), 0.1, fresh=True)
    yield Case("LayerNorm(8, eps=0.1) fresh (weight 1, bias 0), then random; (2, 5, 8)", **fresh)
    batch = data(3 * randn(3, 4, 16))
    yield Case("LayerNorm(16), random weight and bias; a batch (3, 4, 16)", **batch)
    small = data(randn(2, 3, 8), 0.1)
    yield Case("LayerNorm(8, eps=0.1), random weight and bias; (2, 3, 8)", **small)
    yield Case("LayerNorm(6) on 2-D input (4, 6): tokens, no sequence axis", **data(randn(4, 6)))


def _require_parameters(module, case: Case, size: int) -> None:
    """weight and bias exist, are registered parameters of shape (size,), fresh ones 1 and 0."""
    registered = {id(p) for p in module.parameters()}
    for name, what in (("weight", "the weight γ, starting at 1"), ("bias", "the bias β, at 0")):
        p = getattr(module, name, None)
        if not isinstance(p, torch.Tensor):
            problem = f"your LayerNorm has no tensor attribute `{name}`: __init__ creates {what}"
        elif id(p) not in registered:
            problem = (
                f"self.{name} is a plain tensor, not a registered parameter: no optimiser learns "
                "it, and moving the module to a device leaves it behind. Wrap it in nn.Parameter"
            )
        elif tuple(p.shape) != (size,):
            problem = f"self.{name} has shape {shape_str(p.shape)}, expected {shape_str((size,))}"
        else:
            continue
        raise ExerciseFailure(f"Case {case.name!r}: {problem}; one learnable value per feature.")
    if case.extra.get("fresh") and not ((module.weight == 1).all() and (module.bias == 0).all()):
        raise ExerciseFailure(
            f"Case {case.name!r}: a fresh LayerNorm starts with its weight all ones and its bias "
            "all zeros (no change after normalising), as torch's; yours starts otherwise."
        )


def _call_layer_norm(candidate, case: Case, table: Table):
    """Build the learner's LayerNorm, give it the case's γ and β, run it forward and backward."""
    x, w, b, eps, up = case.args
    module = build_module(candidate, case, (x.size(-1),), eps=eps)
    _require_parameters(module, case, x.size(-1))
    with torch.no_grad():
        module.weight.copy_(w)
        module.bias.copy_(b)
    x = x.clone().requires_grad_()
    y = call_candidate(module, case.name, x, crash_hint=_FIXED_AXIS if x.dim() == 2 else "")
    if not isinstance(y, torch.Tensor) or y.shape != x.shape:
        return y, None, None, None
    if not y.requires_grad:
        raise ExerciseFailure(
            f"Case {case.name!r}: your output is cut off from autograd (no grad_fn): nothing "
            "before it could learn.\nLikely cause: a step in forward that leaves torch (a detach, "
            ".item(), NumPy, or torch.no_grad)."
        )
    (y * up).sum().backward()
    params = (x, module.weight, module.bias)
    return (y.detach(), *(torch.zeros_like(t) if t.grad is None else t.grad for t in params))


_GRADS = ("input", "weight", "bias")
_FIXED_AXIS = "a fixed axis number that only 3-D input has: the features are the last axis."
_DETACHED = "the values are right, not their gradient: cut off from autograd (a detach, .data)?"
LAYER_NORM = Table(
    cases=_ln_cases,
    reference=_layer_norm,
    mistakes=families.flawed(_layer_norm, {**families.NORM, **_LN_WHY}, **_LN_WHY),
    call=_call_layer_norm,
    outputs=[
        Out(
            "the outputs",
            0,
            shape_hint="LayerNorm keeps the input's shape: a mean or variance that loses its axis "
            "broadcasts the wrong way.",
            fallback="more than one thing differs. Check each step on one token: the mean and "
            "biased variance over its features, ε inside the root, then γ times it plus β.",
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
    own_work={  # what the exercise asks the learner to write themselves
        "torch's layer_norm (torch.nn.functional)": F.layer_norm,
        "torch's layer_norm": torch.layer_norm,
        "torch's nn.LayerNorm": nn.LayerNorm,
        "the course's LayerNorm (mha_course)": layernorm.LayerNorm,
    },
    table=LAYER_NORM,
)
