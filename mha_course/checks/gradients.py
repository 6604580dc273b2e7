"""Checker for lesson 03's measuring tool: how much gradient reaches each block of a stack.

``gradient_norms(blocks, x, target)`` runs ``x`` through the blocks, takes
``F.mse_loss(output, target)`` and returns, for every block, the norm of the gradient of that loss
with respect to the block's *input*. The lesson runs the learner's function on deep stacks of
attention blocks, with and without residuals and LayerNorm. Both ways of getting the gradient of
an intermediate tensor pass: ``retain_grad()`` before ``backward()``, or ``torch.autograd.grad``.
"""

from __future__ import annotations

import numbers
import warnings

import torch
import torch.nn.functional as F
from torch import nn

from .. import reference
from ._core import Mistake, checker, compare
from ._failure import ExerciseFailure
from ._steps import call_diagnosed, randn

__all__ = ["check_gradient_norms"]

_RESULT = "one number per block: the norm of ∂loss/∂(the block's input), item 0 at x itself"

# The learner's error, and what it means here (the first text found in the error wins).
_CRASHES = (
    (
        "'NoneType' object has no attribute",
        "a tensor made by an operation (not a leaf) keeps no .grad after backward(). Call "
        ".retain_grad() on each block's input before the backward pass, or ask "
        "torch.autograd.grad for the gradients.",
    ),
    (
        "can't retain_grad on Tensor that has requires_grad=False",
        "x does not require a gradient, so autograd tracks nothing before the first block. Make "
        "the input a tensor that requires grad (a detached copy of x, then .requires_grad_()).",
    ),
    (
        "does not require grad",
        "the tensors you differentiate must require grad: x may come without, so make the input "
        "a tensor that requires grad (a detached copy of x, then .requires_grad_()).",
    ),
    (
        "object has no attribute 'parameters'",
        "a block may be a plain function, with no parameters. The exercise measures the gradient "
        "at each block's input (the activations that flow into it), not the gradient of its "
        "weights.",
    ),
    (
        "backward through the graph a second time",
        "backward() ran twice over the same graph: run the stack once, then one backward pass "
        "for the one loss.",
    ),
)


def _with_grad(run):
    """``run`` with autograd on (the checker's diagnosis runs the mistakes under no_grad)."""

    def with_grad(*args):
        with torch.enable_grad():
            return run(*args)

    return with_grad


def _input_grads(blocks, x, target, reduction="mean", at="inputs"):
    """The gradients at each block's input (``at="inputs"``) or output, without side effects."""
    hidden, inputs, outputs = x.detach().requires_grad_(), [], []
    for block in blocks:
        inputs.append(hidden)
        hidden = block(hidden)
        outputs.append(hidden)
    loss = F.mse_loss(hidden, target, reduction=reduction)
    wanted = inputs if at == "inputs" else outputs
    return torch.autograd.grad(loss, wanted)


def _parameter_grad_norms(blocks, x, target):
    hidden = x.detach()
    for block in blocks:
        hidden = block(hidden)
    params = [list(b.parameters()) for b in blocks]
    if not all(params):
        raise ValueError("a block without parameters")
    grads = torch.autograd.grad(F.mse_loss(hidden, target), [p for ps in params for p in ps])
    norms, i = [], 0
    for ps in params:
        norms.append(torch.cat([g.flatten() for g in grads[i : i + len(ps)]]).norm())
        i += len(ps)
    return torch.stack(norms)


def _norms(grads) -> torch.Tensor:
    return torch.stack([g.norm() for g in grads])


def _mistakes() -> list[Mistake]:
    return [Mistake(m.name, _with_grad(m.run), m.explanation) for m in _classic()]


def _classic() -> list[Mistake]:
    return [
        Mistake(
            "at the outputs",
            lambda b, x, t: _norms(_input_grads(b, x, t, at="outputs")),
            "you measured the gradient at each block's output. The list starts at the input of "
            "the first block, x itself, and ends at the input of the last block.",
        ),
        Mistake(
            "reversed",
            lambda b, x, t: _norms(_input_grads(b, x, t)).flip(0),
            "your list is in reverse order: item i belongs to blocks[i], so item 0 is the "
            "gradient at x, the input of the first block.",
        ),
        Mistake(
            "summed loss",
            lambda b, x, t: _norms(_input_grads(b, x, t, reduction="sum")),
            "your loss is the sum of the squared errors; the exercise's loss is their mean, "
            "F.mse_loss(output, target), so your gradients are larger by the number of elements.",
        ),
        Mistake(
            "squared norm",
            lambda b, x, t: _norms(_input_grads(b, x, t)) ** 2,
            "you gave the squared norm (the sum of squares); the norm is its square root: "
            "Tensor.norm() or torch.linalg.vector_norm.",
        ),
        Mistake(
            "mean of absolute values",
            lambda b, x, t: torch.stack([g.abs().mean() for g in _input_grads(b, x, t)]),
            "you gave the mean absolute value of each gradient; the exercise asks for its norm, "
            "the square root of the sum of squares over the whole tensor: Tensor.norm().",
        ),
        Mistake(
            "parameter gradients",
            _parameter_grad_norms,
            "these are the gradients of each block's parameters (its weights); the exercise asks "
            "for the gradient at each block's input, the activations that flow into it.",
        ),
    ]


