"""Checkers for lesson 05's readings of a pretrained encoder's outputs: how much a head attends to
the previous token, a sentence's embedding as the mean of its real tokens, and the whole step from
sentences to normalised embeddings (``embed_sentences``)."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F

from .. import reference
from ._core import Mistake, checker
from ._steps import check_cases, randn

__all__ = ["check_previous_token_score", "check_mean_pool", "check_embed_sentences"]


# ---------------------------------------------------------------- previous_token_score

_BELOW = "torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)"


def _diagonal(w: torch.Tensor, offset: int) -> torch.Tensor:
    return torch.diagonal(w, offset=offset, dim1=-2, dim2=-1)


def _wrapped(w: torch.Tensor) -> torch.Tensor:
    """w[..., i, i - 1] for every i, query 0 included: index -1 wraps round to the last key."""
    i = torch.arange(w.size(-1))
    return w[..., i, i - 1].mean(-1)


_PREVIOUS_MISTAKES = [
    Mistake(
        "query 0 included",
        _wrapped,
        "you included query 0, whose 'previous token' wrapped round to the last key (index -1, "
        "or torch.roll). Only queries 1 … L−1 have one: weights[..., i, i − 1] for i ≥ 1, "
        f"{_BELOW}.",
    ),
    Mistake(
        "divided by L",
        lambda w: _diagonal(w, -1).sum(-1) / w.size(-1),
        "you divided by L, but only L − 1 queries have a previous token; average over those: "
        f"{_BELOW}.",
    ),
    Mistake(
        "next token, or rows and columns swapped",
        lambda w: _diagonal(w, 1).mean(-1),
        "you read the entries just above the diagonal: weights[..., i, i + 1] (the next token), "
        "or weights[..., i − 1, i] with rows and columns swapped. Rows are queries and columns "
        f"keys, so query i's previous token is weights[..., i, i − 1]: {_BELOW}.",
    ),
    Mistake(
        "sum",
        lambda w: _diagonal(w, -1).sum(-1),
        f"you summed; the score is the average over the L − 1 queries: {_BELOW}.",
    ),
    Mistake(
        "the diagonal",
        lambda w: _diagonal(w, 0).mean(-1),
        "that is the main diagonal, each query's attention to itself; the previous token is one "
        f"column to the left, offset=-1: {_BELOW}.",
    ),
    Mistake(
        "diagonal of the first two axes",
        lambda w: torch.diagonal(w, offset=-1).mean(-1),
        "torch.diagonal takes the first two axes unless told otherwise: pass dim1=-2, dim2=-1 so "
        f"that it runs over the queries and the keys: {_BELOW}.",
    ),
    Mistake(
        "mean over everything",
        lambda w: _diagonal(w, -1).mean(),
        "you averaged over the heads too; keep one score per head and average over the queries "
        f"only, dim=-1: {_BELOW}.",
    ),
    Mistake(
        ".item()",
        lambda w: _diagonal(w, -1).mean(-1).item(),
        ".item() turns a tensor of one number into a Python number, and fails on more: keep the "
        f"tensor, one score per head: {_BELOW}.",
    ),
    Mistake(
        "mean over the first axis",
        lambda w: _diagonal(w, -1).mean(0),
        "you averaged over the first axis (the heads or the batch); average over the queries, "
        f"the last axis of the diagonal: {_BELOW}.",
    ),
]


def _weights(g, *shape, dtype=torch.float32):
    """Random attention weights: each row (a query) sums to 1 over the keys."""
    e = (2 * randn(g, *shape, dtype=dtype)).exp()
    return e / e.sum(dim=-1, keepdim=True)


def _previous_cases():
    g = torch.Generator().manual_seed(50)
    yield "3 heads: weights (3, 6, 6) -> (3,)", _weights(g, 3, 6, 6)
    yield "one head: weights (5, 5) -> a 0-dim tensor", _weights(g, 5, 5)
    yield "a batch of 4 heads: weights (2, 4, 5, 5) -> (2, 4)", _weights(g, 2, 4, 5, 5)
    perfect = torch.eye(4).roll(-1, dims=-1)  # query i on key i - 1 ...
    perfect[0] = torch.tensor(
        [1.0, 0.0, 0.0, 0.0]
    )  # ... and query 0, with no previous token, on itself
    yield "a perfect previous-token head (4, 4): the score is 1", perfect
    yield "L = 2: weights (3, 2, 2), one query has a previous token", _weights(g, 3, 2, 2)
    yield "float64: weights (2, 7, 7)", _weights(g, 2, 7, 7, dtype=torch.float64)


@checker(
    "previous_token_score",
    "Replace `raise NotImplementedError` with the average of weights[..., i, i − 1] over i = 1 … L−1.",
)
def check_previous_token_score(candidate) -> int:
    """Check ``candidate(weights (..., L, L)) -> (...)``: the mean of weights[..., i, i − 1]."""
    return check_cases(
        candidate,
        _previous_cases(),
        reference.previous_token_score,
        _PREVIOUS_MISTAKES,
        what="the scores",
        crash_hint="take L from the weights (L = weights.size(-1)); the entries "
        f"weights[..., i, i − 1] are the diagonal below the main one: {_BELOW}.",
        shape_hint="one score per head: the weights' leading axes, weights.shape[:-2]; "
        f"average over the queries only: {_BELOW}.",
        fallback_cause=f"the score is the mean of weights[..., i, i − 1] for i = 1 … L−1: {_BELOW}.",
    )


# ---------------------------------------------------------------- mean_pool

_POOL = "(hidden * m).sum(dim=1) / m.sum(dim=1), with m = attention_mask[..., None]"


def _masked_sum(hidden, mask):
    return (hidden * mask[..., None]).sum(1)


_POOL_MISTAKES = [
    Mistake(
        "every position",
        lambda h, m: h.mean(1),
        f"you averaged over every position, the padding too; average the real tokens only: {_POOL}.",
    ),
    Mistake(
        "sum, not divided",
        _masked_sum,
        "you summed the real tokens but did not divide by their number, "
        "attention_mask.sum(dim=1, keepdim=True).",
    ),
    Mistake(
        "divided by L",
        lambda h, m: _masked_sum(h, m) / h.size(1),
        "you divided by L, the padded length; divide by each sentence's number of real tokens, "
        "attention_mask.sum(dim=1, keepdim=True).",
    ),
    Mistake(
        "over the batch axis",
        lambda h, m: (h * m[..., None]).sum(0) / m.sum(0)[:, None],
        "you averaged over the batch axis (dim=0); a sentence's vector is the mean over its "
        f"tokens, dim=1: {_POOL}.",
    ),
    Mistake(
        "over the batch axis, unmasked",
        lambda h, m: h.mean(0),
        "you averaged over the batch axis (dim=0); a sentence's vector is the mean over its "
        f"real tokens, dim=1: {_POOL}.",
    ),
    Mistake(
        "mask not broadcast",
        lambda h, m: (h * m).sum(1),
        "the mask (B, L) needs a features axis to multiply hidden (B, L, E): "
        "attention_mask[..., None] (or .unsqueeze(-1)) is (B, L, 1).",
    ),
    Mistake(
        "counts without keepdim",
        lambda h, m: _masked_sum(h, m) / m.sum(1),
        "the counts m.sum(dim=1) are (B,); they need keepdim=True (or [:, None]) to divide "
        "the sums (B, E) row by row.",
    ),
]


def _pool_cases():
    g = torch.Generator().manual_seed(51)

    def hidden(B, L, E, mask, dtype=torch.float32):
        """Random states, with large values at the padding, so that counting it shows."""
        h = randn(g, B, L, E, dtype=dtype)
        return torch.where(mask[..., None].bool(), h, 10 + h)

    mask = torch.tensor([[1, 1, 1, 1, 1], [1, 1, 1, 0, 0]])
    yield "hidden (2, 5, 4); sentence 2 has 2 pad tokens", hidden(2, 5, 4, mask), mask
    mask = torch.tensor([[1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 0, 0]])
    yield "3 sentences of 4, 1 and 2 tokens: hidden (3, 4, 6)", hidden(3, 4, 6, mask), mask
    mask = torch.ones(1, 3, dtype=torch.long)
    yield "one sentence, no padding: hidden (1, 3, 5)", hidden(1, 3, 5, mask), mask
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 1.0, 1.0]])
    yield "a float mask of 1.0 and 0.0: hidden (2, 3, 2)", hidden(2, 3, 2, mask), mask
    mask = torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]], dtype=torch.int32)
    yield (
        "float64 hidden (2, 6, 3), an int32 mask",
        hidden(2, 6, 3, mask, dtype=torch.float64),
        mask,
    )


@checker(
    "mean_pool",
    "Replace `raise NotImplementedError` with the mean of each sentence's real tokens.",
)
def check_mean_pool(candidate) -> int:
    """Check ``candidate(hidden (B, L, E), attention_mask (B, L) of 1/0) -> (B, E)``."""
    return check_cases(
        candidate,
        _pool_cases(),
        reference.mean_pool,
        _POOL_MISTAKES,
        what="the sentence vectors",
        crash_hint="hidden is (B, L, E) and the mask (B, L): give the mask a features axis, "
        f"{_POOL}.",
        shape_hint=f"one vector per sentence, (B, E): {_POOL}.",
        dtype_hint="the result keeps hidden's dtype; convert the mask to it "
        "(attention_mask.to(hidden.dtype)), not hidden to the mask's.",
        fallback_cause=f"sum each sentence's real tokens and divide by their number: {_POOL}.",
    )


# ---------------------------------------------------------------- embed_sentences

_EMBED = (
    "the mean of each sentence's real tokens (attention_mask 1), then each vector divided by its "
    "length: F.normalize(..., dim=-1)"
)


@functools.lru_cache(maxsize=1)
def _small_model():
    """A small random MiniLM (2 layers, E = 24) with the real WordPiece tokenizer: what
    ``embed_sentences`` needs (``tokenize`` and the forward), cheap to run."""
    from tokenizers import Tokenizer

    from ..pretrained import MiniLM, MiniLMConfig, model_directory

    tokenizer = Tokenizer.from_file(str(model_directory() / "tokenizer.json"))
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    config = MiniLMConfig(
        hidden_size=24, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48
    )
    with torch.random.fork_rng():
        torch.manual_seed(52)
        return MiniLM(config, tokenizer).eval()


class SmallMiniLM:
    """The checker's model as the learner's code sees it: everything but ``encode``, which is
    the package's answer to this exercise."""

    def __init__(self, model):
        self._model = model

    def __getattr__(self, name):
        if name == "encode":
            raise AttributeError(
                "the checker's model has no encode(): it is the course's version of this "
                "exercise. Use model.tokenize(sentences) and model(**batch) instead."
            )
        return getattr(self._model, name)

    def __call__(self, *args, **kwargs):
        return self._model(*args, **kwargs)


