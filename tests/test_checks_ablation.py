"""The lesson-05 head-ablation checker accepts every correct way of switching a head off, names
each classic mistake, and holds the learner to leaving the model as it was."""

import copy

import pytest
import torch

from mha_course import checks, reference
from mha_course.checks import check_head_ablation
from mha_course.checks.l05_outputs import case_model
from mha_course.exercises import by_name

from checker_helpers import fails_with, not_done, passes, skeleton


def _loop(model, score, switch_off, restore=True, sign=1.0):
    """A learner's head_ablation with the switching-off step given as ``switch_off(attn, h, D)``."""
    layers = model.encoder.layers
    H = layers[0].self_attn.num_heads
    base = score(model)
    drops = torch.zeros(len(layers), H)
    for i, layer in enumerate(layers):
        attn = layer.self_attn
        D = attn.out_proj.weight.size(1) // H
        for h in range(H):
            kept = copy.deepcopy(attn.state_dict())
            with torch.no_grad():
                switch_off(attn, h, D)
            drops[i, h] = sign * (base - score(model))
            if restore:
                attn.load_state_dict(kept)
    return drops


def zero(t):
    t.zero_()


def rows_off(projection):
    """Switch a head off in one of its input projections: zero its rows, weight and bias."""

    def off(a, h, D):
        zero(getattr(a, projection).weight[h * D : (h + 1) * D])
        zero(getattr(a, projection).bias[h * D : (h + 1) * D])

    return off


def columns(model, score, keep=torch.Tensor.clone):
    """The course's way: zero head h's columns of W^O, then put back what ``keep`` kept."""
    layers = model.encoder.layers
    H = layers[0].self_attn.num_heads
    base = score(model)
    drops = torch.zeros(len(layers), H)
    for i, layer in enumerate(layers):
        w = layer.self_attn.out_proj.weight
        D = w.size(1) // H
        for h in range(H):
            kept = keep(w[:, h * D : (h + 1) * D])
            with torch.no_grad():
                w[:, h * D : (h + 1) * D] = 0
            drops[i, h] = base - score(model)
            with torch.no_grad():
                w[:, h * D : (h + 1) * D] = kept
    return drops


def values_and_bias(model, score):
    """Zero the head's values, weight and bias: its output is then exactly zero too."""
    return _loop(model, score, rows_off("v_proj"))


def pre_hook(model, score):
    """Zero the head's slice of W^O's input with a forward pre-hook, removed after each score."""
    layers = model.encoder.layers
    H = layers[0].self_attn.num_heads
    base = score(model)
    drops = torch.zeros(len(layers), H, dtype=torch.float64)
    for i, layer in enumerate(layers):
        E = layer.self_attn.out_proj.in_features
        for h in range(H):
            D = E // H

            def silence(module, inputs, h=h, D=D):
                x = inputs[0].clone()
                x[..., h * D : (h + 1) * D] = 0
                return (x,)

            handle = layer.self_attn.out_proj.register_forward_pre_hook(silence)
            try:
                drops[i, h] = base - score(model)
            finally:
                handle.remove()
    return drops


def fresh_copies(model, score):
    """Switch the head off in a copy of the model each time; the original is never touched."""
    layers = model.encoder.layers
    H = layers[0].self_attn.num_heads
    base = score(model)
    rows = []
    for i in range(len(layers)):
        row = []
        for h in range(H):
            other = copy.deepcopy(model)
            w = other.encoder.layers[i].self_attn.out_proj.weight
            D = w.size(1) // H
            with torch.no_grad():
                w[:, h * D : (h + 1) * D].zero_()
            row.append(base - score(other))
        rows.append(row)
    return torch.tensor(rows)


@pytest.mark.parametrize(
    "candidate",
    [reference.head_ablation, columns, values_and_bias, pre_hook, fresh_copies],
    ids=["reference", "columns", "values and bias", "pre-hook", "fresh copies"],
)
def test_head_ablation_accepts_every_correct_way(candidate, capsys):
    passes(check_head_ablation, candidate, capsys)


def test_head_ablation_is_registered_and_leaves_the_random_stream_alone():
    exercise = by_name("head_ablation")
    assert (exercise.lesson, exercise.check, exercise.reference) == (
        "05",
        checks.check_head_ablation,
        reference.head_ablation,
    )
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert check_head_ablation.passes(reference.head_ablation)
    torch.testing.assert_close(torch.rand(3), expected)


