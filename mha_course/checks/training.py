"""Checker for lesson 04's training step: ``train_step(model, optimizer, tokens, targets, padding,
max_norm=1.0)``.

The checker runs the learner's step on a small model with plain SGD (no momentum, so each update
is exactly the learning rate times the clipped gradient, and every mistake shows in the weights),
and runs the right step and the classic wrong ones on copies of the same model. It compares the
loss the step returns and the weights after it: after one step, after two steps in a row (a
forgotten ``zero_grad`` only shows in the second), and with a ``max_norm`` small enough that the
clipping acts. Any correct way to leave out the padding (boolean indexing, ``ignore_index``,
a masked mean) and to put the classes on the right axis passes.
"""

from __future__ import annotations

import copy
import numbers

import torch
import torch.nn.functional as F
from torch import nn

from ._core import Mistake, call_candidate, checker, diagnose
from ._failure import ExerciseFailure

__all__ = ["check_train_step"]

_STEP = (
    "scores, then the loss over the real positions, then optimizer.zero_grad(), loss.backward(), "
    "the clipping, optimizer.step()"
)


_CRASH = (
    "F.cross_entropy takes the scores with the classes on axis 1: (N, V) with targets (N,) "
    "(flatten B and L together, or keep only the real positions), or (B, V, L) with (B, L)."
)


class _Tagger(nn.Module):
    """A small model with the lesson's interface: (tokens, padding) -> scores (B, L, V)."""

    def __init__(self, vocab_size: int, max_len: int, width: int = 6):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, width)
        self.position = nn.Parameter(torch.randn(max_len, width))
        self.readout = nn.Linear(width, vocab_size)

    def forward(self, tokens, padding):
        x = torch.tanh(self.embed(tokens) + self.position[: tokens.size(1)])
        return self.readout(x) * 3  # confident scores: large gradients, so the clipping acts


# ---------------------------------------------------------------- right and wrong steps


def _loss(scores, targets, padding, how="right"):
    flat, wanted = scores.flatten(0, 1), targets.flatten()
    real = ~padding.flatten()
    if how == "right":
        return F.cross_entropy(flat[real], wanted[real])
    if how == "padding counted":
        return F.cross_entropy(flat, wanted)
    if how == "mean over every position":
        return (F.cross_entropy(flat, wanted, reduction="none") * real).mean()
    if how == "sum":
        return F.cross_entropy(flat[real], wanted[real], reduction="sum")
    if how == "softmax first":
        return F.cross_entropy(flat[real].softmax(-1), wanted[real])
    if how == "nll on scores":
        return F.nll_loss(flat[real], wanted[real])
    if how == "classes on axis 1":  # scores (B, L, V) read as (B, C = L, V): needs L == V
        return F.cross_entropy(scores, targets.masked_fill(padding, -100))
    raise ValueError(how)


def _step(model, optimizer, tokens, targets, padding, max_norm, *, loss="right", order="right"):
    """One step, right or with one classic mistake; returns the loss."""
    scores = model(tokens, padding)
    value = _loss(scores, targets, padding, loss)
    if order != "no zero_grad":
        optimizer.zero_grad()
    if order != "no backward":
        value.backward()
    if order == "zero_grad after backward":
        optimizer.zero_grad()
    if order == "clip by value":
        nn.utils.clip_grad_value_(model.parameters(), max_norm)
    elif order == "clip to 1.0":
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    elif order == "clip each parameter":
        for p in model.parameters():
            nn.utils.clip_grad_norm_(p, max_norm)
    elif order not in ("no clipping", "clip after step"):
        nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    if order != "no optimizer.step()":
        optimizer.step()
    return value.detach()


