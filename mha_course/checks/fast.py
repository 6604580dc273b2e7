"""Checker for lesson 06: attention one block of keys at a time, with the online softmax."""

from __future__ import annotations

import math

import torch
from torch.overrides import TorchFunctionMode

from .. import reference
from ._core import Mistake, call_candidate, checker, compare, require_shape
from ._failure import ExerciseFailure
from ._steps import seeded_randn
from .attention import ATTENTION_ROUTINES

__all__ = ["check_attention_in_blocks"]

# What lesson 06 asks the learner to write themselves (the checker names the one called).
BLOCKS_ROUTINES = {
    **ATTENTION_ROUTINES,
    "the course's reference (mha_course.reference)": reference.attention_in_blocks,
}


# ---------------------------------------------------------------- the classic wrong versions


def _blocks(q, k, v, block_size, scale=True):
    """Each block's (tile of scores (..., L, block), values (..., block, Dv))."""
    d = math.sqrt(q.size(-1)) if scale else 1.0
    for j in range(0, k.size(-2), block_size):
        yield q @ k[..., j : j + block_size, :].transpose(-2, -1) / d, v[..., j : j + block_size, :]


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
):
    """The online softmax with switches that turn it into one of the classic mistakes."""
    m = q.new_full(q.shape[:-1] + (1,), -math.inf)
    sum_exp = q.new_zeros(q.shape[:-1] + (1,))
    o = q.new_zeros(q.shape[:-1] + v.shape[-1:])
    for s, v_j in _blocks(q, k, v, block_size, scale):
        block_max = s.amax(dim=-1, keepdim=True)
        m_new = torch.maximum(m, block_max) if running_max else block_max
        if not subtract_max:
            m_new = torch.zeros_like(m_new)
        factor = torch.exp(m - m_new) if subtract_max else torch.ones_like(m)
        p = torch.exp(s - m_new)
        if accumulate:
            sum_exp = sum_exp * (factor if rescale_sum else 1) + p.sum(dim=-1, keepdim=True)
            o = o * (factor if rescale_out else 1) + p @ v_j
        else:
            sum_exp, o = p.sum(dim=-1, keepdim=True), p @ v_j
        if divide_inside:
            o = o / sum_exp
        m = m_new
    return o / sum_exp if divide_at_end and not divide_inside else o


def _blockwise_softmax(q, k, v, block_size, average):
    """Each block normalised on its own, then summed (or averaged) over the blocks."""
    parts = [torch.softmax(s, dim=-1) @ v_j for s, v_j in _blocks(q, k, v, block_size)]
    total = sum(parts)
    return total / len(parts) if average else total


_EACH_BLOCK = (
    "you normalised each block on its own (a softmax per block). A block's exponentials must be "
    "divided by the sum over *all* keys, which is known only at the end: keep the running sum ℓ "
    "and the unnormalised output o, and return o / ℓ after the loop."
)

