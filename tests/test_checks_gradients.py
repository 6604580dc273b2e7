"""The lesson-03 checker of gradient_norms (the gradient that reaches each block of a stack) accepts
every correct style and names the classic mistakes."""

import pytest
import torch
import torch.nn.functional as F

from mha_course import reference
from mha_course.checks import check_gradient_norms
from mha_course.exercises import by_name

from checker_helpers import fails_with, not_done, passes, skeleton


def run_retaining(blocks, x):
    """The stack run on a leaf copy of x, each block's input kept with retain_grad()."""
    hidden = x.detach().requires_grad_()
    inputs = []
    for block in blocks:
        hidden.retain_grad()
        inputs.append(hidden)
        hidden = block(hidden)
    return inputs, hidden


def with_retain_grad(blocks, x, target):
    inputs, output = run_retaining(blocks, x)
    F.mse_loss(output, target).backward()
    return [h.grad.norm().item() for h in inputs]


def with_autograd_grad_on_x(blocks, x, target):
    x.requires_grad_()  # the caller's x itself
    inputs, hidden = [], x
    for block in blocks:
        inputs.append(hidden)
        hidden = block(hidden)
    grads = torch.autograd.grad(F.mse_loss(hidden, target), inputs)
    return torch.stack([g.norm() for g in grads])  # a tensor of numbers is fine too


def with_a_manual_loss(blocks, x, target):
    hidden = x.detach().clone().requires_grad_(True)
    inputs = []
    for block in blocks:
        hidden.retain_grad()
        inputs.append(hidden)
        hidden = block(hidden)
    ((hidden - target) ** 2).mean().backward()
    return [float(torch.linalg.vector_norm(h.grad)) for h in inputs]


@pytest.mark.parametrize(
    "candidate",
    [reference.gradient_norms, with_retain_grad, with_autograd_grad_on_x, with_a_manual_loss],
)
def test_gradient_norms_accepts_correct_answers(candidate, capsys):
    passes(check_gradient_norms, candidate, capsys)


def test_the_worked_example_holds():
    blocks = [lambda h: 2 * h, lambda h: 3 * h]
    assert reference.gradient_norms(blocks, torch.ones(1, 1, 1), torch.zeros(1, 1, 1)) == [72, 36]


def stack(measure, loss=lambda out, target: F.mse_loss(out, target), start=lambda x: x):
    """A learner's gradient_norms: retain_grad on every block's input (and output), then
    ``measure(inputs, outputs, blocks)``."""

    def gradient_norms(blocks, x, target):
        hidden = start(x)
        inputs, outputs = [], []
        for block in blocks:
            if hidden.requires_grad:
                hidden.retain_grad()
            inputs.append(hidden)
            hidden = block(hidden)
            hidden.retain_grad()
            outputs.append(hidden)
        loss(hidden, target).backward()
        return measure(inputs, outputs, blocks)

    return gradient_norms


LEAF = lambda x: x.detach().requires_grad_()  # noqa: E731


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (
            stack(lambda i, o, b: [h.grad.norm().item() for h in o], start=LEAF),
            "you measured the gradient at each block's output",
        ),
        (
            stack(lambda i, o, b: [h.grad.norm().item() for h in reversed(i)], start=LEAF),
            "your list is in reverse order",
        ),
        (
            stack(
                lambda i, o, b: [h.grad.norm().item() for h in i],
                loss=lambda out, t: ((out - t) ** 2).sum(),
                start=LEAF,
            ),
            "your loss is the sum of the squared errors",
        ),
        (
            stack(lambda i, o, b: [(h.grad**2).sum().item() for h in i], start=LEAF),
            "you gave the squared norm",
        ),
        (
            stack(lambda i, o, b: [h.grad.abs().mean().item() for h in i], start=LEAF),
            "the mean absolute value of each gradient",
        ),
        (
            stack(lambda i, o, b: [h.grad.norm().item() for h in i + o[-1:]], start=LEAF),
            "you also measured the gradient at the last block's output",
        ),
        (
            stack(lambda i, o, b: [h.grad.norm().item() for h in i]),
            "x does not require a gradient",
        ),
    ],
)
def test_gradient_norms_names_each_mistake(candidate, phrase):
    fails_with(check_gradient_norms, candidate, "Likely cause", phrase)


def no_retain_grad(blocks, x, target):
    hidden = x.detach().requires_grad_()
    inputs = []
    for block in blocks:
        inputs.append(hidden)
        hidden = block(hidden)
    F.mse_loss(hidden, target).backward()
    return [h.grad.norm().item() for h in inputs]


def no_grad_anywhere(blocks, x, target):
    inputs, hidden = [], x
    for block in blocks:
        inputs.append(hidden)
        hidden = block(hidden)
    return [g.norm().item() for g in torch.autograd.grad(F.mse_loss(hidden, target), inputs)]


def parameter_gradients(blocks, x, target):
    hidden = x.detach().requires_grad_()
    for block in blocks:
        hidden = block(hidden)
    F.mse_loss(hidden, target).backward()
    return [torch.cat([p.grad.flatten() for p in b.parameters()]).norm().item() for b in blocks]


def parameter_gradients_of_modules(blocks, x, target):
    if not all(isinstance(b, torch.nn.Module) for b in blocks):
        return reference.gradient_norms(blocks, x, target)  # right where it cannot be wrong
    return parameter_gradients(blocks, x, target)


def backward_twice(blocks, x, target):
    inputs, output = run_retaining(blocks, x)
    loss = F.mse_loss(output, target)
    loss.backward()
    loss.backward()
    return [h.grad.norm().item() for h in inputs]


def test_gradient_norms_explains_crashes_and_wrong_results(capsys):
    fails_with(check_gradient_norms, no_retain_grad, "keeps no .grad", ".retain_grad()")
    fails_with(check_gradient_norms, no_grad_anywhere, "must require grad")
    fails_with(check_gradient_norms, parameter_gradients, "with no parameters")
    fails_with(
        check_gradient_norms,
        parameter_gradients_of_modules,
        "these are the gradients of each block's parameters",
    )
    fails_with(check_gradient_norms, backward_twice, "backward() ran twice")
    fails_with(
        check_gradient_norms,
        lambda b, x, t: with_retain_grad(b, x, t)[0],
        "should be a list of 2 floats, got float",
    )
    fails_with(
        check_gradient_norms,
        stack(lambda i, o, b: [h.grad.norm(dim=-1) for h in i], start=LEAF),
        "an item of your list is a tensor of shape (2, 3); each is one number",
    )
    not_done(check_gradient_norms, skeleton, capsys)


def test_gradient_norms_is_registered_and_leaves_the_random_stream_alone():
    exercise = by_name("gradient_norms")
    assert (exercise.lesson, exercise.check) == ("03", check_gradient_norms)
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert check_gradient_norms.passes(with_retain_grad)
    torch.testing.assert_close(torch.rand(3), expected)
