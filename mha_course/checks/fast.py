"""Checker for lesson 06: attention one block of keys at a time, with the online softmax; the
causal flag handled block by block, and the log-sum-exp that a fused kernel keeps."""

from __future__ import annotations

import inspect
import math

import torch

from .. import reference
from ._core import Mistake, call_candidate, checker, compare, require_shape
from ._failure import ExerciseFailure
from ._steps import seeded_randn
from ._table import builds
from .attention import ATTENTION_ROUTINES

__all__ = ["check_attention_in_blocks"]

# What lesson 06 asks the learner to write themselves (the checker names the one called).
BLOCKS_ROUTINES = {
    **ATTENTION_ROUTINES,
    "the course's reference (mha_course.reference)": reference.attention_in_blocks,
}


# ---------------------------------------------------------------- the classic wrong versions

# How a causal mistake masks a block of scores: (key positions, query positions) -> masked out.
_CAUSAL_RULES = {
    "right": lambda key, query: key > query,
    "inverted": lambda key, query: key < query,
    "inverted, diagonal masked": lambda key, query: key <= query,
    "diagonal masked": lambda key, query: key >= query,
}


def _future(L: int, j: int, block: int, how):
    """Which keys of the block starting at ``j`` the causal variant ``how`` masks for each of
    the L queries, (L, block); None when it masks nothing."""
    if how is None or how == "ignored":
        return None
    start = 0 if how == "block positions" else j
    rule = _CAUSAL_RULES.get(how, _CAUSAL_RULES["right"])
    return rule(torch.arange(start, start + block), torch.arange(L)[:, None])


def _online(
    q,
    k,
    v,
    block_size,
    *,
    rescale_sum=True,
    rescale_out=True,
    running_max=True,
    subtract_max=True,
    divide_inside=False,
    accumulate=True,
    divide_at_end=True,
    scale=True,
    causal=None,
    lse=None,
):
    """The online softmax with switches that turn it into one of the classic mistakes.

    ``causal``: None (not causal), "right", "ignored", "block positions" (the key positions
    counted from each block's start), "zero" (masked with 0, not -inf), "after exp" (the
    exponentials masked, the max taken over every score), or a key of ``_CAUSAL_RULES``.
    ``lse``: None (return the output), "right", "log of the sum" (log ℓ alone), "max" (m alone)
    or "no log" (m + ℓ): return that log-sum-exp instead of the output."""
    m = q.new_full(q.shape[:-1] + (1,), -math.inf)
    sum_exp = q.new_zeros(q.shape[:-1] + (1,))
    o = q.new_zeros(q.shape[:-1] + v.shape[-1:])
    d = math.sqrt(q.size(-1)) if scale else 1.0
    for j in range(0, k.size(-2), block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) / d
        v_j = v[..., j : j + block_size, :]
        masked = _future(s.size(-2), j, s.size(-1), causal)
        if masked is not None and causal != "after exp":
            s = s.masked_fill(masked, 0.0 if causal == "zero" else -math.inf)
        block_max = s.amax(dim=-1, keepdim=True)
        m_new = torch.maximum(m, block_max) if running_max else block_max
        if not subtract_max:
            m_new = torch.zeros_like(m_new)
        factor = torch.exp(m - m_new) if subtract_max else torch.ones_like(m)
        p = torch.exp(s - m_new)
        if causal == "after exp":
            p = p.masked_fill(masked, 0.0)
        if accumulate:
            sum_exp = sum_exp * (factor if rescale_sum else 1) + p.sum(dim=-1, keepdim=True)
            o = o * (factor if rescale_out else 1) + p @ v_j
        else:
            sum_exp, o = p.sum(dim=-1, keepdim=True), p @ v_j
        if divide_inside:
            o = o / sum_exp
        m = m_new
    if lse is not None:
        return {
            "right": m + sum_exp.log(),
            "log of the sum": sum_exp.log(),
            "max": m,
            "no log": m + sum_exp,
        }[lse].squeeze(-1)
    return o / sum_exp if divide_at_end and not divide_inside else o