_LOSS_MISTAKES = [
    (
        "padding counted",
        "the loss counts the padding positions too: their targets are not real, and the model "
        "learns to predict them. Keep only the positions where padding is False (or set their "
        "targets to -100, which F.cross_entropy ignores).",
    ),
    (
        "mean over every position",
        "the padding is left out of the sum, but you divided by all B·L positions: the mean is "
        "over the real positions only (F.cross_entropy on them alone does that).",
    ),
    ("sum", "the loss is summed; it is the mean over the real positions (the default reduction)."),
    (
        "softmax first",
        "you applied softmax before F.cross_entropy, which applies log-softmax itself: give it "
        "the raw scores.",
    ),
    (
        "nll on scores",
        "F.nll_loss expects log-probabilities, and these are raw scores: use F.cross_entropy, "
        "which applies the log-softmax for you.",
    ),
    (
        "classes on axis 1",
        "F.cross_entropy took your (B, L, V) scores as (B, C, ...), with the classes on axis 1: "
        "that reads the L positions as classes. Flatten to (B·L, V) with targets (B·L,), or "
        "transpose to (B, V, L).",
    ),
]

_ORDER_MISTAKES = [
    (
        "no zero_grad",
        "the second step's update holds the first step's gradients too: .backward() adds to "
        ".grad, so call optimizer.zero_grad() in every step, before loss.backward().",
    ),
    (
        "zero_grad after backward",  # the weights stay as they were, as with no backward or step
        "the weights did not change. A step needs loss.backward(), then optimizer.step(), and no "
        "optimizer.zero_grad() between the two: it wipes the gradients.",
    ),
    (
        "no clipping",
        "the gradients were not clipped: torch.nn.utils.clip_grad_norm_(model.parameters(), "
        "max_norm), after loss.backward() and before optimizer.step() (before the backward pass "
        "there is nothing to clip yet; after the step it is too late).",
    ),
    (
        "clip to 1.0",
        "the gradients were clipped to norm 1.0 instead of max_norm: use the argument.",
    ),
    (
        "clip by value",
        "clip_grad_value_ caps each number; the step clips the gradients' total norm: "
        "clip_grad_norm_(model.parameters(), max_norm).",
    ),
    (
        "clip each parameter",
        "you clipped each parameter's gradient on its own; clip_grad_norm_ takes all of "
        "model.parameters() at once and scales them together, by their total norm.",
    ),
]


# ---------------------------------------------------------------- the cases


def _cases():
    """(case, vocab_size, L, steps, max_norm or None for the default, tokens, targets, padding)."""
    g = torch.Generator().manual_seed(45)

    def batch(vocab_size, lengths, L):
        B = len(lengths)
        tokens = torch.randint(0, vocab_size, (B, L), generator=g)
        targets = torch.randint(0, vocab_size, (B, L), generator=g)
        padding = torch.arange(L) >= torch.tensor(lengths)[:, None]
        return tokens, targets, padding

    yield (
        "one step; B = 3, L = V = 6, sequences of 6, 4 and 3 real tokens; max_norm = 100 (no "
        "clipping)",
        *(6, 6, 1, 100.0),
        *batch(6, [6, 4, 3], 6),
    )
    yield (
        "two steps in a row on one batch; L = 5, V = 7; max_norm = 100",
        *(7, 5, 2, 100.0),
        *batch(7, [5, 2], 5),
    )
    yield (
        "one step with max_norm = 0.05: the gradients' total norm is larger, so it is clipped",
        *(7, 5, 1, 0.05),
        *batch(7, [5, 3], 5),
    )
    yield (
        "one step with the default max_norm (1.0), called without it",
        *(5, 4, 1, None),
        *batch(5, [4, 1, 2], 4),
    )


def _fresh(vocab_size: int, L: int, seed: int):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = _Tagger(vocab_size, L)
    return model


def _run(step, model, tokens, targets, padding, steps, max_norm, case):
    """Run ``step`` ``steps`` times with plain SGD; (the losses, the weights after)."""
    optimizer = torch.optim.SGD(model.parameters(), lr=0.5)
    extra = {} if max_norm is None else {"max_norm": max_norm}
    losses = []
    for _ in range(steps):
        args = (model, optimizer, tokens.clone(), targets.clone(), padding.clone())
        if case is None:  # the right step or a classic mistake
            losses.append(step(*args, **extra))
        else:
            losses.append(call_candidate(step, case, *args, crash_hint=_CRASH, **extra))
    weights = torch.cat([p.detach().flatten() for p in model.parameters()])
    return losses, weights


