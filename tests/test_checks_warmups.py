"""The lesson-00 warm-up checkers accept every correct style and name the classic mistakes."""

import pytest
import torch
from einops import einsum

from mha_course import reference
from mha_course.checks import check_pairwise_dot, check_weighted_average

from checker_helpers import fails_with, not_done, passes, skeleton

# ---------------------------------------------------------------- pairwise_dot


def dot_loop(a, b):
    """One dot product at a time, over the flattened leading axes."""
    lead = a.shape[:-2]
    a2, b2 = a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:])
    rows = [
        torch.stack(
            [torch.stack([x[i] @ y[j] for j in range(y.size(0))]) for i in range(x.size(0))]
        )
        for x, y in zip(a2, b2)
    ]
    return torch.stack(rows).reshape(*lead, a.size(-2), b.size(-2))


@pytest.mark.parametrize(
    "candidate",
    [
        reference.pairwise_dot,
        lambda a, b: a @ b.mT,
        lambda a, b: torch.matmul(a, b.transpose(-1, -2)),
        lambda a, b: einsum(a, b, "... l e, ... s e -> ... l s"),
        lambda a, b: (a.unsqueeze(-2) * b.unsqueeze(-3)).sum(-1),
        dot_loop,
    ],
)
def test_pairwise_dot_accepts_every_correct_style(candidate, capsys):
    passes(check_pairwise_dot, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda a, b: a @ b.T, "b.T reverses *every* axis"),
        (lambda a, b: b @ a.mT, "your result is transposed"),
        (lambda a, b: (a * b).sum(-1), "pairs row i of a with row i of b only"),
        (lambda a, b: a @ b, "the inner sizes do not match"),
        (lambda a, b: a @ b.t(), "b.t() works on 2-D matrices only"),
        (lambda a, b: torch.einsum("ij,kj->ik", a, b), "let '...' stand for the leading axes"),
        (lambda a, b: 2 * a @ b.mT, "each entry is the dot product"),
    ],
)
def test_pairwise_dot_names_each_mistake(candidate, phrase):
    fails_with(check_pairwise_dot, candidate, "Likely cause", phrase)


def test_pairwise_dot_a_2d_only_loop_fails_on_the_batch():
    def loop_2d(a, b):
        return torch.stack([torch.stack([torch.dot(x, y) for y in b]) for x in a])

    fails_with(check_pairwise_dot, loop_2d, "Case 'a batch", "any number of leading axes")


def test_pairwise_dot_wrong_types_and_dtypes():
    fails_with(check_pairwise_dot, lambda a, b: (a @ b.mT).tolist(), "got list", "torch.stack")
    fails_with(
        check_pairwise_dot,
        lambda a, b: (a @ b.mT).float(),
        "Case 'float64",
        "is torch.float32, expected torch.float64",
        "dtype=x.dtype",
    )


def test_pairwise_dot_not_done(capsys):
    not_done(check_pairwise_dot, skeleton, capsys)


# ---------------------------------------------------------------- weighted_average


def average_loop(weights, values):
    out = torch.zeros(*weights.shape[:-1], values.size(-1), dtype=values.dtype)
    for j in range(values.size(-2)):
        out = out + weights[..., :, j, None] * values[..., None, j, :]
    return out


@pytest.mark.parametrize(
    "candidate",
    [
        reference.weighted_average,
        lambda w, v: torch.matmul(w, v),
        lambda w, v: einsum(w, v, "... l s, ... s e -> ... l e"),
        lambda w, v: (w.unsqueeze(-1) * v.unsqueeze(-3)).sum(-2),
        lambda w, v: (w @ v) / w.sum(-1, keepdim=True),  # rows sum to 1: dividing changes nothing
        average_loop,
    ],
)
def test_weighted_average_accepts_every_correct_style(candidate, capsys):
    passes(check_weighted_average, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda w, v: w.mT @ v, "you transposed the weights"),
        (lambda w, v: v.mT @ w.mT, "is the transpose of the answer"),
        (
            lambda w, v: v.mean(-2, keepdim=True).expand(*w.shape[:-1], v.size(-1)),
            "plain mean of the values",
        ),
        (lambda w, v: v.mean(-2), "one row for all"),
        (lambda w, v: (w @ v) / v.size(-2), "do not divide by S"),
        (lambda w, v: w @ v + 1, "row i is sum over j"),
    ],
)
def test_weighted_average_names_each_mistake(candidate, phrase):
    fails_with(check_weighted_average, candidate, "Likely cause", phrase)


def test_weighted_average_wrong_shape_and_dtype():
    fails_with(
        check_weighted_average,
        lambda w, v: (w @ v).flatten(),
        "your result has shape (12)",
        "expected (3, 4)",
        "(..., L, E)",
    )
    fails_with(
        check_weighted_average,
        lambda w, v: average_loop(w, v).float(),
        "Case 'float64",
        "expected torch.float64",
    )


def test_weighted_average_not_done(capsys):
    not_done(check_weighted_average, skeleton, capsys)
