"""The lesson-05 checkers (previous-token score, mean pooling) accept every correct style and name
the classic mistakes."""

import pytest
import torch

from mha_course import reference
from mha_course.checks import check_mean_pool, check_previous_token_score

from checker_helpers import fails_with, not_done, passes, skeleton

# ---------------------------------------------------------------- previous_token_score


def previous_loop(weights):
    L = weights.size(-1)
    return sum(weights[..., i, i - 1] for i in range(1, L)) / (L - 1)


@pytest.mark.parametrize(
    "candidate",
    [
        reference.previous_token_score,
        previous_loop,
        lambda w: w[..., 1:, :-1].diagonal(dim1=-2, dim2=-1).mean(-1),
        lambda w: (
            (w * torch.ones(w.size(-1), w.size(-1)).tril(-1).triu(-1)).sum((-2, -1))
            / (w.size(-1) - 1)
        ),
        lambda w: w[..., torch.arange(1, w.size(-1)), torch.arange(w.size(-1) - 1)].mean(-1),
    ],
)
def test_previous_token_score_accepts_every_correct_style(candidate, capsys):
    passes(check_previous_token_score, candidate, capsys)


def diagonal(w, offset):
    return torch.diagonal(w, offset=offset, dim1=-2, dim2=-1)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (
            lambda w: w[..., torch.arange(w.size(-1)), torch.arange(w.size(-1)) - 1].mean(-1),
            "you included query 0",
        ),
        (
            lambda w: (w * torch.eye(w.size(-1)).roll(-1, dims=-1)).sum((-2, -1)) / w.size(-1),
            "you included query 0",
        ),
        (lambda w: diagonal(w, -1).sum(-1) / w.size(-1), "you divided by L"),
        (lambda w: diagonal(w, 1).mean(-1), "rows and columns swapped"),
        (
            lambda w: w[..., torch.arange(w.size(-1) - 1), torch.arange(1, w.size(-1))].mean(-1),
            "rows and columns swapped",
        ),
        (lambda w: diagonal(w, -1).sum(-1), "you summed"),
        (lambda w: diagonal(w, 0).mean(-1), "the main diagonal"),
        (lambda w: torch.diagonal(w, offset=-1).mean(-1), "pass dim1=-2, dim2=-1"),
        (lambda w: diagonal(w, -1).mean(), "you averaged over the heads too"),
        (lambda w: diagonal(w, -1).mean(0), "you averaged over the first axis"),
    ],
)
def test_previous_token_score_names_each_mistake(candidate, phrase):
    fails_with(check_previous_token_score, candidate, "Likely cause", phrase)


def test_previous_token_score_wrong_type_and_not_done(capsys):
    fails_with(
        check_previous_token_score,
        lambda w: previous_loop(w).item(),
        "Case '3 heads",
        "cannot be converted to Scalar",
        ".item() turns a tensor of one number into a Python number",
    )
    fails_with(
        check_previous_token_score,
        lambda w: previous_loop(w).tolist(),
        "your result should be a torch.Tensor, got list",
    )
    not_done(check_previous_token_score, skeleton, capsys)


# ---------------------------------------------------------------- mean_pool


def pool_loop(hidden, attention_mask):
    rows = []
    for h, m in zip(hidden, attention_mask):
        rows.append(h[m.bool()].mean(dim=0))
    return torch.stack(rows)


@pytest.mark.parametrize(
    "candidate",
    [
        reference.mean_pool,
        pool_loop,
        lambda h, m: (h * m.unsqueeze(-1)).sum(1) / m.sum(1, keepdim=True),
        lambda h, m: torch.einsum("ble,bl->be", h, m.to(h.dtype)) / m.sum(-1)[:, None],
    ],
)
def test_mean_pool_accepts_every_correct_style(candidate, capsys):
    passes(check_mean_pool, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda h, m: h.mean(1), "the padding too"),
        (lambda h, m: (h * m[..., None]).sum(1), "did not divide by their number"),
        (lambda h, m: (h * m[..., None]).sum(1) / h.size(1), "you divided by L"),
        (lambda h, m: (h * m[..., None]).mean(1), "you divided by L"),
        (lambda h, m: (h * m[..., None]).sum(0) / m.sum(0)[:, None], "over the batch axis"),
        (lambda h, m: h.mean(0), "over the batch axis"),
        (lambda h, m: (h * m).sum(1) / m.sum(1, keepdim=True), "needs a features axis"),
        (lambda h, m: (h * m[..., None]).sum(1) / m.sum(1), "need keepdim=True"),
    ],
)
def test_mean_pool_names_each_mistake(candidate, phrase):
    fails_with(check_mean_pool, candidate, "Likely cause", phrase)


def test_mean_pool_keeps_the_dtype_of_hidden(capsys):
    fails_with(
        check_mean_pool,
        lambda h, m: reference.mean_pool(h.float(), m),
        "Case 'float64",
        "your result is torch.float32, expected torch.float64",
        "attention_mask.to(hidden.dtype)",
    )
    not_done(check_mean_pool, skeleton, capsys)