def _blockwise_softmax(q, k, v, block_size, average):
    """Each block normalised on its own, then summed (or averaged) over the blocks."""
    parts = []
    for j in range(0, k.size(-2), block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) / math.sqrt(q.size(-1))
        parts.append(torch.softmax(s, dim=-1) @ v[..., j : j + block_size, :])
    total = sum(parts)
    return total / len(parts) if average else total


_EACH_BLOCK = (
    "you normalised each block on its own (a softmax per block). A block's exponentials must be "
    "divided by the sum over *all* keys, which is known only at the end: keep the running sum ℓ "
    "and the unnormalised output o, and divide once, after the loop."
)

_MISTAKES = [
    Mistake(
        "running sum not rescaled",
        lambda q, k, v, b: _online(q, k, v, b, rescale_sum=False),
        "when the running max rises from m to m_new, the running sum ℓ must be rescaled too: "
        "multiply it by e^(m - m_new) before adding the new block's sum. Yours adds the new "
        "block's sum without rescaling the old one.",
    ),
    Mistake(
        "output not rescaled",
        lambda q, k, v, b: _online(q, k, v, b, rescale_out=False),
        "when the running max rises from m to m_new, the running output o must be rescaled too: "
        "multiply it by e^(m - m_new) before adding the new block's weighted values.",
    ),
    Mistake(
        "nothing rescaled",
        lambda q, k, v, b: _online(q, k, v, b, rescale_sum=False, rescale_out=False),
        "nothing is rescaled when the running max changes. What was summed under the old max m "
        "is e^(s - m); under the new max it must be e^(s - m_new) = e^(s - m) · e^(m - m_new). "
        "Multiply both ℓ and o by e^(m - m_new) before adding the new block.",
    ),
    Mistake(
        "block max instead of the running max",
        lambda q, k, v, b: _online(q, k, v, b, running_max=False),
        "m must be the running max over all the blocks so far: the larger of the old m and this "
        "block's max (elementwise). With the block's own max, e^(m - m_new) overflows when a "
        "later block has much smaller scores.",
    ),
    Mistake(
        "max not subtracted",
        lambda q, k, v, b: _online(q, k, v, b, subtract_max=False),
        "exp overflowed: the running max is not subtracted. Subtract the running max of the "
        "scores seen so far before taking exp, so that every exponential is at most 1.",
    ),
    Mistake(
        "divided inside the loop",
        lambda q, k, v, b: _online(q, k, v, b, divide_inside=True),
        "you divided by the running sum inside the loop, and the next block then adds unnormalised "
        "values to a normalised o. Keep o unnormalised and divide by ℓ once, after the loop.",
    ),
    Mistake(
        "each block normalised", lambda q, k, v, b: _blockwise_softmax(q, k, v, b, 0), _EACH_BLOCK
    ),
    Mistake("blocks averaged", lambda q, k, v, b: _blockwise_softmax(q, k, v, b, 1), _EACH_BLOCK),
    Mistake(
        "last block only",
        lambda q, k, v, b: _online(q, k, v, b, accumulate=False),
        "your result is the attention over the last block of keys only: the loop overwrites ℓ and "
        "o instead of accumulating. Add each block's terms to the (rescaled) running ones.",
    ),
    Mistake(
        "not divided at the end",
        lambda q, k, v, b: _online(q, k, v, b, divide_at_end=False),
        "o is the unnormalised sum Σ e^(s - m) v; the softmax needs one division by the running "
        "sum ℓ, after the loop.",
    ),
    Mistake(
        "no scale",
        lambda q, k, v, b: _online(q, k, v, b, scale=False),
        "the scores are not scaled: divide q kᵀ by √d_k, with d_k the size of q's last axis.",
    ),
]

