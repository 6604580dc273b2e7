"""The lesson-00 checkers accept every correct style and name the classic mistakes."""

import pytest
import torch
import torch.nn.functional as F
from einops import einsum

from mha_course import reference
from mha_course.checks import check_soft_lookup, check_softmax

from checker_helpers import fails_with, not_done, passes, skeleton

# ---------------------------------------------------------------- softmax


def softmax_stable(s):
    e = (s - s.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


@pytest.mark.parametrize(
    "candidate",
    [
        softmax_stable,
        lambda s: torch.softmax(s, -1),
        lambda s: F.softmax(s, dim=-1),
        lambda s: torch.exp(s - torch.logsumexp(s, -1, keepdim=True)),
    ],
)
def test_softmax_accepts_correct_answers(candidate, capsys):
    passes(check_softmax, candidate, capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (lambda s: torch.softmax(s, 0), "the first axis"),
        (lambda s: s.exp() / s.exp().sum(-1, keepdim=True), "exp overflowed"),
        (
            lambda s: (lambda e: e / e.sum(-1, keepdim=True))(
                (s - s.amax(-1, keepdim=True).clamp_min(0)).exp()  # guards huge scores only
            ),
            "underflowed to 0, and 0/0 is NaN",
        ),
        (lambda s: s.exp(), "did not divide"),
        (lambda s: s.exp() / s.exp().sum(), "sum of the whole tensor"),
        (
            lambda s: (lambda e: e / e.sum(dim=0, keepdim=True))(
                (s - s.amax(-1, keepdim=True)).exp()
            ),
            "the sums are taken down the columns",
        ),
        (
            lambda s: (
                softmax_stable(s - s.amax(0, keepdim=True)) * 0
                + (lambda e: e / e.sum(-1, keepdim=True))((s - s.amax(0, keepdim=True)).exp())
            ),
            "you subtracted each column's max",
        ),
        (
            lambda s: (lambda e: e / e.sum(-1, keepdim=True))((s - s.amax(-1)).exp()),
            "lost their axis",
        ),
    ],
)
def test_softmax_names_the_mistake(candidate, phrase):
    fails_with(check_softmax, candidate, "Likely cause", phrase)


def test_softmax_the_skeletons_first_step_then_the_wrong_sum_is_diagnosed():
    """Lesson 00's skeleton starts with the row max subtracted; summing over dim 0 after it is the
    classic slip, and it must not be blamed on the axis of the max."""

    def softmax(scores):
        shifted = scores - scores.amax(dim=-1, keepdim=True)
        e = shifted.exp()
        return e / e.sum(dim=0, keepdim=True)

    message = fails_with(check_softmax, softmax, "Case 'a (3, 4) matrix", "taken down the columns")
    assert "column's max" not in message and len(message.splitlines()) <= 15


def test_not_done_yet_prints_and_returns(capsys):
    def skeleton(scores):
        raise NotImplementedError

    assert check_softmax(skeleton) is None
    assert "not done yet" in capsys.readouterr().out
    assert check_softmax.passes(skeleton) is False
    assert check_softmax.passes(softmax_stable) is True


def test_a_crash_names_the_case_and_the_inputs():
    def crashes(scores):
        return scores @ torch.ones(3)

    message = fails_with(
        check_softmax, crashes, "Case 'a vector of 5 scores'", "RuntimeError", "tensor(5)"
    )
    assert "Likely cause" in message


# ---------------------------------------------------------------- soft_lookup


def validated(lookup):
    """``lookup`` behind the three checks the exercise asks for."""

    def checked(query, keys, values, temperature=1.0):
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if query.size(-1) != keys.size(-1):
            raise ValueError(f"query has E={query.size(-1)}, keys E={keys.size(-1)}")
        if keys.size(-2) != values.size(-2):
            raise ValueError(f"{keys.size(-2)} keys but {values.size(-2)} values")
        return lookup(query, keys, values, temperature)

    return checked


def shares_of_the_best(scores):
    best = torch.isclose(scores, scores.amax(-1, keepdim=True)).to(scores.dtype)
    return best / best.sum(-1, keepdim=True)


def lookup_with(weights_of):
    def lookup(query, keys, values, temperature):
        weights = weights_of(query @ keys.mT, temperature)
        return weights @ values, weights

    return validated(lookup)


def own_softmax(scores):
    e = (scores - scores.amax(-1, keepdim=True)).exp()
    return e / e.sum(-1, keepdim=True)


def lookup_loop(query, keys, values, temperature):
    """One query at a time, over the flattened leading axes."""
    lead = query.shape[:-2]
    q, k = query.reshape(-1, *query.shape[-2:]), keys.reshape(-1, *keys.shape[-2:])
    v = values.reshape(-1, *values.shape[-2:])
    results, weights = [], []
    for b in range(q.size(0)):
        for i in range(q.size(1)):
            s = torch.stack([q[b, i] @ k[b, j] for j in range(k.size(1))])
            w = shares_of_the_best(s) if temperature == 0 else torch.softmax(s / temperature, 0)
            weights.append(w)
            results.append(sum(w[j] * v[b, j] for j in range(k.size(1))))
    shape = (*lead, query.size(-2))
    return torch.stack(results).reshape(*shape, -1), torch.stack(weights).reshape(*shape, -1)


