"""Checkers for lesson 08's attention: grouped-query attention (query heads sharing key/value
heads), and sliding-window attention computed one block of queries at a time."""

from __future__ import annotations

import math

import torch

from .. import masks, modern, reference
from ._core import Mistake, call_candidate, checker, compare, require_shape
from ._failure import ExerciseFailure
from ._steps import seeded_randn
from ._table import builds
from .attention import ATTENTION_ROUTINES, _in_order, _mistakes, call_attention

__all__ = ["check_grouped_query_attention", "check_sliding_window_attention"]


# ---------------------------------------------------------------- grouped_query_attention


def _shared(x, H, order):
    """key or value (B, H_kv, S, ·) -> (B, H, S, ·): the key/value head each query head reads."""
    H_kv = x.size(-3)
    index = {
        "interleave": torch.arange(H) // (H // H_kv),  # query head h reads h // G: right
        "repeat": torch.arange(H) % H_kv,  # x.repeat(1, G, 1, 1)
        "divide by H_kv": (torch.arange(H) // H_kv).clamp(max=H_kv - 1),
    }[order]
    return x.index_select(-3, index)


def _grouped(order="interleave", mistake=None):
    """GQA through lesson 01's attention (or one of its classic mistakes), heads shared ``order``."""

    def run(q, k, v, m):
        H = q.size(-3)
        k, v = _shared(k, H, order), _shared(v, H, order)
        if mistake is None:
            return reference.scaled_dot_product_attention(q, k, v, attn_mask=m)
        return mistake.run(q, k, v, m)

    return run


_INTERLEAVE = (
    "query head h reads key/value head h // G, G = H / H_kv: heads 0..G-1 share key/value head 0, "
    "the next G share head 1, and so on (torch's repeat_interleave order, what "
    "scaled_dot_product_attention(..., enable_gqa=True) does)"
)


def _gqa_mistakes():
    return [
        Mistake(
            "repeat instead of repeat_interleave",
            _grouped("repeat"),
            "your query heads read the key/value heads in turn, h % H_kv: that is "
            "key.repeat(...), which stacks whole copies (0, 1, 0, 1, ...). The grouping is "
            f"consecutive: {_INTERLEAVE}.",
        ),
        Mistake(
            "h // H_kv",
            _grouped("divide by H_kv"),
            "your query head h reads key/value head h // H_kv. Divide by the group size "
            f"G = H / H_kv instead: {_INTERLEAVE}.",
        ),
        *(Mistake(m.name, _grouped(mistake=m), m.explanation) for m in _mistakes()),
    ]


def _gqa_cases():
    randn = seeded_randn(28)
    yield (
        "GQA: query (2, 4, 5, 8), key and value (2, 2, 5, 8): G = 2",
        randn(2, 4, 5, 8),
        randn(2, 2, 5, 8),
        randn(2, 2, 5, 8),
        None,
    )
    yield (
        "MQA: query (1, 4, 3, 8), key and value (1, 1, 6, 8): one key/value head for all",
        randn(1, 4, 3, 8),
        randn(1, 1, 6, 8),
        randn(1, 1, 6, 8),
        None,
    )
    yield (
        "MHA: query, key and value (2, 3, 4, 8): H_kv = H",
        randn(2, 3, 4, 8),
        randn(2, 3, 4, 8),
        randn(2, 3, 4, 8),
        None,
    )
    yield (
        "G = 2 with H_kv = 3: query (1, 6, 4, 8), key (1, 3, 7, 8), value (1, 3, 7, 5)",
        randn(1, 6, 4, 8),
        randn(1, 3, 7, 8),
        randn(1, 3, 7, 5),
        None,
    )
    yield (
        "causal mask (5, 5), True = may attend: query (2, 8, 5, 4), key and value (2, 2, 5, 4)",
        randn(2, 8, 5, 4),
        randn(2, 2, 5, 4),
        randn(2, 2, 5, 4),
        torch.ones(5, 5, dtype=torch.bool).tril(),
    )
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 1, 6)
    yield (
        "padding mask (2, 1, 1, 6): the last 2 keys of sequence 2 are padding",
        randn(2, 4, 3, 8),
        randn(2, 2, 6, 8),
        randn(2, 2, 6, 8),
        padding,
    )


_GQA_CRASH = (
    "a shape mix-up. query is (B, H, L, D), key and value (B, H_kv, S, ·) with fewer heads: give "
    "each query head its key/value head first (dim -3 grows from H_kv to H), then attention as "
    "in lesson 01: scores and weights (B, H, L, S)."
)