_CAUSAL_MISTAKES = [
    Mistake(how, lambda q, k, v, b, how=how: _online(q, k, v, b, causal=how), why)
    for how, why in {
        "ignored": "is_causal=True is ignored: every query attended to every key. Query i may "
        "attend only to keys 0..i: mask the later keys of each block with -inf before the max and "
        "the exp.",
        "block positions": "the mask is right in the first block only: a key's position is the "
        "block's start j plus its index inside the block, not the index alone.",
        "inverted": "the causal mask is inverted: query i attended to keys i, i+1, ... (the "
        "future). It may attend to keys 0..i: mask the keys whose position is greater than the "
        "query's.",
        "inverted, diagonal masked": "the causal mask is inverted: query i attended to the keys "
        "after it. It may attend to keys 0..i: mask the keys whose position is greater than the "
        "query's.",
        "diagonal masked": "the diagonal is masked too, so query 0 has no key left (NaN). Query i "
        "may attend to keys 0..i, itself included: mask only the keys whose position is greater "
        "than the query's.",
        "zero": "the masked scores were set to 0, and e^0 = 1 still gives those keys weight. Set "
        "them to -inf, so that their exponentials are 0.",
        "after exp": "NaN: the mask was applied after the exp, so the running max includes the "
        "huge scores of keys the query may not see. Its own exponentials then underflow to 0, and "
        "ℓ = 0. Mask the scores with -inf *before* the max and the exp.",
    }.items()
]

_LSE_MISTAKES = [
    Mistake(how, lambda q, k, v, b, c, how=how: _online(q, k, v, b, causal=c, lse=how), why)
    for how, why in {
        "log of the sum": "your log-sum-exp is log ℓ alone. ℓ sums e^(s - m), so "
        "log Σ e^s = m + log ℓ: add the running max back.",
        "max": "your log-sum-exp is the running max m alone; log Σ e^s = m + log ℓ.",
        "no log": "your log-sum-exp is m + ℓ; it is m + log ℓ (ℓ sums e^(s - m)).",
    }.items()
]


# ---------------------------------------------------------------- the cases


def _cases():
    randn = seeded_randn(6, dtype=torch.float64)

    yield (
        "one head: q (5, 8), k (12, 8), v (12, 6), block_size 4",
        randn(5, 8),
        randn(12, 8),
        randn(12, 6),
        4,
    )
    yield (
        "batch and heads: q (2, 3, 5, 8), k and v (2, 3, 12, 8), block_size 5 (the last block has 2 keys)",
        randn(2, 3, 5, 8),
        randn(2, 3, 12, 8),
        randn(2, 3, 12, 8),
        5,
    )
    yield "block_size 1: one key at a time", randn(2, 4, 8), randn(2, 7, 8), randn(2, 7, 3), 1
    yield "block_size 16 >= S = 12: a single block", randn(5, 8), randn(12, 8), randn(12, 6), 16
    # every query's scores rise from block to block, so the running max changes at every block
    w = randn(8)
    q = 3 * w / w.norm() + 0.3 * randn(4, 8)  # every query points along w
    k = torch.linspace(0.2, 3.0, 12, dtype=torch.float64)[:, None] * w + 0.3 * randn(12, 8)
    yield "the max rises at every block: q (4, 8), k (12, 8), block_size 3", q, k, randn(12, 6), 3
    yield (
        "huge scores (about ±1000; exp overflows above ~710 in float64): q × 300, block_size 4",
        300 * randn(2, 5, 8),
        randn(2, 12, 8),
        randn(2, 12, 6),
        4,
    )
    # the same queries, keys along w scaled so that each score is about c: the scores fall from
    # about 1000 in the first block to 0..200 in the second (a block's own max is then no use)
    c = torch.cat([torch.linspace(1200, 1000, 4), torch.linspace(200, 0, 4)]).double()
    k = c[:, None] * w * math.sqrt(8) / (q @ w).mean() + 0.3 * randn(8, 8)
    yield (
        "huge scores that fall: 1000 to 1200 in the first block of 4 keys, 0 to 200 in the second",
        q,
        k,
        randn(8, 6),
        4,
    )


def _causal_cases():
    randn = seeded_randn(16, dtype=torch.float64)
    for case, batch, L, D, Dv, block_size in [
        (
            "is_causal=True: q, k, v (10, 8), block_size 4 (the last block has 2 keys)",
            (),
            10,
            8,
            8,
            4,
        ),
        ("is_causal=True, batch and heads: q, k, v (2, 3, 9, 8), block_size 3", (2, 3), 9, 8, 8, 3),
        ("is_causal=True, block_size 1: q, k (2, 6, 4), v (2, 6, 3)", (2,), 6, 4, 3, 1),
    ]:
        yield case, randn(*batch, L, D), randn(*batch, L, D), randn(*batch, L, Dv), block_size
    # the scores rise along the keys, to about 1000: each query's later keys score far higher
    # than the keys it may see
    w = randn(8)
    q = w / w.norm() + 0.01 * randn(8, 8)
    k = torch.linspace(0, 1000, 8, dtype=torch.float64)[:, None] * (w / w.norm()) * math.sqrt(8)
    yield (
        "is_causal=True, the later keys score up to 1000: q, k, v (8, 8), block_size 4",
        q,
        k + 0.01 * randn(8, 8),
        randn(8, 5),
        4,
    )


