"""The lesson-00 warm-up checkers accept every correct style and name the classic mistakes."""

import pytest
import torch
from einops import einsum

from mha_course import reference
from mha_course.checks import check_pairwise_dot, check_soft_lookup, check_weighted_average

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
@pytest.mark.filterwarnings("ignore:The use of `x.T` on tensors:UserWarning")  # the mistake itself
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
            "not the first of them alone (argmax)",
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

    fails_with(check_soft_lookup, validated(keys_T), "keys.T reverses *every* axis")
    fails_with(check_soft_lookup, validated(transposed_weights), "no transpose")
    fails_with(check_soft_lookup, validated(plain_mean), "plain mean of the values")


def test_soft_lookup_wants_a_pair_in_order():
    def weights_first(q, k, v, t=1.0):
        return tuple(reversed(reference.soft_lookup(q, k, v, t)))

    fails_with(check_soft_lookup, weights_first, "the order of the pair: return (result, weights)")
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
        "raise ValueError with a message that names it, not a RuntimeError",
    )
    assert "in unchecked:" in message  # the learner's line that raised

    def says_nothing(query, keys, values, temperature=1.0):
        if temperature < 0:
            raise ValueError("bad input")
        return unchecked(query, keys, values, temperature)

    fails_with(check_soft_lookup, says_nothing, "your ValueError says 'bad input'", "temperature")


def test_soft_lookup_not_done(capsys):
    not_done(check_soft_lookup, skeleton, capsys)
