"""Checker for lesson 07's sampling: ``sample_next(logits, temperature=1.0, top_k=None,
generator=None)`` -> one token id per row, (B, 1).

A draw is random, so the checker looks at many: each row of a few logits is repeated thousands
of times, sampled in one call with a seeded generator, and the share of each token is held to
the probabilities softmax(top-k logits / temperature) within 0.03 (the draws of a right answer
stay well inside that: with 8000 draws a share moves by 0.006 or so). Every correct style
passes: torch.multinomial, torch.distributions.Categorical, the Gumbel-max trick, an inverse
CDF. The classic mistakes are told apart by the distribution they sample from, and greedy
decoding (``top_k=1``) must be the argmax exactly.
"""

from __future__ import annotations

import torch

from .. import generation
from .._validate import shape_str
from ._core import Mistake, call_candidate, checker
from ._failure import ExerciseFailure

__all__ = ["check_sample_next"]

DRAWS = 8000  # per row of logits
TOLERANCE = 0.03  # on each token's share of the draws

SAMPLING_ROUTINES = {"the course's sample_next (mha_course)": generation.sample_next}

_RECIPE = (
    "divide the logits by the temperature, keep the top_k largest (the others get -inf), "
    "softmax, then draw one token per row with torch.multinomial(probs, 1, generator=generator)."
)


def _probs(logits, temperature=1.0, top_k=None, *, keep="top", renormalise=True):
    """softmax(logits / temperature) over the kept tokens: the top_k largest ("top") or the
    top_k smallest ("bottom"); ``renormalise=False`` keeps the kept tokens' full-softmax
    probabilities (what a sampler that renormalises anyway, torch.multinomial, also gives)."""
    scaled = logits / temperature
    if top_k is None:
        return torch.softmax(scaled, dim=-1)
    kept = torch.topk(scaled, top_k, dim=-1, largest=keep == "top").indices
    masked = torch.full_like(scaled, float("-inf")).scatter(-1, kept, scaled.gather(-1, kept))
    return torch.softmax(masked, dim=-1)


def _mistakes(logits, temperature, top_k) -> list[Mistake]:
    V = logits.size(-1)

    def probs(**kw):
        return lambda: _probs(logits, **{"temperature": temperature, "top_k": top_k, **kw})

    after = (
        f"your temperature ({temperature}) changes nothing: it is applied after the softmax "
        f"(probs / temperature: torch.multinomial renormalises the probabilities, so the division "
        f"cancels), or not at all. Divide the logits by the temperature, then take the softmax."
    )
    found = [
        Mistake("temperature after the softmax", probs(temperature=1.0), after),
        Mistake(
            "softmax, temperature, softmax again",
            lambda: _probs(torch.softmax(logits, dim=-1), temperature, top_k),
            "you divided the probabilities (after a softmax) by the temperature and took a "
            "softmax again; the temperature divides the logits, before the one softmax.",
        ),
        Mistake(
            "temperature multiplied",
            probs(temperature=1.0 / temperature),
            f"you multiplied the logits by the temperature ({temperature}); divide them by it: "
            f"below 1 it sharpens the distribution, above 1 it flattens it.",
        ),
        Mistake(
            "always the likeliest token",
            probs(temperature=1e-6),
            "you always return the likeliest token (argmax): that is greedy decoding, top_k=1. "
            "Otherwise draw from the probabilities: torch.multinomial(probs, 1, generator=generator).",
        ),
    ]
    if top_k is not None:
        found += [
            Mistake(
                "top-k keeps k - 1",
                probs(top_k=top_k - 1) if top_k > 1 else lambda: None,
                f"you kept {top_k - 1} tokens instead of top_k = {top_k}: an off-by-one in the "
                f"mask. torch.topk(logits, top_k) gives the k largest; keep those, set the rest "
                f"to -inf.",
            ),
            Mistake(
                "top-k keeps k + 1",
                probs(top_k=top_k + 1) if top_k < V else lambda: None,
                f"you kept {top_k + 1} tokens instead of top_k = {top_k}: an off-by-one in the "
                f"mask (e.g. keeping what is >= the (k+1)-th largest, or values[..., top_k] as "
                f"the threshold instead of values[..., -1]). Keep exactly the k largest.",
            ),
            Mistake(
                "top-k keeps the smallest",
                probs(keep="bottom"),
                "you kept the k *smallest* logits; keep the k largest (torch.topk's default) and "
                "set the others to -inf.",
            ),
            Mistake(
                "uniform over the top k",
                lambda: _uniform_over_top(logits, top_k),
                "you drew uniformly among the top k tokens; draw them in proportion to their "
                "probabilities, softmax(kept logits / temperature).",
            ),
            Mistake(
                "top-k ignored",
                probs(top_k=None),
                f"top_k = {top_k} is ignored: every token can be drawn. Keep the k largest "
                f"logits and set the others to -inf before the softmax.",
            ),
        ]
    return found


