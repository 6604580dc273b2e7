"""The lesson-04 checker of train_step accepts every correct way to write one training step and
names each classic mistake: a forgotten zero_grad, the padding in the loss, the classes on the
wrong axis, the clipping left out or misplaced, a loss still attached to its graph."""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mha_course import reference
from mha_course.checks import check_train_step

from checker_helpers import fails_with, not_done, passes


def step_with(loss_fn, order=("zero_grad", "backward", "clip", "step"), returns="detach"):
    """A train_step whose loss is ``loss_fn(scores, targets, padding)`` and whose calls come in
    ``order``."""

    def train_step(model, optimizer, tokens, targets, padding, max_norm=1.0):
        scores = model(tokens, padding)
        loss = loss_fn(scores, targets, padding)
        for call in order:
            if call == "zero_grad":
                optimizer.zero_grad()
            elif call == "backward":
                loss.backward()
            elif call == "clip":
                nn.utils.clip_grad_norm_(model.parameters(), max_norm)
            elif call == "step":
                optimizer.step()
        return {"detach": loss.detach(), "item": loss.item(), "attached": loss, "none": None}[
            returns
        ]

    return train_step


def indexed(scores, targets, padding):
    return F.cross_entropy(scores[~padding], targets[~padding])


def ignore_index(scores, targets, padding):
    return F.cross_entropy(scores.transpose(1, 2), targets.masked_fill(padding, -100))


def masked_mean(scores, targets, padding):
    per_token = F.cross_entropy(scores.flatten(0, 1), targets.flatten(), reduction="none")
    real = (~padding).flatten().float()
    return (per_token * real).sum() / real.sum()


def module_loss(scores, targets, padding):
    return nn.CrossEntropyLoss(ignore_index=-100)(
        scores.reshape(-1, scores.size(-1)), torch.where(padding, -100, targets).reshape(-1)
    )


@pytest.mark.parametrize(
    "candidate",
    [
        reference.train_step,
        step_with(indexed),
        step_with(ignore_index, returns="item"),
        step_with(masked_mean),
        step_with(module_loss),
        # zero_grad at the end of the step (the gradients start at None) is a correct style too
        step_with(indexed, order=("backward", "clip", "step", "zero_grad")),
    ],
)
def test_train_step_accepts_correct_answers(candidate, capsys):
    passes(check_train_step, candidate, capsys)


@pytest.mark.parametrize(
    "loss_fn, order, phrase",
    [
        (
            lambda s, t, p: F.cross_entropy(s.flatten(0, 1), t.flatten()),
            None,
            "counts the padding positions",
        ),
        (
            lambda s, t, p: (
                F.cross_entropy(s.flatten(0, 1), t.flatten(), reduction="none") * (~p).flatten()
            ).mean(),
            None,
            "you divided by all B·L positions",
        ),
        (
            lambda s, t, p: F.cross_entropy(s[~p], t[~p], reduction="sum"),
            None,
            "the loss is summed",
        ),
        (
            lambda s, t, p: F.cross_entropy(s[~p].softmax(-1), t[~p]),
            None,
            "softmax before F.cross_entropy",
        ),
        (lambda s, t, p: F.nll_loss(s[~p], t[~p]), None, "F.nll_loss expects log-probabilities"),
        (
            lambda s, t, p: F.cross_entropy(s, t.masked_fill(p, -100)),
            None,
            "the classes on axis 1",
        ),
        (indexed, ("backward", "clip", "step"), "holds the first step's gradients too"),
        (indexed, ("backward", "zero_grad", "clip", "step"), "the weights did not change"),
        (indexed, ("zero_grad", "clip", "step"), "the weights did not change"),
        (indexed, ("zero_grad", "backward", "clip"), "the weights did not change"),
        (indexed, ("zero_grad", "backward", "step"), "the gradients were not clipped"),
        (indexed, ("zero_grad", "clip", "backward", "step"), "the gradients were not clipped"),
        (indexed, ("zero_grad", "backward", "step", "clip"), "the gradients were not clipped"),
    ],
)
def test_train_step_names_each_mistake(loss_fn, order, phrase):
    candidate = step_with(loss_fn) if order is None else step_with(loss_fn, order)
    fails_with(check_train_step, candidate, "Likely cause", phrase)


def test_train_step_clipping_mistakes():
    def clipped(clip):
        def train_step(model, optimizer, tokens, targets, padding, max_norm=1.0):
            loss = indexed(model(tokens, padding), targets, padding)
            optimizer.zero_grad()
            loss.backward()
            clip(model.parameters(), max_norm)
            optimizer.step()
            return loss.detach()

        return train_step

    fails_with(
        check_train_step,
        clipped(lambda params, max_norm: nn.utils.clip_grad_norm_(params, 1.0)),
        "instead of max_norm",
    )
    fails_with(check_train_step, clipped(nn.utils.clip_grad_value_), "clip_grad_value_ caps")

    def each(params, max_norm):
        for p in params:
            nn.utils.clip_grad_norm_(p, max_norm)

    fails_with(check_train_step, clipped(each), "each parameter's gradient on its own")


def test_train_step_wrong_axis_crash_and_what_it_returns(capsys):
    def flat_targets_only(model, optimizer, tokens, targets, padding, max_norm=1.0):
        loss = F.cross_entropy(model(tokens, padding), targets.flatten())
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        return loss.detach()

    fails_with(check_train_step, flat_targets_only, "your code raised", "classes on axis 1")
    fails_with(
        check_train_step,
        step_with(indexed, returns="attached"),
        "still attached",
        "detach the loss",
    )
    fails_with(check_train_step, step_with(indexed, returns="none"), "returned NoneType")

    def skeleton(model, optimizer, tokens, targets, padding, max_norm=1.0):
        raise NotImplementedError

    not_done(check_train_step, skeleton, capsys)
