"""The lesson-05 checker of sentence embeddings accepts every correct style and names the classic
mistakes, those of its mean-pooling step included."""

import pytest
import torch
import torch.nn.functional as F

from mha_course import checks, reference
from mha_course.checks import check_embed_sentences
from mha_course.exercises import by_name
from mha_course.pretrained import mean_pool

from checker_helpers import fails_with, not_done, passes, skeleton


def test_the_checker_passes_its_reference_and_leaves_the_random_stream_alone():
    torch.manual_seed(0)
    expected = torch.rand(3)
    torch.manual_seed(0)
    assert check_embed_sentences.passes(reference.embed_sentences)
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
    pooled = mean_pool(hidden.last_hidden_state, batch["attention_mask"])
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
    return mean_pool(hidden, mask)


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
        (
            lambda m, s: F.normalize(
                (lambda h, k: (h * k[..., None]).sum(0))(*_hidden(m, s)), dim=-1
            ),
            "over the batch axis",
        ),
        (lambda m, s: F.normalize(_hidden(m, s)[0].mean(0), dim=-1), "the padding included"),
        (
            lambda m, s: (lambda h, k: F.normalize((h * k[..., None]).sum(1) / k.sum(1), dim=-1))(
                *_hidden(m, s)
            ),
            "need a length-1 axis",
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
        "batch axis, a sum",
        "batch axis, the padding in",
        "counts without their axis",
    ],
)
def test_embed_sentences_names_each_mistake(candidate, phrase):
    message = fails_with(check_embed_sentences, candidate, "Likely cause", phrase)
    assert len(message.splitlines()) <= 15


def test_embed_sentences_crashes_shapes_and_the_package_encode(capsys):
    def unbroadcast_mask(model, sentences):
        hidden, mask = _hidden(model, sentences)
        return F.normalize((hidden * mask).sum(1), dim=-1)

    fails_with(
        check_embed_sentences,
        unbroadcast_mask,
        "Case '3 sentences",
        "needs an axis for the features",
    )
    fails_with(
        check_embed_sentences,
        lambda m, s: F.normalize(_hidden(m, s)[0], dim=-1),
        "expected (3, 24)",
        "pool over the tokens",
    )
    fails_with(
        check_embed_sentences,
        lambda model, sentences: model.encode(sentences),
        "the course's version of this exercise",
    )
    not_done(check_embed_sentences, skeleton, capsys)
