"""The lesson-07 checker of sample_next accepts every correct way of drawing (multinomial, the
Gumbel-max trick, an inverse CDF, probabilities raised to 1/T) and names each classic mistake:
the temperature after the softmax, top-k keeping k - 1 or k + 1 tokens, the generator ignored."""

import pytest
import torch

from mha_course import reference
from mha_course.checks import check_sample_next

from checker_helpers import fails_with, not_done, passes, skeleton


def keep_top(logits, top_k, *, extra=0):
    if top_k is None:
        return logits
    values = torch.topk(logits, top_k + extra, dim=-1).values
    return logits.masked_fill(logits < values[..., -1:], float("-inf"))


def multinomial(logits, temperature=1.0, top_k=None, generator=None):
    probs = torch.softmax(keep_top(logits / temperature, top_k), dim=-1)
    return torch.multinomial(probs, 1, generator=generator)


def gumbel_max(logits, temperature=1.0, top_k=None, generator=None):
    scaled = keep_top(logits / temperature, top_k)
    u = torch.rand(scaled.shape, generator=generator).clamp_min(1e-20)
    return (scaled - torch.log(-torch.log(u))).argmax(dim=-1, keepdim=True)


def inverse_cdf(logits, temperature=1.0, top_k=None, generator=None):
    if top_k == 1:
        return logits.argmax(-1, keepdim=True)
    probs = torch.softmax(keep_top(logits, top_k) / temperature, dim=-1)
    u = torch.rand(probs.size(0), 1, generator=generator)
    index = torch.searchsorted(probs.cumsum(-1), u)
    return index.clamp(max=probs.size(-1) - 1)


def power(logits, temperature=1.0, top_k=None, generator=None):
    """p ** (1 / T), renormalised: the same distribution as softmax(logits / T)."""
    probs = torch.softmax(keep_top(logits, top_k), dim=-1) ** (1 / temperature)
    return torch.multinomial(probs, 1, generator=generator)


@pytest.mark.parametrize(
    "candidate", [reference.sample_next, multinomial, gumbel_max, inverse_cdf, power]
)
def test_sample_next_accepts_every_correct_way_of_drawing(candidate, capsys):
    passes(check_sample_next, candidate, capsys)


def temperature_after(logits, temperature=1.0, top_k=None, generator=None):
    probs = torch.softmax(keep_top(logits, top_k), dim=-1) / temperature
    return torch.multinomial(probs, 1, generator=generator)


def softmax_twice(logits, temperature=1.0, top_k=None, generator=None):
    probs = torch.softmax(torch.softmax(keep_top(logits, top_k), -1) / temperature, -1)
    return torch.multinomial(probs, 1, generator=generator)


def multiplied(logits, temperature=1.0, top_k=None, generator=None):
    return multinomial(logits * temperature * temperature, temperature, top_k, generator)


def off_by(extra):
    def sample(logits, temperature=1.0, top_k=None, generator=None):
        probs = torch.softmax(keep_top(logits / temperature, top_k, extra=extra), dim=-1)
        return torch.multinomial(probs, 1, generator=generator)

    return sample


def smallest(logits, temperature=1.0, top_k=None, generator=None):
    scaled = logits / temperature
    if top_k is not None:
        values = torch.topk(scaled, top_k, dim=-1, largest=False).values
        scaled = scaled.masked_fill(scaled > values[..., -1:], float("-inf"))
    return torch.multinomial(torch.softmax(scaled, -1), 1, generator=generator)


def uniform(logits, temperature=1.0, top_k=None, generator=None):
    if top_k is None:
        return multinomial(logits, temperature, None, generator)
    kept = keep_top(logits, top_k) > float("-inf")
    return torch.multinomial(kept.float(), 1, generator=generator)


def top_k_ignored(logits, temperature=1.0, top_k=None, generator=None):
    return multinomial(logits, temperature, 1 if top_k == 1 else None, generator)


def argmax(logits, temperature=1.0, top_k=None, generator=None):
    return logits.argmax(-1, keepdim=True)


def global_stream(logits, temperature=1.0, top_k=None, generator=None):
    return multinomial(logits, temperature, top_k, None)


def own_generator(logits, temperature=1.0, top_k=None, generator=None):
    return multinomial(logits, temperature, top_k, torch.Generator().manual_seed(0))


def flat(logits, temperature=1.0, top_k=None, generator=None):
    return multinomial(logits, temperature, top_k, generator).flatten()


def in_place(logits, temperature=1.0, top_k=None, generator=None):
    logits /= temperature
    return multinomial(logits, 1.0, top_k, generator)


def from_logits(logits, temperature=1.0, top_k=None, generator=None):
    return torch.multinomial(logits / temperature, 1, generator=generator)


def probabilities(logits, temperature=1.0, top_k=None, generator=None):
    return torch.softmax(logits / temperature, -1)


def wrong_greedy(logits, temperature=1.0, top_k=None, generator=None):
    """Right, except that top_k=1 keeps two tokens."""
    return multinomial(logits, temperature, 2 if top_k == 1 else top_k, generator)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (temperature_after, "it comes after the softmax"),
        (softmax_twice, "took a softmax again"),
        (multiplied, "you multiplied the logits by the temperature"),
        (off_by(-1), "instead of top_k = 3"),
        (off_by(1), "you kept 4 tokens instead of top_k = 3"),
        (smallest, "the k *smallest* logits"),
        (uniform, "you drew uniformly among the top k"),
        (top_k_ignored, "top_k = 3 is ignored"),
        (argmax, "your answer is always the likeliest token"),
        (global_stream, "does not use `generator`"),
        (own_generator, "makes a generator of its own"),
        (flat, "expected (B, 1)"),
        (in_place, "changed the logits it was given"),
        (from_logits, "torch.multinomial wants non-negative weights"),
        (probabilities, "you returned the probabilities"),
        (wrong_greedy, "top_k = 1 keeps exactly one token"),
    ],
)
def test_sample_next_names_each_mistake(candidate, phrase):
    fails_with(check_sample_next, candidate, phrase)


def test_sample_next_not_done(capsys):
    not_done(check_sample_next, skeleton, capsys)


def test_sample_next_leaves_the_global_stream_alone():
    torch.manual_seed(3)
    expected = torch.rand(3)
    torch.manual_seed(3)
    check_sample_next.passes(reference.sample_next)
    assert torch.equal(torch.rand(3), expected)