MISTAKES = [
    (
        "rows of W^O",
        lambda m, s: _loop(m, s, lambda a, h, D: zero(a.out_proj.weight[h * D : (h + 1) * D])),
        "you zeroed rows of out_proj.weight",
    ),
    (
        "the bias too",
        lambda m, s: _loop(
            m,
            s,
            lambda a, h, D: (
                zero(a.out_proj.weight[:, h * D : (h + 1) * D]),
                zero(a.out_proj.bias),
            ),
        ),
        "you zeroed out_proj.bias too",
    ),
    (
        "the bias slice too",
        lambda m, s: _loop(
            m,
            s,
            lambda a, h, D: (
                zero(a.out_proj.weight[:, h * D : (h + 1) * D]),
                zero(a.out_proj.bias[h * D : (h + 1) * D]),
            ),
        ),
        "you zeroed part of out_proj.bias too",
    ),
    (
        "never restored",
        lambda m, s: _loop(
            m, s, lambda a, h, D: zero(a.out_proj.weight[:, h * D : (h + 1) * D]), restore=False
        ),
        "the drops add up along each row",
    ),
    ("queries and their bias", lambda m, s: _loop(m, s, rows_off("q_proj")), "the head's queries"),
    (
        "query weights",
        lambda m, s: _loop(m, s, lambda a, h, D: zero(a.q_proj.weight[h * D : (h + 1) * D])),
        "you zeroed the head's query weights",
    ),
    ("keys and their bias", lambda m, s: _loop(m, s, rows_off("k_proj")), "queries (or keys)"),
    (
        "value weights only",
        lambda m, s: _loop(m, s, lambda a, h, D: zero(a.v_proj.weight[h * D : (h + 1) * D])),
        "but not their bias",
    ),
    (
        "strided",
        lambda m, s: _loop(
            m, s, lambda a, h, D: zero(a.out_proj.weight[:, h :: a.out_proj.weight.size(1) // D])
        ),
        "every H-th feature",
    ),
    (
        "sign",
        lambda m, s: _loop(
            m, s, lambda a, h, D: zero(a.out_proj.weight[:, h * D : (h + 1) * D]), sign=-1.0
        ),
        "the wrong sign",
    ),
]


@pytest.mark.parametrize(
    "candidate, phrase", [m[1:] for m in MISTAKES], ids=[m[0] for m in MISTAKES]
)
def test_head_ablation_names_each_mistake(candidate, phrase):
    message = fails_with(check_head_ablation, candidate, "Likely cause", phrase)
    assert len(message.splitlines()) <= 15


def test_head_ablation_restored_from_a_view_is_named():
    def view_kept(model, score):
        return columns(model, score, keep=lambda view: view)  # zeroed with the weight

    fails_with(check_head_ablation, view_kept, "the drops add up", ".clone()")


def test_head_ablation_scores_instead_of_drops_and_the_shapes():
    def scores(model, score):
        return -columns(model, score) + score(model)

    fails_with(check_head_ablation, scores, "you returned the scores")
    fails_with(check_head_ablation, lambda m, s: columns(m, s).T, "layers and heads swapped")
    fails_with(check_head_ablation, lambda m, s: columns(m, s).tolist(), "got list")
    fails_with(
        check_head_ablation, lambda m, s: columns(m, s).long(), "an integer tensor cuts them off"
    )


def test_head_ablation_must_leave_the_model_as_it_was():
    def forgets_the_last(model, score):
        drops = columns(model, score)
        w = model.encoder.layers[-1].self_attn.out_proj.weight
        with torch.no_grad():
            w[:, :2] = 0  # right drops, but a head left switched off
        return drops

    fails_with(
        check_head_ablation, forgets_the_last, "your drops are right", "out_proj.weight", ".clone()"
    )

    def hook_left(model, score):
        drops = pre_hook(model, score)
        model.encoder.layers[0].self_attn.out_proj.register_forward_pre_hook(lambda m, i: None)
        return drops

    fails_with(check_head_ablation, hook_left, "still has hooks", "a remove method")


def test_head_ablation_crashes_get_a_likely_cause(capsys):
    def no_grad_forgotten(model, score):
        w = model.encoder.layers[0].self_attn.out_proj.weight
        w[:, :4] = 0
        return columns(model, score)

    fails_with(check_head_ablation, no_grad_forgotten, "torch.no_grad()")
    fails_with(check_head_ablation, lambda model, score: score(), "score takes the model")
    not_done(check_head_ablation, skeleton, capsys)


def test_the_checker_model_is_fresh_each_time():
    a, b = case_model(), case_model()
    assert a is not b
    with torch.no_grad():
        a.encoder.layers[0].self_attn.out_proj.weight.zero_()
    assert b.encoder.layers[0].self_attn.out_proj.weight.abs().sum() > 0