def _hidden(model, sentences, with_mask=True):
    batch = model.tokenize(sentences)
    mask = batch["attention_mask"] if with_mask else None
    with torch.no_grad():
        return model(batch["input_ids"], attention_mask=mask).last_hidden_state, batch[
            "attention_mask"
        ]


def _pooled(model, sentences, with_mask=True):
    hidden, mask = _hidden(model, sentences, with_mask)
    return reference.mean_pool(hidden, mask)


_EMBED_MISTAKES = [
    Mistake(
        "padding averaged in",
        lambda m, s: F.normalize(_hidden(m, s)[0].mean(1), dim=-1),
        "you averaged over every position, the padding too: a short sentence's vector then "
        "depends on the longest sentence of its batch. Average its real tokens only: "
        + _EMBED
        + ".",
    ),
    Mistake(
        "not normalised",
        lambda m, s: _pooled(m, s),
        "your vectors are the right means but not of length 1; divide each by its length, "
        "F.normalize(means, dim=-1), so that a dot product is a cosine.",
    ),
    Mistake(
        "sum, not normalised",
        lambda m, s: (lambda h, k: (h * k[..., None]).sum(1))(*_hidden(m, s)),
        "your vectors are sums of the real tokens, not of length 1; divide each by its length, "
        "F.normalize(..., dim=-1) (the count of tokens then does not matter).",
    ),
    Mistake(
        "normalised over the batch",
        lambda m, s: F.normalize(_pooled(m, s), dim=0),
        "you normalised over the batch axis (dim=0); each sentence's vector must have length 1: "
        "F.normalize(means, dim=-1).",
    ),
    Mistake(
        "[CLS]",
        lambda m, s: F.normalize(_hidden(m, s)[0][:, 0], dim=-1),
        "you took the [CLS] token's vector. all-MiniLM-L6-v2 was trained with the mean of the "
        "real tokens as the sentence's vector, so that is what its similarities mean: "
        + _EMBED
        + ".",
    ),
    Mistake(
        "max over the tokens",
        lambda m, s: F.normalize(_hidden(m, s)[0].max(1).values, dim=-1),
        "you took the largest value of each feature; the sentence's vector is the mean of its "
        "real tokens: " + _EMBED + ".",
    ),
    Mistake(
        "no attention_mask in the forward",
        lambda m, s: F.normalize(_pooled(m, s, with_mask=False), dim=-1),
        "the model ran without the attention_mask, so the real tokens attended to the padding. "
        "Pass it: model(**batch), or model(input_ids, attention_mask=...).",
    ),
    Mistake(
        "no attention_mask at all",
        lambda m, s: F.normalize(_hidden(m, s, with_mask=False)[0].mean(1), dim=-1),
        "the attention_mask is used nowhere: the model ran without it (the real tokens attended "
        "to the padding) and the padding was averaged in. Pass it to the model, model(**batch), "
        "and average the real tokens only.",
    ),
]