def _gqa_mask_hint(mask: torch.Tensor) -> str:
    return (
        f"your code runs without a mask but not with this one. attn_mask {tuple(mask.shape)} "
        "broadcasts against the scores (B, H, L, S) as it is: mask them with it after the key/value "
        "heads are shared out."
    )


@checker(
    "grouped_query_attention",
    "Replace `raise NotImplementedError` with attention whose query heads share key/value heads.",
    own_work=ATTENTION_ROUTINES,
)
def check_grouped_query_attention(candidate) -> int:
    """Check ``candidate(query (B, H, L, D), key, value (B, H_kv, S, ·), attn_mask=None) ->
    (output (B, H, L, Dv), weights (B, H, L, S))``: query head h reads key/value head h // G."""
    mistakes = _gqa_mistakes()
    n = 0
    for case, q, k, v, mask in _gqa_cases():
        out, w = call_attention(
            candidate, case, q, k, v, mask, crash_hint=_GQA_CRASH, mask_hint=_gqa_mask_hint
        )
        args = (q.double(), k.double(), v.double(), mask)
        ref_out, ref_w = reference.grouped_query_attention(*args[:3], attn_mask=mask)
        _in_order(case, out, w, ref_out, ref_w)
        require_shape(
            case,
            "weights",
            w,
            ref_w.shape,
            "weights are (B, H, L, S): one row per query of every *query* head.",
        )
        require_shape(case, "output", out, ref_out.shape, "output is (B, H, L, Dv).")
        for what, got, expected, pick in (
            ("weights", w, ref_w, lambda r: r[1]),
            ("outputs", out, ref_out, lambda r: r[0]),
        ):
            compare(
                case,
                what,
                got,
                expected,
                mistakes=mistakes,
                args=args,
                pick=pick,
                fallback_cause=f"check which key/value head each query head reads: {_INTERLEAVE}.",
            )
        n += 1
    _require_value_error(candidate)
    return n + 1


def _require_value_error(candidate) -> None:
    """6 query heads cannot share 4 key/value heads equally: a ValueError, not a wrong answer."""
    case = "6 query heads, 4 key/value heads: 6 is not a multiple of 4"
    randn = seeded_randn(29)
    q, k = randn(1, 6, 3, 8), randn(1, 4, 3, 8)
    try:
        result = candidate(q, k, k.clone())
    except ValueError:
        return
    except NotImplementedError:
        raise
    except Exception as error:
        raise ExerciseFailure(
            f"Case {case!r}: your code raised {type(error).__name__}: {str(error).splitlines()[0]}\n"
            "Likely cause: the heads are not checked. Raise a ValueError that says H must be a "
            "multiple of H_kv (with both numbers), before anything else."
        ) from error
    got = type(result).__name__
    raise ExerciseFailure(
        f"Case {case!r}: expected a ValueError, your code returned a {got}.\n"
        "Likely cause: the heads are not checked, so some query heads got no key/value head or "
        "a wrong one. Raise a ValueError when query.size(-3) is not a multiple of key.size(-3)."
    )


# ---------------------------------------------------------------- sliding_window_attention


def _windowed(allowed):
    """Dense attention, query i seeing key j where ``allowed(i, j)`` (index tensors)."""

    def run(q, k, v, window, scale=True):
        L = q.size(-2)
        i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
        scores = q @ k.transpose(-2, -1) / (math.sqrt(q.size(-1)) if scale else 1.0)
        scores = scores.masked_fill(~allowed(i, j, window), float("-inf"))
        return scores.softmax(dim=-1) @ v

    return run