def _uniform_over_top(logits, top_k):
    kept = torch.topk(logits, top_k, dim=-1).indices
    weights = torch.zeros_like(logits).scatter(-1, kept, 1.0)
    return weights / weights.sum(-1, keepdim=True)


def _cases():
    # Four rows of logits over six tokens, no ties, the largest at different places.
    logits = torch.tensor(
        [
            [2.0, 1.0, 0.5, 0.0, -1.0, -3.0],
            [0.3, -0.2, 1.4, 0.9, -0.5, 0.1],
            [-1.0, 0.0, 0.2, -0.4, 0.6, 1.1],
            [0.0, 3.0, -2.0, 1.5, 2.2, -0.7],
        ]
    )
    # (case, logits, temperature, top_k)
    yield "temperature 1.0, every token: logits (4, 6)", logits, 1.0, None
    yield "temperature 0.5 (sharper)", logits, 0.5, None
    yield "temperature 2.0 (flatter)", logits, 2.0, None
    yield "top_k=3, temperature 1.0", logits, 1.0, 3
    yield "top_k=2, temperature 0.7", logits, 0.7, 2
    yield "top_k=5 of 6, temperature 1.5", logits, 1.5, 5


def _draw(candidate, case: str, logits, temperature, top_k, seed: int):
    """The candidate's draws for ``logits`` (R, V), each row repeated DRAWS times: ids (R·DRAWS,)."""
    big = logits.repeat_interleave(DRAWS, dim=0)
    given = big.clone()
    ids = call_candidate(
        candidate,
        case,
        given,
        temperature=temperature,
        top_k=top_k,
        generator=torch.Generator().manual_seed(seed),
        crash_hint=_crash_hint(temperature),
    )
    if not torch.equal(given, big):
        raise ExerciseFailure(
            f"Case {case!r}: your sample_next changed the logits it was given (in place: "
            f"logits /= ..., or logits[...] = -inf).\nLikely cause: the caller still needs its "
            f"logits. Make new tensors instead: logits = logits / temperature, masked_fill "
            f"without the underscore."
        )
    return _ids(case, ids, big.size(0), logits.size(-1))


def _crash_hint(temperature) -> str:
    return (
        "torch.multinomial wants non-negative weights, one row per draw: give it the "
        "probabilities (after the softmax), not the logits or log-probabilities. " + _RECIPE
    )


def _ids(case: str, ids, B: int, V: int) -> torch.Tensor:
    if not isinstance(ids, torch.Tensor):
        raise ExerciseFailure(
            f"Case {case!r}: your sample_next returned a {type(ids).__name__}; return a tensor "
            f"of token ids, (B, 1)."
        )
    if tuple(ids.shape) != (B, 1):
        hint = (
            "you returned the probabilities, one per token: draw from them instead, "
            "torch.multinomial(probs, 1, generator=generator)."
            if tuple(ids.shape) == (B, V)
            else "one id per row, kept as a column (B, 1): torch.multinomial(probs, 1) gives "
            "that shape, and argmax(dim=-1, keepdim=True) for greedy."
        )
        raise ExerciseFailure(
            f"Case {case!r}: your result has shape {shape_str(ids.shape)}, expected (B, 1) = "
            f"{shape_str((B, 1))}.\nLikely cause: {hint}"
        )
    if ids.is_floating_point() or ids.dtype == torch.bool:
        raise ExerciseFailure(
            f"Case {case!r}: your ids are {ids.dtype}; token ids are integers (torch.long), as "
            f"torch.multinomial and argmax return them."
        )
    if int(ids.min()) < 0 or int(ids.max()) >= V:
        raise ExerciseFailure(
            f"Case {case!r}: your ids run from {int(ids.min())} to {int(ids.max())}; token ids "
            f"are positions in the vocabulary, 0 .. {V - 1}."
        )
    return ids.flatten()


def _shares(ids: torch.Tensor, rows: int, V: int) -> torch.Tensor:
    """(rows, V): the share of the draws of each row that gave each token."""
    counts = torch.nn.functional.one_hot(ids.view(rows, DRAWS), V).sum(dim=1)
    return counts.double() / DRAWS


def _show(t: torch.Tensor) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in t.tolist()) + "]"