def _scores(q, k, causal):
    s = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if causal:
        L, S = s.shape[-2:]
        s = s.masked_fill(torch.ones(L, S, dtype=torch.bool).tril().logical_not(), -math.inf)
    return s


def _accepts(candidate, name: str) -> bool:
    """Whether the candidate's signature takes the keyword ``name`` (the lesson's skeleton does;
    an answer written to the older four-argument signature does not, and still passes)."""
    try:
        parameters = inspect.signature(candidate).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.name == name or p.kind is p.VAR_KEYWORD for p in parameters)


_OVERFLOW = (
    "inf or NaN in the output: an exp overflowed. Subtract the running max from the scores "
    "before each exp, and rescale the old sums by e^(m - m_new) when the max rises."
)

_CRASH_HINT = (
    "a shape mix-up. The running max m and sum ℓ are (..., L, 1), the output o is (..., L, Dv); "
    "one block is k[..., j:j + block_size, :] and v[..., j:j + block_size, :], its scores "
    "are (..., L, block). The last block may be shorter than block_size."
)

_PAIR = (
    "with return_lse=False (the default) the result is the output tensor alone; return the pair "
    "(output, lse) only when return_lse=True."
)


def _output(case, got, expected, mistakes, args, *, want_tensor_hint=""):
    """Hold the output to the reference, naming the classic mistake that gives it."""
    __tracebackhide__ = True  # noqa: F841
    if isinstance(got, (tuple, list)) and want_tensor_hint:
        raise ExerciseFailure(
            f"Case {case!r}: your result is a {type(got).__name__}, expected the output tensor.\n"
            f"Likely cause: {want_tensor_hint}"
        )
    require_shape(
        case,
        "the output",
        got,
        expected.shape,
        "the output is (..., L, Dv): one row per query, the size of the values.",
    )
    compare(
        case,
        "outputs",
        got,
        expected,
        atol=1e-6,
        rtol=1e-6,
        mistakes=mistakes,
        args=args,
        cause=None if torch.isfinite(got).all() else _OVERFLOW,
    )


def _require_no_matrix(candidate, case, args, kwargs, shape, what):
    """Run the candidate, and fail if any torch function in it made a tensor ending in ``shape``."""
    if builds(candidate, case, args, shape, _CRASH_HINT, **kwargs):
        raise ExerciseFailure(
            f"Case {case!r}: your function builds a tensor of shape (..., L, S) = "
            f"(..., {shape[0]}, {shape[1]}).\nLikely cause: {what}"
        )


_FULL_SCORES = (
    "the scores of all the keys are computed at once. The point of the exercise is to never "
    "hold them: take the keys block_size at a time, k[..., j:j + block_size, :], and compute "
    "only that block's (..., L, block) scores."
)
_FULL_MASK = (
    "the whole (L, S) causal mask is built (torch.ones(L, S).tril(), say). is_causal=True "
    "exists so that no L×S tensor is needed: make each block's mask from the positions of its "
    "keys and of the queries."
)


def _call(candidate, case, q, k, v, block_size, **flags):
    """The candidate on copies of the inputs (it may change them in place), with ``flags``."""
    __tracebackhide__ = True  # noqa: F841
    clones = (q.clone(), k.clone(), v.clone())
    return call_candidate(candidate, case, *clones, block_size, crash_hint=_CRASH_HINT, **flags)


