"""The lesson-05 checkers (previous-token score, mean pooling, sentence embeddings) accept every
correct style and name the classic mistakes. The first two are no longer exercises of the lesson;
their checkers stay, working and importable."""

import pytest
import torch
import torch.nn.functional as F

from mha_course import checks, reference
from mha_course.checks import check_embed_sentences, check_mean_pool, check_previous_token_score
from mha_course.exercises import by_name

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


@pytest.mark.parametrize(
    "check, answer",
    [
        (check_previous_token_score, reference.previous_token_score),
        (check_mean_pool, reference.mean_pool),
        (check_embed_sentences, reference.embed_sentences),
    ],
)
def test_the_checkers_pass_their_reference_and_leave_the_random_stream_alone(check, answer):
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert check.passes(answer)
    torch.testing.assert_close(torch.rand(3), expected)


def test_only_embed_sentences_is_an_exercise_of_the_lesson():
    exercise = by_name("embed_sentences")
    assert (exercise.lesson, exercise.check, exercise.reference) == (
        "05",
        checks.check_embed_sentences,
        reference.embed_sentences,
    )
    for dropped in ("previous_token_score", "mean_pool"):
        with pytest.raises(ValueError):
            by_name(dropped)


# ---------------------------------------------------------------- embed_sentences


def embed_one_by_one(model, sentences):
    """No padding at all: each sentence alone."""
    rows = []
    for sentence in sentences:
        batch = model.tokenize([sentence])
        with torch.no_grad():
            rows.append(model(**batch).last_hidden_state[0].mean(dim=0))
    return F.normalize(torch.stack(rows), dim=-1)


def embed_with_sums(model, sentences):
    """The sum of the real tokens, normalised: the count cancels."""
    batch = model.tokenize(sentences)
    with torch.no_grad():
        hidden = model(**batch).last_hidden_state
    summed = torch.einsum("nle,nl->ne", hidden, batch["attention_mask"].to(hidden.dtype))
    return summed / summed.norm(dim=-1, keepdim=True)


def embed_with_grad(model, sentences):
    """Without torch.no_grad(): the numbers are right."""
    batch = model.tokenize(sentences)
    hidden = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"])
    pooled = reference.mean_pool(hidden.last_hidden_state, batch["attention_mask"])
    return F.normalize(pooled, dim=1)


@pytest.mark.parametrize(
    "candidate",
    [reference.embed_sentences, embed_one_by_one, embed_with_sums, embed_with_grad],
    ids=["reference", "one by one", "sums", "with grad"],
)
def test_embed_sentences_accepts_every_correct_style(candidate, capsys):
    passes(check_embed_sentences, candidate, capsys)


def _hidden(model, sentences, with_mask=True):
    batch = model.tokenize(sentences)
    mask = batch["attention_mask"] if with_mask else None
    with torch.no_grad():
        hidden = model(batch["input_ids"], attention_mask=mask).last_hidden_state
    return hidden, batch["attention_mask"]


def _mean(hidden, mask):
    return reference.mean_pool(hidden, mask)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda m, s: F.normalize(_hidden(m, s)[0].mean(1), dim=-1), "the padding too"),
        (lambda m, s: _mean(*_hidden(m, s)), "not of length 1"),
        (
            lambda m, s: (lambda h, k: (h * k[..., None]).sum(1))(*_hidden(m, s)),
            "sums of the real tokens",
        ),
        (lambda m, s: F.normalize(_mean(*_hidden(m, s)), dim=0), "over the batch axis"),
        (lambda m, s: F.normalize(_hidden(m, s)[0][:, 0], dim=-1), "[CLS]"),
        (lambda m, s: F.normalize(_hidden(m, s)[0].max(1).values, dim=-1), "largest value"),
        (
            lambda m, s: F.normalize(_mean(*_hidden(m, s, with_mask=False)), dim=-1),
            "ran without the attention_mask",
        ),
        (
            lambda m, s: F.normalize(_hidden(m, s, with_mask=False)[0].mean(1), dim=-1),
            "used nowhere",
        ),
    ],
    ids=[
        "padding",
        "not normalised",
        "sums",
        "batch axis",
        "cls",
        "max",
        "no mask",
        "no mask at all",
    ],
)
def test_embed_sentences_names_each_mistake(candidate, phrase):
    message = fails_with(check_embed_sentences, candidate, "Likely cause", phrase)
    assert len(message.splitlines()) <= 15


def test_embed_sentences_crashes_shapes_and_the_package_encode(capsys):
    def unbroadcast_mask(model, sentences):
        hidden, mask = _hidden(model, sentences)
        return F.normalize((hidden * mask).sum(1), dim=-1)

    fails_with(check_embed_sentences, unbroadcast_mask, "Case '3 sentences", "pool over the tokens")
    fails_with(
        check_embed_sentences,
        lambda m, s: F.normalize(_hidden(m, s)[0], dim=-1),
        "expected (3, 24)",
        "pool over the tokens, dim=1",
    )
    fails_with(
        check_embed_sentences,
        lambda model, sentences: model.encode(sentences),
        "the course's version of this exercise",
    )
    not_done(check_embed_sentences, skeleton, capsys)