def _embed_cases():
    model = SmallMiniLM(_small_model())
    yield (
        "3 sentences of 12, 4 and 8 tokens",
        model,
        ["Which do you like better, coffee or tea?", "Hi!", "The cat sleeps all day."],
    )
    yield "one sentence, no padding", model, ["Attention is all you need."]
    yield (
        "4 sentences, the longest first",
        model,
        [
            "The train to Paris leaves at nine o'clock tomorrow morning.",
            "Yes.",
            "How do I reset my password?",
            "Snow.",
        ],
    )


def _reference_embeddings(model, sentences):
    return reference.embed_sentences(model._model, sentences)


@checker(
    "embed_sentences",
    "Replace `raise NotImplementedError` with the steps from sentences to normalised mean vectors.",
)
def check_embed_sentences(candidate) -> int:
    """Check ``candidate(model, sentences) -> (N, E)``: the mean of each sentence's real tokens'
    last hidden states, normalised to length 1."""

    return check_cases(
        candidate,
        _embed_cases(),
        _reference_embeddings,
        _EMBED_MISTAKES,
        what="the sentence vectors",
        crash_hint="the hidden states are (N, L, E) and the attention_mask (N, L): give the mask a "
        "last axis, (N, L, 1), to multiply every feature, then pool over the tokens (dim=1).",
        shape_hint="one vector per sentence, (N, E): pool over the tokens, dim=1.",
        fallback_cause=_EMBED + ".",
    )