def _compare_shares(case: str, shares, expected, mistakes) -> None:
    diff = (shares - expected).abs()
    if diff.max() <= TOLERANCE:
        return
    row = int(diff.max(dim=-1).values.argmax())
    cause = None
    for mistake in mistakes:
        try:
            wrong = mistake.run()
        except Exception:  # cannot run on these inputs: cannot be the cause
            continue
        if wrong is not None and (shares - wrong.double()).abs().max() <= TOLERANCE:
            cause = mistake.explanation
            break
    support = int((shares[row] > 0).sum())
    needed = int((expected[row] > 0).sum())
    lines = [
        f"Case {case!r}: the tokens you drew do not follow the probabilities.",
        f"  row {row}, share of {DRAWS} draws per token:",
        f"  expected {_show(expected[row])}",
        f"  got      {_show(shares[row])}",
    ]
    if cause is None and support != needed:
        cause = f"you drew {support} different tokens where {needed} are possible."
    lines.append(f"Likely cause: {cause or _RECIPE}")
    raise ExerciseFailure("\n".join(lines))


def _require_generator(candidate, case: str, logits) -> None:
    """The same seed gives the same draws; another seed, other draws."""

    def draws(seed):
        return call_candidate(
            candidate,
            case,
            logits.clone(),
            temperature=1.0,
            top_k=None,
            generator=torch.Generator().manual_seed(seed),
        )

    first, again, other = draws(7), draws(7), draws(8)
    if not torch.equal(first, again):
        raise ExerciseFailure(
            f"Case {case!r}: two calls with generators seeded alike gave different tokens.\n"
            f"Likely cause: your draw does not use `generator`: pass it on, "
            f"torch.multinomial(probs, 1, generator=generator) (and to any torch.rand you call)."
        )
    if torch.equal(first, other):
        raise ExerciseFailure(
            f"Case {case!r}: generators with different seeds gave the same {logits.size(0)} "
            f"tokens.\nLikely cause: your function makes a generator of its own (or seeds one); "
            f"draw with the generator it is given."
        )
    try:  # generator=None: the global random stream, as torch.multinomial's default
        call_candidate(candidate, case, logits.clone(), temperature=1.0, top_k=None, generator=None)
    except ExerciseFailure as failure:
        raise ExerciseFailure(
            f"Case {case!r}: with generator=None your sample_next raised "
            f"{type(failure.raised).__name__}.\nLikely cause: generator=None means 'the global "
            f"random stream': hand it on as it is (torch.multinomial accepts None)."
        ) from failure.raised


def _require_greedy(candidate) -> None:
    g = torch.Generator().manual_seed(72)
    logits = torch.randn(64, 10, generator=g)
    expected = logits.argmax(dim=-1, keepdim=True)
    for case, temperature in (
        ("greedy: top_k=1, logits (64, 10)", 1.0),
        ("greedy at temperature 0.7", 0.7),
    ):
        got = call_candidate(
            candidate,
            case,
            logits.clone(),
            temperature=temperature,
            top_k=1,
            generator=torch.Generator().manual_seed(0),
            crash_hint=_crash_hint(temperature),
        )
        ids = _ids(case, got, 64, 10).view(64, 1)
        wrong = (ids != expected).flatten()
        if wrong.any():
            row = int(wrong.nonzero()[0])
            raise ExerciseFailure(
                f"Case {case!r}: with top_k=1 the result must be the likeliest token of every "
                f"row; {int(wrong.sum())} of 64 rows differ, first row {row}: expected "
                f"{int(expected[row])}, got {int(ids[row])}.\nLikely cause: top_k=1 keeps "
                f"exactly one token, the largest logit (an off-by-one in the top-k mask keeps "
                f"2, or 0)."
            )


@checker(
    "sample_next",
    "Replace `raise NotImplementedError` in sample_next: temperature, top-k, softmax, draw.",
    own_work=SAMPLING_ROUTINES,
)
def check_sample_next(candidate) -> int:
    """Check ``candidate(logits, temperature=1.0, top_k=None, generator=None)`` -> ids (B, 1):
    greedy exactly for ``top_k=1``; otherwise thousands of draws per row follow
    softmax(top-k logits / temperature), reproducibly with the generator given."""
    with torch.random.fork_rng(devices=[]):  # the draws must not shift the learner's seed
        n = 0
        for seed, (case, logits, temperature, top_k) in enumerate(_cases()):
            ids = _draw(candidate, case, logits, temperature, top_k, seed)
            shares = _shares(ids, logits.size(0), logits.size(-1))
            expected = _probs(logits.double(), temperature, top_k)
            _compare_shares(case, shares, expected, _mistakes(logits.double(), temperature, top_k))
            n += 1
        _require_greedy(candidate)
        _require_generator(candidate, "the generator: the same seed, the same tokens", logits)
        return n + 2