def _as_number(loss, case: str) -> float:
    if isinstance(loss, torch.Tensor):
        if loss.requires_grad:
            raise ExerciseFailure(
                f"Case {case!r}: your step returned the loss still attached to its graph "
                f"(requires_grad=True). Kept in a list, every step's graph stays in memory: "
                f"return loss.detach() (or loss.item())."
            )
        if loss.numel() != 1:
            raise ExerciseFailure(
                f"Case {case!r}: your step returned a tensor of shape {tuple(loss.shape)}; "
                f"return the loss, one number: the mean over the real positions."
            )
        return float(loss)
    if isinstance(loss, numbers.Real) and not isinstance(loss, bool):
        return float(loss)
    raise ExerciseFailure(
        f"Case {case!r}: your step returned {type(loss).__name__}; return the loss (a 0-d "
        f"tensor, detached, or a float)."
    )


@checker(
    "train_step",
    "Replace `raise NotImplementedError` in train_step: the loss over the real positions, the "
    "gradients, the clipping and the update, in one step.",
)
def check_train_step(candidate) -> int:
    """Check ``candidate(model, optimizer, tokens, targets, padding, max_norm=1.0)`` (one step of
    training: mean cross-entropy over the positions where ``padding`` is False, zero_grad,
    backward, clip_grad_norm_ to ``max_norm``, step; returns the loss) against the right step and
    the classic wrong ones, on the same model and batch."""
    n = 0
    for seed, (case, vocab_size, L, steps, max_norm, *batch) in enumerate(_cases()):
        _check_case(candidate, case, _fresh(vocab_size, L, seed), batch, steps, max_norm)
        n += 1
    return n


def _check_case(candidate, case: str, model: nn.Module, batch, steps: int, max_norm) -> None:
    """The candidate's step(s) on a copy of ``model``, held to the right step's loss and weights."""

    def outcome(**how):
        def step(model, optimizer, tokens, targets, padding, max_norm=1.0):
            return _step(model, optimizer, tokens, targets, padding, max_norm, **how)

        with torch.enable_grad():  # diagnose() runs the mistakes under no_grad
            losses, weights = _run(step, copy.deepcopy(model), *batch, steps, max_norm, None)
        return torch.cat([torch.stack(losses).double(), weights.double()])

    losses, weights = _run(candidate, copy.deepcopy(model), *batch, steps, max_norm, case)
    got_losses = [_as_number(loss, case) for loss in losses]
    got = torch.cat([torch.tensor(got_losses, dtype=torch.float64), weights.double()])
    mistakes = [
        Mistake(name, lambda name=name: outcome(loss=name), why) for name, why in _LOSS_MISTAKES
    ] + [Mistake(name, lambda name=name: outcome(order=name), why) for name, why in _ORDER_MISTAKES]
    _compare(case, got, outcome(), steps, mistakes)


def _compare(case, got, expected, steps, mistakes) -> None:
    """Fail unless the losses and the weights after the step(s) match, naming the mistake."""
    if torch.allclose(got, expected, atol=1e-5, rtol=1e-4):
        return
    cause = diagnose(mistakes, got, lambda result: result, atol=1e-5, rtol=1e-4)
    got_loss, expected_loss = got[:steps], expected[:steps]
    if not torch.allclose(got_loss, expected_loss, atol=1e-5, rtol=1e-4):
        shown = ", ".join(f"{v:.4f}" for v in got_loss.tolist())
        right = ", ".join(f"{v:.4f}" for v in expected_loss.tolist())
        message = f"Case {case!r}: your step's loss is {shown}, expected {right}."
    else:
        change = (got - expected)[steps:].abs().max().item()
        message = (
            f"Case {case!r}: the loss is right, but the weights after your step differ from the "
            f"reference's (by up to {change:.3g})."
        )
    fallback = f"one step is: {_STEP}."
    raise ExerciseFailure(f"{message}\nLikely cause: {cause or fallback}")
