"""The lesson-04 checkers of FeedForward and EncoderStack accept every correct style and name the
classic mistakes, the structural ones (shared layers, a missing super().__init__()) included."""

import copy
import functools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from mha_course import reference
from mha_course.checks import check_encoder_stack, check_feed_forward
from mha_course.exercises import EXERCISES

from checker_helpers import fails_with, not_done, passes

# ---------------------------------------------------------------- FeedForward


def feed_forward(forward):
    """A FeedForward with the skeleton's __init__ and the given forward(self, x)."""

    class FeedForward(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.linear1 = nn.Linear(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model)

    FeedForward.forward = forward
    return FeedForward


class FeedForwardFunctional(nn.Module):
    """Another correct style: F.linear on the Linears' weights, nn.ReLU as a module."""

    def __init__(self, d_model, d_ff):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.act = nn.ReLU()
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        h = self.act(F.linear(x, self.linear1.weight, self.linear1.bias))
        return F.linear(h, self.linear2.weight, self.linear2.bias)


@pytest.mark.parametrize(
    "candidate",
    [
        reference.FeedForward,
        FeedForwardFunctional,
        feed_forward(lambda self, x: self.linear2(self.linear1(x).clamp(min=0))),
    ],
)
def test_feed_forward_accepts_correct_answers(candidate, capsys):
    passes(check_feed_forward, candidate, capsys)


@pytest.mark.parametrize(
    "forward, phrase",
    [
        (lambda self, x: self.linear2(self.linear1(x)), "there is no ReLU"),
        (lambda self, x: F.relu(self.linear2(F.relu(self.linear1(x)))), "ReLU after linear2"),
        (lambda self, x: self.linear2(F.gelu(self.linear1(x))), "the lesson's layer"),
        (lambda self, x: self.linear1(F.relu(self.linear2(x))), "run in the wrong order"),
        (lambda self, x: self.linear2(self.linear1(F.relu(x))), "not on the input"),
        (lambda self, x: x + self.linear2(F.relu(self.linear1(x))), "no residual of its own"),
        (lambda self, x: F.relu(self.linear1(x)), "apply linear2 too"),
    ],
)
def test_feed_forward_names_each_mistake(forward, phrase):
    fails_with(check_feed_forward, feed_forward(forward), "Likely cause", phrase)


def test_feed_forward_wrong_sizes_and_missing_parts():
    class Swapped(reference.FeedForward):
        def __init__(self, d_model, d_ff):
            super().__init__(d_model, d_ff)
            self.linear1, self.linear2 = nn.Linear(d_ff, d_model), nn.Linear(d_model, d_ff)

    fails_with(
        check_feed_forward,
        Swapped,
        "self.linear1.weight has shape (8, 32), expected (32, 8)",
        "nn.Linear(d_model, d_ff) = nn.Linear(8, 32)",
    )

    class Named(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            self.fc1, self.fc2 = nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)

    fails_with(check_feed_forward, Named, "has no attribute `linear1`", "self.linear1 = nn.Linear")

    class NoBias(reference.FeedForward):
        def __init__(self, d_model, d_ff):
            super().__init__(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model, bias=False)

    fails_with(check_feed_forward, NoBias, "self.linear2 has no bias")


def test_feed_forward_missing_super_init_and_other_structure(capsys):
    class NoSuper(nn.Module):
        def __init__(self, d_model, d_ff):
            self.linear1 = nn.Linear(d_model, d_ff)
            self.linear2 = nn.Linear(d_ff, d_model)

    fails_with(
        check_feed_forward,
        NoSuper,
        "cannot assign module before Module.__init__() call",
        "must call super().__init__() first",
    )

    class NotAModule:
        def __init__(self, d_model, d_ff):
            self.linear1 = nn.Linear(d_model, d_ff)

    fails_with(check_feed_forward, NotAModule, "make the class an nn.Module")
    fails_with(check_feed_forward, reference.FeedForward(4, 8), "Pass the class itself")

    class Skeleton(nn.Module):
        def __init__(self, d_model, d_ff):
            super().__init__()
            raise NotImplementedError

    not_done(check_feed_forward, Skeleton, capsys)


def test_feed_forward_leaves_the_random_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    check_feed_forward(reference.FeedForward)
    torch.testing.assert_close(torch.rand(3), expected)


# ---------------------------------------------------------------- EncoderStack


def encoder_stack(make_layers, forward=None):
    """An EncoderStack whose __init__ sets self.layers = make_layers(layer, num_layers)."""

    class EncoderStack(reference.EncoderStack):
        def __init__(self, layer, num_layers):
            nn.Module.__init__(self)
            self.layers = make_layers(layer, num_layers)

    if forward is not None:
        EncoderStack.forward = forward
    return EncoderStack


def deep_copies(layer, n):
    return nn.ModuleList(copy.deepcopy(layer) for _ in range(n))


class StackWithReduce(nn.Module):
    """Another correct style: functools.reduce over the layers, and copies made in a loop."""

    def __init__(self, layer, num_layers):
        super().__init__()
        self.layers = nn.ModuleList()
        for _ in range(num_layers):
            self.layers.append(copy.deepcopy(layer))

    def forward(self, x, attn_mask=None):
        return functools.reduce(lambda h, layer: layer(h, attn_mask), self.layers, x)


def while_forward(self, x, attn_mask=None):
    i = 0
    while i < len(self.layers):
        x = self.layers[i](x, attn_mask=attn_mask)
        i += 1
    return x


@pytest.mark.parametrize(
    "candidate",
    [reference.EncoderStack, StackWithReduce, encoder_stack(deep_copies, while_forward)],
)
def test_encoder_stack_accepts_correct_answers(candidate, capsys):
    passes(check_encoder_stack, candidate, capsys)


def run(layers, x, masks):
    for layer, mask in zip(layers, masks):
        x = layer(x, attn_mask=mask)
    return x


@pytest.mark.parametrize(
    "forward, phrase",
    [
        (lambda self, x, attn_mask=None: run(self.layers, x, [attn_mask] * 9), None),
        (
            lambda self, x, attn_mask=None: [layer(x, attn_mask) for layer in self.layers][-1],
            "every layer must read the previous one's output",
        ),
        (
            lambda self, x, attn_mask=None: run(self.layers[::-1], x, [attn_mask] * 9),
            "reverse order",
        ),
        (
            lambda self, x, attn_mask=None: run(self.layers, x, [None] * 9),
            "the mask is not passed on",
        ),
        (
            lambda self, x, attn_mask=None: run(self.layers, x, [attn_mask] + [None] * 9),
            "only the first layer gets the mask",
        ),
        (
            lambda self, x, attn_mask=None: run(
                self.layers, x, [None if attn_mask is None else ~attn_mask] * 9
            ),
            "the mask is inverted",
        ),
        (lambda self, x, attn_mask=None: self.layers[0](x, attn_mask), "only the first layer runs"),
        (
            lambda self, x, attn_mask=None: run(
                [self.layers[0]] * len(self.layers), x, [attn_mask] * 9
            ),
            "you ran the first layer num_layers times",
        ),
    ],
)
def test_encoder_stack_names_each_mistake_in_forward(forward, phrase, capsys):
    candidate = encoder_stack(deep_copies, forward)
    if phrase is None:  # run() itself, used rightly, passes
        passes(check_encoder_stack, candidate, capsys)
    else:
        fails_with(check_encoder_stack, candidate, "Likely cause", phrase)


def test_encoder_stack_running_the_given_layer_is_named():
    class KeepsTheLayer(reference.EncoderStack):
        def __init__(self, layer, num_layers):
            super().__init__(layer, num_layers)
            self.layer = layer

        def forward(self, x, attn_mask=None):
            for _ in self.layers:
                x = self.layer(x, attn_mask=attn_mask)
            return x

    fails_with(check_encoder_stack, KeepsTheLayer, "you ran the layer you were given")


@pytest.mark.parametrize(
    "make_layers, phrases",
    [
        (
            lambda layer, n: nn.ModuleList([layer] * n),
            ["are one and the same layer", "[layer] * num_layers", "TransformerEncoder"],
        ),
        (
            lambda layer, n: nn.ModuleList([copy.deepcopy(layer)] * n),
            ["are one and the same layer"],
        ),
        (
            lambda layer, n: nn.ModuleList(copy.copy(layer) for _ in range(n)),
            ["shares its weights with the layer you were given", "copy.deepcopy(layer)"],
        ),
        (
            lambda layer, n: nn.ModuleList([layer] + [copy.deepcopy(layer) for _ in range(n - 1)]),
            ["self.layers[0] is the layer you were given itself"],
        ),
        (
            lambda layer, n: [copy.deepcopy(layer) for _ in range(n)],
            ["is a Python list", "nn.ModuleList"],
        ),
        (lambda layer, n: deep_copies(layer, n - 1), ["holds 2 layers, expected num_layers = 3"]),
        (
            lambda layer, n: nn.ModuleList(nn.Linear(8, 8) for _ in range(n)),
            ["self.layers[0] is a Linear, expected a copy of the EncoderLayer"],
        ),
        (lambda layer, n: nn.ModuleDict({"0": layer}), ["self.layers is a ModuleDict"]),
    ],
)
def test_encoder_stack_names_each_structural_mistake(make_layers, phrases):
    fails_with(check_encoder_stack, encoder_stack(make_layers), *phrases)


def test_encoder_stack_fresh_weights_and_no_layers_are_named():
    def fresh(layer, n):
        layers = deep_copies(layer, n)
        for p in layers[1].parameters():
            nn.init.normal_(p)
        return layers

    fails_with(check_encoder_stack, encoder_stack(fresh), "self.layers[1] does not start with")

    class NoLayers(nn.Module):
        def __init__(self, layer, num_layers):
            super().__init__()
            self.blocks = deep_copies(layer, num_layers)

    fails_with(check_encoder_stack, NoLayers, "has no attribute `layers`")


def test_encoder_stack_missing_super_init_tuple_and_not_done(capsys):
    class NoSuper(nn.Module):
        def __init__(self, layer, num_layers):
            self.layers = deep_copies(layer, num_layers)

    fails_with(check_encoder_stack, NoSuper, "must call super().__init__() first")

    class ReturnsTuple(reference.EncoderStack):
        def forward(self, x, attn_mask=None):
            return super().forward(x, attn_mask), None

    fails_with(check_encoder_stack, ReturnsTuple, "returned a tuple of 2")

    class Skeleton(nn.Module):
        def __init__(self, layer, num_layers):
            super().__init__()
            raise NotImplementedError

    not_done(check_encoder_stack, Skeleton, capsys)


@pytest.mark.parametrize(
    "check, name",
    [(check_feed_forward, "FeedForward"), (check_encoder_stack, "EncoderStack")],
)
def test_checkers_of_the_dropped_exercises_still_work(check, name):
    """Lesson 04 now asks for the FFN inside EncoderLayer and the stack inside EncoderModel; the
    two checkers stay public, pass their references and leave the random stream alone."""
    assert name not in {e.name for e in EXERCISES}
    assert check.exercise == name
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert check.passes(getattr(reference, name))
    torch.testing.assert_close(torch.rand(3), expected)