def _check_lse(candidate, case, q, k, v, block_size, causal):
    """Call with return_lse=True; hold the pair (output, lse) to the reference."""
    __tracebackhide__ = True  # noqa: F841
    flags = {"return_lse": True} | ({"is_causal": True} if causal else {})
    got = _call(candidate, case, q, k, v, block_size, **flags)
    if not (isinstance(got, (tuple, list)) and len(got) == 2):
        made = "a tensor" if isinstance(got, torch.Tensor) else f"a {type(got).__name__}"
        raise ExerciseFailure(
            f"Case {case!r}: with return_lse=True your result is {made}; expected a pair "
            "(output, lse)."
        )
    s = _scores(q, k, causal)
    out, lse = got
    _output(case, out, torch.softmax(s, dim=-1) @ v, (), ())
    expected = torch.logsumexp(s, dim=-1)
    keepdim = isinstance(lse, torch.Tensor) and tuple(lse.shape) == (*expected.shape, 1)
    require_shape(
        case,
        "the lse",
        lse,
        expected.shape,
        "the lse has one number per query, (..., L), without the trailing axis of size 1 of the "
        "running state: squeeze it."
        if keepdim
        else "one number per query: (..., L).",
    )
    compare(
        case,
        "log-sum-exps",
        lse,
        expected,
        atol=1e-6,
        rtol=1e-6,
        mistakes=_LSE_MISTAKES,
        args=(q, k, v, block_size, "right" if causal else None),
    )


@checker(
    "attention_in_blocks",
    "Replace `raise NotImplementedError` with the online softmax: running max, running sum, "
    "rescaled output, one division at the end.",
    own_work=BLOCKS_ROUTINES,
)
def check_attention_in_blocks(candidate) -> int:
    """Check ``candidate(q, k, v, block_size) -> (..., L, Dv)`` against softmax(q kᵀ/√d_k) v, on
    several block sizes (one that does not divide S), a max that rises at every block and huge
    scores, and check that it never builds the full (..., L, S) score matrix. Where its signature
    takes them, also ``is_causal=True`` (query i attends to keys 0..i, each block masked on its
    own, no (L, S) mask) and ``return_lse=True`` (the pair (output, log-sum-exp (..., L)))."""
    causal, lse = _accepts(candidate, "is_causal"), _accepts(candidate, "return_lse")
    n = 0
    for case, q, k, v, block_size in _cases():
        got = _call(candidate, case, q, k, v, block_size)
        expected = torch.softmax(_scores(q, k, False), dim=-1) @ v
        _output(case, got, expected, _MISTAKES, (q, k, v, block_size), want_tensor_hint=_PAIR)
        n += 1

    case = "memory: q (2, 5, 8), k and v (2, 12, 8), block_size 4; no (..., 5, 12) score matrix"
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, L, 8, generator=g, dtype=torch.float64) for L in (5, 12, 12))
    _require_no_matrix(candidate, case, (q, k, v, 4), {}, (5, 12), _FULL_SCORES)
    n += 1

    if causal:
        for case, q, k, v, block_size in _causal_cases():
            got = _call(candidate, case, q, k, v, block_size, is_causal=True)
            expected = torch.softmax(_scores(q, k, True), dim=-1) @ v
            _output(case, got, expected, _CAUSAL_MISTAKES, (q, k, v, block_size))
            n += 1
        case = "is_causal=True, memory: q, k, v (2, 12, 8), block_size 4; no (12, 12) mask"
        q, k, v = (torch.randn(2, 12, 8, generator=g, dtype=torch.float64) for _ in range(3))
        _require_no_matrix(candidate, case, (q, k, v, 4), {"is_causal": True}, (12, 12), _FULL_MASK)
        n += 1

    if lse:
        randn = seeded_randn(26, dtype=torch.float64)
        lse_cases = [
            ("return_lse=True: q (2, 5, 8), k, v (2, 12, 8), block_size 4", False, (5, 12, 4)),
            ("return_lse=True, huge scores (q × 300), block_size 5", False, (5, 12, 5)),
        ]
        if causal:
            lse_cases.append(
                (
                    "return_lse=True, is_causal=True: q, k, v (2, 10, 8), block_size 3",
                    True,
                    (10, 10, 3),
                )
            )
        for i, (case, is_causal, (L, S, block_size)) in enumerate(lse_cases):
            q = randn(2, L, 8) * (300 if i == 1 else 1)
            _check_lse(candidate, case, q, randn(2, S, 8), randn(2, S, 8), block_size, is_causal)
            n += 1
    return n