@pytest.mark.parametrize(
    "candidate",
    [
        reference.soft_lookup,
        lookup_with(lambda s, t: shares_of_the_best(s) if t == 0 else own_softmax(s / t)),
        lookup_with(lambda s, t: torch.softmax(s / max(t, 1e-12), dim=-1)),  # the limit, nearly
        validated(lookup_loop),
        validated(
            lambda q, k, v, t: (lambda w: (einsum(w, v, "... l s, ... s e -> ... l e"), w))(
                shares_of_the_best(einsum(q, k, "... l e, ... s e -> ... l s"))
                if t == 0
                else (einsum(q, k, "... l e, ... s e -> ... l s") / t).softmax(-1)
            )
        ),
    ],
)
def test_soft_lookup_accepts_every_correct_style(candidate, capsys):
    passes(check_soft_lookup, candidate, capsys)


def first_best(scores):
    return torch.nn.functional.one_hot(scores.argmax(-1), scores.size(-1)).to(scores.dtype)


@pytest.mark.parametrize(
    "weights_of, phrase",
    [
        (lambda s, t: torch.softmax(s, -1), "the temperature is ignored"),
        (lambda s, t: torch.softmax(s * t, -1), "you multiplied the matches by the temperature"),
        (
            lambda s, t: shares_of_the_best(s) if t == 0 else torch.softmax(s / t, -2),
            "the softmax runs over the queries",
        ),
        (
            lambda s, t: first_best(s) if t == 0 else torch.softmax(s / t, -1),
            "not the first of them alone",
        ),
        (
            lambda s, t: (
                (s == s.amax(-1, keepdim=True)).to(s.dtype) if t == 0 else torch.softmax(s / t, -1)
            ),
            "each row of weights must still sum to 1",
        ),
        (lambda s, t: torch.softmax(s / t, -1), "a temperature of 0 gives ±inf"),
        (
            lambda s, t: torch.softmax(s * (1 / t), -1),
            "at temperature 0 there is nothing to divide",
        ),
        (
            lambda s, t: (
                shares_of_the_best(s)
                if t == 0
                else (s / t).exp() / (s / t).exp().sum(-1, keepdim=True)
            ),
            "exp overflowed",
        ),
        (
            lambda s, t: (
                (lambda b: b / b.sum(-1, keepdim=True))(s == s.amax(-1, keepdim=True))
                if t == 0
                else torch.softmax(s / t, -1)
            ),
            "make the shares in the scores' dtype",
        ),
    ],
)
def test_soft_lookup_names_each_mistake(weights_of, phrase):
    fails_with(check_soft_lookup, lookup_with(weights_of), "Likely cause", phrase)


def test_soft_lookup_names_the_mistakes_after_the_weights():
    def keys_T(q, k, v, t):
        w = torch.softmax(q @ k.permute(*reversed(range(k.dim()))) / t, -1) if t else None
        return (w @ v, w) if t else reference.soft_lookup(q, k, v, t)

    def transposed_weights(q, k, v, t):
        w = reference.soft_lookup(q, k, v, t)[1]
        return w.mT @ v, w

    def plain_mean(q, k, v, t):
        w = reference.soft_lookup(q, k, v, t)[1]
        return v.mean(-2, keepdim=True).expand(*q.shape[:-1], v.size(-1)), w

    fails_with(check_soft_lookup, validated(keys_T), "reverses every axis of batched keys")
    fails_with(check_soft_lookup, validated(transposed_weights), "not with a column of them")
    fails_with(check_soft_lookup, validated(plain_mean), "plain mean of the values")


def test_soft_lookup_wants_a_pair_in_order():
    def weights_first(q, k, v, t=1.0):
        return tuple(reversed(reference.soft_lookup(q, k, v, t)))

    fails_with(check_soft_lookup, weights_first, "the order of the pair; result comes first")
    fails_with(
        check_soft_lookup, lambda q, k, v, t=1.0: reference.soft_lookup(q, k, v, t)[0], "got Tensor"
    )


def test_soft_lookup_needs_the_default_temperature():
    fails_with(
        check_soft_lookup,
        lambda q, k, v, temperature: reference.soft_lookup(q, k, v, temperature),
        "Case '3 queries, 5 keys",
        "missing 1 required positional argument",
    )


def unchecked(query, keys, values, temperature=1.0):
    scores = query @ keys.mT
    weights = shares_of_the_best(scores) if temperature == 0 else (scores / temperature).softmax(-1)
    return weights @ values, weights


def test_soft_lookup_wants_a_value_error_that_names_the_argument():
    fails_with(
        check_soft_lookup,
        unchecked,
        "Case 'temperature -1': your soft_lookup returned a result; it should raise ValueError",
        "the worst match would weigh most",
    )

    def checks_temperature_only(query, keys, values, temperature=1.0):
        if temperature < 0:
            raise ValueError("temperature must be >= 0")
        return unchecked(query, keys, values, temperature)

    message = fails_with(
        check_soft_lookup,
        checks_temperature_only,
        "Case 'query (2, 4) and keys (3, 3)",
        "RuntimeError",
        "raise a ValueError that names it, not a RuntimeError",
    )
    assert "in unchecked:" in message  # the learner's line that raised

    def says_nothing(query, keys, values, temperature=1.0):
        if temperature < 0:
            raise ValueError("bad input")
        return unchecked(query, keys, values, temperature)

    fails_with(check_soft_lookup, says_nothing, "your ValueError says 'bad input'", "temperature")


def test_soft_lookup_not_done(capsys):
    not_done(check_soft_lookup, skeleton, capsys)