def _block_local(q, k, v, window):
    """Each block of ``window`` queries attends only within its own block (causally)."""
    i, j = torch.arange(q.size(-2))[:, None], torch.arange(q.size(-2))[None, :]
    same_block = (i // window) == (j // window)
    return _windowed(lambda i, j, w: (j <= i) & same_block)(q, k, v, window)


_WINDOW = "query i sees keys i - window + 1 .. i: `window` keys, itself included"

_WINDOW_MISTAKES = [
    Mistake(
        "one key too many",
        _windowed(lambda i, j, w: (j <= i) & (i - j <= w)),
        f"your window holds window + 1 keys (i - j <= window). The window counts the query's own "
        f"key: {_WINDOW}, i.e. i - j < window.",
    ),
    Mistake(  # the same, in blocks of `window` queries that read window - 1 keys back
        "one key too many, in blocks",
        _windowed(lambda i, j, w: (j <= i) & (i - j <= w) & (j > (i // w) * w - w)),
        f"your mask lets a query see window + 1 keys (i - j <= window). The window counts the "
        f"query's own key: {_WINDOW}, i.e. i - j < window.",
    ),
    Mistake(
        "one key too few",
        _windowed(lambda i, j, w: (j <= i) & (i - j < w - 1)),
        f"your window holds window - 1 keys: {_WINDOW}, i.e. 0 <= i - j < window.",
    ),
    Mistake(
        "not causal",
        _windowed(lambda i, j, w: (i - j).abs() < w),
        "your window looks ahead too: a query also sees up to window - 1 keys after it. A "
        f"decoder's window is causal: {_WINDOW}.",
    ),
    Mistake(
        "window ignored",
        _windowed(lambda i, j, w: j <= i),
        f"your result is plain causal attention: every query sees all the keys before it. "
        f"The window limits that: {_WINDOW}.",
    ),
    Mistake(
        "no scale",
        lambda q, k, v, w: _windowed(lambda i, j, w: (j <= i) & (i - j < w))(q, k, v, w, False),
        "the scores are not scaled: divide by √D, D = q.size(-1).",
    ),
    Mistake(
        "each block on its own",
        _block_local,
        "each block of queries attends only to the keys of its own block. The first queries of a "
        "block reach back into the previous block: the block of queries [s, e) needs the keys "
        "from s - window + 1 (or 0) to e - 1.",
    ),
]


def _window_cases():
    randn = seeded_randn(38, dtype=torch.float64)
    yield "q, k, v (12, 8), window 4", randn(12, 8), randn(12, 8), randn(12, 8), 4
    yield (
        "batch and heads: (2, 3, 16, 8), window 5 (16 is not a multiple of 5)",
        randn(2, 3, 16, 8),
        randn(2, 3, 16, 8),
        randn(2, 3, 16, 8),
        5,
    )
    yield "window 1: each query sees only itself", randn(7, 4), randn(7, 4), randn(7, 4), 1
    yield (
        "window 20 >= L = 9: plain causal attention",
        randn(2, 9, 4),
        randn(2, 9, 4),
        randn(2, 9, 4),
        20,
    )
    yield "values of another size: v (10, 3), window 3", randn(10, 6), randn(10, 6), randn(10, 3), 3


_WINDOW_CRASH = (
    "a shape mix-up. A block of queries q[..., s:e, :] and its keys k[..., first:e, :] give scores "
    "(..., e - s, e - first); the mask of that block must have the same last two dims, with query "
    "s + a at row a and key first + b at column b. The last block may be shorter: e is at most L."
)


@checker(
    "sliding_window_attention",
    "Replace `raise NotImplementedError` with attention over a window of keys, one block of "
    "queries at a time.",
    own_work={
        "the course's sliding_window_attention (mha_course.modern)": modern.sliding_window_attention,
        "the course's reference (mha_course.reference)": reference.sliding_window_attention,
        "the course's sliding_window_mask (mha_course.masks)": masks.sliding_window_mask,
    },
)
def check_sliding_window_attention(candidate) -> int:
    """Check ``candidate(q, k (..., L, D), v (..., L, Dv), window)`` -> (..., L, Dv): causal
    attention over the last ``window`` keys, and that it never builds an (L, L) tensor."""
    n = 0
    for case, q, k, v, window in _window_cases():
        got = call_candidate(
            candidate, case, q.clone(), k.clone(), v.clone(), window, crash_hint=_WINDOW_CRASH
        )
        expected = reference.sliding_window_attention(q, k, v, window)
        require_shape(case, "the output", got, expected.shape, "the output is (..., L, Dv).")
        compare(
            case,
            "outputs",
            got,
            expected,
            atol=1e-6,
            rtol=1e-6,
            mistakes=_WINDOW_MISTAKES,
            args=(q, k, v, window),
            fallback_cause=f"check the window ({_WINDOW}) and the scale 1/√D.",
        )
        n += 1

    L, window = 24, 4
    case = f"memory: q, k, v (2, {L}, 8), window {window}; no ({L}, {L}) tensor"
    randn = seeded_randn(39, dtype=torch.float64)
    q, k, v = randn(2, L, 8), randn(2, L, 8), randn(2, L, 8)
    if builds(candidate, case, (q, k, v, window), (L, L), _WINDOW_CRASH):
        raise ExerciseFailure(
            f"Case {case!r}: your function builds an (L, L) = ({L}, {L}) tensor (the scores, or a "
            "mask).\nLikely cause: all the queries at once. The point of the window is never to "
            "need them all: take the queries a block at a time, q[..., s:e, :], and only the keys "
            "their windows reach, k[..., max(0, s - window + 1):e, :]."
        )
    return n + 1