_MISTAKES = [
    Mistake(
        "running sum not rescaled",
        lambda q, k, v, b: _online(q, k, v, b, rescale_sum=False),
        "when the running max rises from m to m_new, the running sum ℓ must be rescaled too: "
        "ℓ = ℓ · exp(m - m_new) + p.sum(dim=-1, keepdim=True). Yours adds the new block's sum "
        "without rescaling the old one.",
    ),
    Mistake(
        "output not rescaled",
        lambda q, k, v, b: _online(q, k, v, b, rescale_out=False),
        "when the running max rises from m to m_new, the running output o must be rescaled too: "
        "o = o · exp(m - m_new) + p @ v_j. Yours adds the new block without rescaling the old o.",
    ),
    Mistake(
        "nothing rescaled",
        lambda q, k, v, b: _online(q, k, v, b, rescale_sum=False, rescale_out=False),
        "nothing is rescaled when the running max changes. What was summed under the old max m "
        "is e^(s - m); under the new max it must be e^(s - m_new) = e^(s - m) · exp(m - m_new). "
        "Multiply both ℓ and o by exp(m - m_new) before adding the new block.",
    ),
    Mistake(
        "block max instead of the running max",
        lambda q, k, v, b: _online(q, k, v, b, running_max=False),
        "m must be the running max over all the blocks so far: m_new = torch.maximum(m, "
        "s.amax(dim=-1, keepdim=True)). With the block's own max, exp(m - m_new) overflows when a "
        "later block has much smaller scores.",
    ),
    Mistake(
        "max not subtracted",
        lambda q, k, v, b: _online(q, k, v, b, subtract_max=False),
        "exp overflowed: the running max is not subtracted. Take p = exp(s - m_new), with m_new "
        "the running max of the scores seen so far, so that every exponential is at most 1.",
    ),
    Mistake(
        "divided inside the loop",
        lambda q, k, v, b: _online(q, k, v, b, divide_inside=True),
        "you divided by the running sum inside the loop, and the next block then adds unnormalised "
        "values to a normalised o. Keep o unnormalised and divide once, at the end: o / ℓ.",
    ),
    Mistake(
        "each block normalised", lambda q, k, v, b: _blockwise_softmax(q, k, v, b, 0), _EACH_BLOCK
    ),
    Mistake("blocks averaged", lambda q, k, v, b: _blockwise_softmax(q, k, v, b, 1), _EACH_BLOCK),
    Mistake(
        "last block only",
        lambda q, k, v, b: _online(q, k, v, b, accumulate=False),
        "your result is the attention over the last block of keys only: the loop overwrites ℓ and "
        "o instead of accumulating. Add to them: o = o · exp(m - m_new) + p @ v_j.",
    ),
    Mistake(
        "not divided at the end",
        lambda q, k, v, b: _online(q, k, v, b, divide_at_end=False),
        "o is the unnormalised sum Σ e^(s - m) v; the softmax needs the division by the running "
        "sum at the end: return o / ℓ.",
    ),
    Mistake(
        "no scale",
        lambda q, k, v, b: _online(q, k, v, b, scale=False),
        "the scores are not scaled: s = q @ k_j.transpose(-2, -1) / √d_k, with d_k = q.size(-1).",
    ),
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


class _Shapes(TorchFunctionMode):
    """Records the shape of every tensor that a torch function or tensor method returns."""

    def __init__(self):
        super().__init__()
        self.shapes: list[tuple[int, ...]] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(t, torch.Tensor):
                self.shapes.append(tuple(t.shape))
        return out


def builds(candidate, case: str, args, last_two: tuple[int, int], crash_hint: str) -> bool:
    """Whether ``candidate(*args)`` makes a tensor whose last two dims are ``last_two``."""
    with _Shapes() as seen:
        call_candidate(candidate, case, *args, crash_hint=crash_hint)
    return any(shape[-2:] == last_two for shape in seen.shapes)


_OVERFLOW = (
    "inf or NaN in the output: an exp overflowed. Subtract the running max before exp: "
    "p = exp(s - m_new), rescale = exp(m - m_new), with m_new = torch.maximum(m, block max)."
)

_CRASH_HINT = (
    "a shape mix-up. The running max m and sum ℓ are (..., L, 1), the output o is (..., L, Dv); "
    "one block is k[..., j:j + block_size, :] and v[..., j:j + block_size, :], its scores "
    "q @ k_j.transpose(-2, -1) are (..., L, block). The last block may be shorter than block_size."
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
    scores, and check that it never builds the full (..., L, S) score matrix."""
    n = 0
    for case, q, k, v, block_size in _cases():
        got = call_candidate(
            candidate, case, q.clone(), k.clone(), v.clone(), block_size, crash_hint=_CRASH_HINT
        )
        expected = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(q.size(-1)), dim=-1) @ v
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
            mistakes=_MISTAKES,
            args=(q, k, v, block_size),
            cause=None if torch.isfinite(got).all() else _OVERFLOW,
        )
        n += 1

    case = "memory: q (2, 5, 8), k and v (2, 12, 8), block_size 4; no (..., 5, 12) score matrix"
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, L, 8, generator=g, dtype=torch.float64) for L in (5, 12, 12))
    if builds(candidate, case, (q, k, v, 4), (5, 12), _CRASH_HINT):
        raise ExerciseFailure(
            f"Case {case!r}: your function builds the full (..., L, S) = (..., 5, 12) score matrix.\n"
            "Likely cause: the scores of all the keys are computed at once. The point of the "
            "exercise is to never hold them: take the keys block_size at a time, "
            "k[..., j:j + block_size, :], and compute only that block's (..., L, block) scores."
        )
    return n + 1