def _cases():
    """(case, blocks, x, target)."""
    g = torch.Generator().manual_seed(33)
    with torch.random.fork_rng(devices=[]):  # leave the learner's random stream alone
        torch.manual_seed(33)
        linears = [nn.Linear(4, 4) for _ in range(3)]
        wide = [nn.Linear(8, 8, dtype=torch.float64) for _ in range(5)]
    yield (
        "the worked example: blocks = [×2, ×3] (two functions), x = [[[1.]]], target 0",
        [lambda h: 2 * h, lambda h: 3 * h],
        torch.ones(1, 1, 1),
        torch.zeros(1, 1, 1),
    )
    yield (
        "three blocks nn.Linear(4, 4) then tanh; x (2, 3, 4) that does not require grad",
        [nn.Sequential(linear, nn.Tanh()) for linear in linears],
        randn(g, 2, 3, 4),
        randn(g, 2, 3, 4),
    )
    x = randn(g, 1, 6, 8, dtype=torch.float64).requires_grad_()
    yield (
        "five blocks, float64, each x + tanh(Linear(x)); x (1, 6, 8) that already requires grad",
        [_Residual(linear) for linear in wide],
        x,
        randn(g, 1, 6, 8, dtype=torch.float64),
    )


class _Residual(nn.Module):
    def __init__(self, linear):
        super().__init__()
        self.linear = linear

    def forward(self, h):
        return h + torch.tanh(self.linear(h))


def _as_numbers(got, case: str, n_blocks: int) -> torch.Tensor:
    """The learner's list (or tuple, or 1-D tensor) of numbers as a float64 tensor."""
    if isinstance(got, torch.Tensor):
        got = list(got.detach().flatten()) if got.dim() == 1 else [got]
    if not isinstance(got, (list, tuple)):
        raise ExerciseFailure(
            f"Case {case!r}: your result should be a list of {n_blocks} floats, got "
            f"{type(got).__name__}: {_RESULT}."
        )
    if len(got) != n_blocks:
        extra = (
            "\nLikely cause: you also measured the gradient at the last block's output; the "
            "list has one number per block, at its input."
            if len(got) == n_blocks + 1
            else ""
        )
        raise ExerciseFailure(
            f"Case {case!r}: your list has {len(got)} items, expected {n_blocks}: {_RESULT}."
            + extra
        )
    values = []
    for item in got:
        if isinstance(item, torch.Tensor) and item.numel() != 1:
            raise ExerciseFailure(
                f"Case {case!r}: an item of your list is a tensor of shape "
                f"{tuple(item.shape)}; each item is one number, the norm of the whole gradient "
                f"(Tensor.norm(), then .item())."
            )
        if (
            item is None
            or isinstance(item, bool)
            or not isinstance(item, (numbers.Real, torch.Tensor))
        ):
            raise ExerciseFailure(
                f"Case {case!r}: an item of your list is {type(item).__name__}; {_RESULT}."
            )
        values.append(float(item))
    return torch.tensor(values, dtype=torch.float64)


def _fresh(x: torch.Tensor) -> torch.Tensor:
    """A copy of the case's x, a leaf that requires grad exactly when x does."""
    return x.detach().clone().requires_grad_(x.requires_grad)


def _call(candidate, case: str, blocks, x, target):
    for block in blocks:  # start from clean parameter gradients, whatever ran before
        if isinstance(block, nn.Module):
            block.zero_grad(set_to_none=True)
    try:
        with warnings.catch_warnings():  # reading .grad of a non-leaf warns; the message says more
            warnings.simplefilter("ignore", UserWarning)
            return call_diagnosed(candidate, case, (blocks, x, target))
    except ExerciseFailure as failure:
        error = failure.raised
        why = next((w for text, w in _CRASHES if error is not None and text in str(error)), None)
        if why is None:
            raise
        raise failure.with_cause(why) from error


@checker(
    "gradient_norms",
    "Replace `raise NotImplementedError` with the forward pass through the blocks, the loss, "
    "the backward pass and the norm of the gradient at each block's input.",
)
def check_gradient_norms(candidate) -> int:
    """Check ``candidate(blocks, x, target) -> [‖∂loss/∂input of blocks[i]‖ for each i]``, for
    ``loss = F.mse_loss(output of the last block, target)``."""
    mistakes = _mistakes()
    n = 0
    for case, blocks, x, target in _cases():
        expected = torch.tensor(reference.gradient_norms(blocks, x, target), dtype=torch.float64)
        got = _as_numbers(_call(candidate, case, blocks, _fresh(x), target), case, len(blocks))
        compare(
            case,
            "gradient norms",
            got,
            expected,
            atol=1e-6,
            rtol=1e-4,
            mistakes=mistakes,
            args=(blocks, x, target),
            fallback_cause="compare each step with the exercise: one forward pass through all the "
            "blocks, the loss F.mse_loss(output, target), one backward pass, then the norm of the "
            "gradient at the input of each block.",
        )
        n += 1
    return n
