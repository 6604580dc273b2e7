"""Checkers for lesson 00 (softmax warm-up) and lesson 01 (scaled dot-product attention)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

from .. import attention, reference
from .._validate import shape_str
from ._core import (
    Mistake,
    _close,
    call_candidate,
    call_with_mask,
    checker,
    compare,
    require_shape,
)
from ._failure import ExerciseFailure
from ._steps import seeded_randn

__all__ = [
    "check_softmax",
    "check_scaled_dot_product_attention",
    "ATTENTION_ROUTINES",
    "keys_summed_hint",
    "call_attention",
]

# What lessons 01 and 06 ask the learner to write themselves (the checker names the one called).
ATTENTION_ROUTINES = {
    "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
    "the course's scaled_dot_product_attention (mha_course)": attention.scaled_dot_product_attention,
    "the course's reference (mha_course.reference)": reference.scaled_dot_product_attention,
}


# ---------------------------------------------------------------- softmax (lesson 00)

_SOFTMAX_MISTAKES = [
    Mistake(
        "wrong axis",
        lambda s: torch.softmax(s, dim=0),
        "you normalised over the first axis; softmax goes over the last one (dim=-1), so each row sums to 1.",
    ),
    Mistake(
        "not normalised",
        lambda s: s.exp(),
        "you took exp but did not divide by the row's sum: weights = e / e.sum(dim=-1, keepdim=True).",
    ),
    Mistake(
        "sum over everything",
        lambda s: s.exp() / s.exp().sum(),
        "you divided by the sum of the whole tensor; divide by each row's sum: .sum(dim=-1, keepdim=True).",
    ),
    Mistake(
        "no keepdim",
        lambda s: s.exp() / s.exp().sum(dim=-1),
        "the row sums need keepdim=True, otherwise they broadcast against the columns instead of the rows.",
    ),
]


def _softmax_cases():
    g = torch.Generator().manual_seed(0)
    yield "a vector of 5 scores", torch.randn(5, generator=g)
    yield "a (3, 4) matrix: one softmax per row", torch.randn(3, 4, generator=g)
    yield "a batch (2, 3, 4)", torch.randn(2, 3, 4, generator=g)
    yield "huge scores (up to 1000)", torch.tensor([[1000.0, 999.0, 0.0], [-5.0, 0.0, 5.0]])
    yield (
        "-inf scores (masked keys) get weight 0",
        torch.tensor([[0.5, float("-inf"), 1.0, float("-inf")]]),
    )


_SOFTMAX_OVERFLOW = (
    "exp overflowed to inf and inf/inf gave NaN: subtract each row's max before exp "
    "(softmax(x) = softmax(x - max(x))), or use torch.softmax."
)


@checker("softmax", "Replace `raise NotImplementedError` with your softmax over the last axis.")
def check_softmax(candidate) -> int:
    """Check ``candidate(scores)`` = softmax over the last axis, stable for large scores."""
    n = 0
    for case, scores in _softmax_cases():
        got = call_candidate(candidate, case, scores.clone())
        expected = torch.softmax(scores.double(), dim=-1)
        require_shape(
            case,
            "the result",
            got,
            expected.shape,
            "softmax keeps the shape of the scores; did you sum without keepdim=True?",
        )
        compare(
            case,
            "the weights",
            got,
            expected,
            mistakes=_SOFTMAX_MISTAKES,
            args=(scores.double(),),
            cause=_SOFTMAX_OVERFLOW if torch.isnan(got).any() else None,
        )
        n += 1
    return n


# ---------------------------------------------------------------- scaled dot-product attention (lesson 01)


def _scores(q, k, scale):
    return (q @ k.transpose(-2, -1)) * scale


def _attend(scores, v, mask=None, fill=float("-inf")):
    if mask is not None:
        scores = scores.masked_fill(~mask, fill)
    w = torch.softmax(scores, dim=-1)
    return w @ v, w


def _mistakes():
    def scaled(s):
        return lambda q, k, v, m: _attend(_scores(q, k, s(q.size(-1), v.size(-1))), v, m)

    return [
        Mistake(
            "no scale",
            scaled(lambda e, ev: 1.0),
            "the scores are not scaled: divide Q Kᵀ by √d_k, with d_k = query.size(-1).",
        ),
        Mistake(
            "divide by d_k",
            scaled(lambda e, ev: 1.0 / e),
            "you divided the scores by d_k; divide by its square root, √d_k = math.sqrt(query.size(-1)).",
        ),
        Mistake(
            "multiply by sqrt(d_k)",
            scaled(lambda e, ev: math.sqrt(e)),
            "you multiplied the scores by √d_k; divide by it instead.",
        ),
        Mistake(
            "sqrt of value size",
            scaled(lambda e, ev: 1.0 / math.sqrt(ev)),
            "you scaled by √(value size); the scale uses d_k, the size of the queries and keys: query.size(-1).",
        ),
        Mistake(
            "softmax over queries",
            lambda q, k, v, m: _mistake_softmax_axis(q, k, v, m),
            "the softmax runs over the wrong axis: weights must sum to 1 over the keys, softmax(scores, dim=-1).",
        ),
        Mistake(
            "mask ignored",
            lambda q, k, v, m: _attend(_scores(q, k, q.size(-1) ** -0.5), v),
            "the mask is ignored: your weights are what you get with no mask. Before the softmax, "
            "set the scores of masked keys to -inf: scores.masked_fill(~attn_mask, float('-inf')).",
        ),
        Mistake(
            "mask inverted",
            lambda q, k, v, m: _attend(
                _scores(q, k, q.size(-1) ** -0.5), v, ~m if m is not None else None
            ),
            "the mask is inverted: here True means 'may attend' (the convention of "
            "torch.nn.functional.scaled_dot_product_attention), so blank out where attn_mask is False: "
            "masked_fill(~attn_mask, float('-inf')).",
        ),
        Mistake(
            "mask filled with 0",
            lambda q, k, v, m: _attend(_scores(q, k, q.size(-1) ** -0.5), v, m, fill=0.0),
            "masked scores were set to 0, but exp(0) = 1, so masked keys still get weight. Fill them with "
            "float('-inf'), whose exp is 0.",
        ),
        Mistake(
            "mask after softmax",
            lambda q, k, v, m: _mistake_mask_after(q, k, v, m),
            "the mask was applied after the softmax, so the rows no longer sum to 1. Mask the scores "
            "(with -inf) before the softmax.",
        ),
        Mistake(
            "keys used as values",
            lambda q, k, v, m: (
                _attend(_scores(q, k, q.size(-1) ** -0.5), v, m)[1] @ k,
                _attend(_scores(q, k, q.size(-1) ** -0.5), v, m)[1],
            ),
            "the output mixes the keys; it should mix the values: output = weights @ value.",
        ),
        Mistake(
            "scores K Qᵀ",
            lambda q, k, v, m: _attend(_scores(k, q, q.size(-1) ** -0.5), v, m),
            "the scores are transposed: compute Q Kᵀ (query @ key.transpose(-2, -1)), so rows are queries "
            "and columns are keys.",
        ),
        Mistake(
            "no softmax",
            lambda q, k, v, m: _mistake_no_softmax(q, k, v, m),
            "the scores are used as weights without a softmax: weights = torch.softmax(scores, dim=-1).",
        ),
    ]


def _mistake_softmax_axis(q, k, v, m):
    s = _scores(q, k, q.size(-1) ** -0.5)
    if m is not None:
        s = s.masked_fill(~m, float("-inf"))
    w = torch.softmax(s, dim=-2)
    return w @ v, w


def _mistake_mask_after(q, k, v, m):
    _, w = _attend(_scores(q, k, q.size(-1) ** -0.5), v)
    w = w * m if m is not None else w
    return w @ v, w


def _mistake_no_softmax(q, k, v, m):
    s = _scores(q, k, q.size(-1) ** -0.5)
    return s @ v, s


def _sdpa_cases():
    randn = seeded_randn(1)

    yield (
        "one sentence: query (4, 8), key (6, 8), value (6, 5)",
        randn(4, 8),
        randn(6, 8),
        randn(6, 5),
        None,
    )
    yield (
        "a batch: query (2, 4, 8), key (2, 6, 8), value (2, 6, 5)",
        randn(2, 4, 8),
        randn(2, 6, 8),
        randn(2, 6, 5),
        None,
    )
    yield (
        "batch and heads: query (2, 3, 4, 8), key (2, 3, 6, 8), value (2, 3, 6, 8)",
        randn(2, 3, 4, 8),
        randn(2, 3, 6, 8),
        randn(2, 3, 6, 8),
        None,
    )
    yield (
        "another size: query (3, 5), key (4, 5), value (4, 3), so d_k = 5",
        randn(3, 5),
        randn(4, 5),
        randn(4, 3),
        None,
    )
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(
        2, 1, 6
    )  # 2 pad keys in sentence 2
    yield (
        "padding mask (2, 1, 6), True = may attend; the last 2 keys of sentence 2 are padding",
        randn(2, 4, 8),
        randn(2, 6, 8),
        randn(2, 6, 8),
        padding,
    )
    causal = torch.ones(5, 5, dtype=torch.bool).tril()
    yield (
        "causal mask (5, 5): query i may attend to keys 0..i",
        randn(5, 8),
        randn(5, 8),
        randn(5, 8),
        causal,
    )
    yield (
        "huge scores (query × 200): needs a stable softmax",
        200 * randn(3, 8),
        randn(4, 8),
        randn(4, 8),
        None,
    )


def keys_summed_hint(w: torch.Tensor) -> str | None:
    """When every key gets the same weight: the scores did not depend on the key."""
    rows = w.detach().double()
    if rows.size(-1) < 2 or not torch.allclose(rows, rows.mean(-1, keepdim=True), atol=1e-6):
        return None
    return (
        f"every key gets the same weight (1/S = 1/{w.size(-1)}): your scores do not depend on the "
        "key. Did the einsum (or a sum) add up over the keys? Keep one score per query and key: "
        "einsum('... l d, ... s d -> ... l s', query, key), i.e. query @ key.transpose(-2, -1)."
    )


def _scale_hint(q, k, w) -> str | None:
    """When the weights are a softmax of s·Q Kᵀ with the wrong s, say what s was."""
    raw = (q.double() @ k.double().transpose(-2, -1)).reshape(-1, k.size(-2))
    logw = w.detach().double().clamp_min(1e-300).log().reshape(-1, k.size(-2))
    raw_c, logw_c = raw - raw.mean(-1, keepdim=True), logw - logw.mean(-1, keepdim=True)
    s = (raw_c * logw_c).sum() / (raw_c * raw_c).sum()
    if not torch.isfinite(s) or (logw_c - s * raw_c).abs().max() > 1e-3:
        return None
    d_k, S, L = q.size(-1), k.size(-2), q.size(-2)
    expected = 1.0 / math.sqrt(d_k)
    fixed = round(1.0 / s.item() ** 2) if s.item() > 1e-3 else 0  # the d_k this scale is 1/√ of
    if fixed > 0 and fixed != d_k and math.isclose(s.item(), fixed**-0.5, rel_tol=1e-3):
        used = {
            S: f"S = {S}, the number of keys (key.size(-2))",
            L: f"L = {L}, the number of queries (query.size(-2))",
        }.get(fixed)
        if used is not None:
            return (
                f"you scaled by 1/√{used}. d_k is the size of each query and key vector: "
                f"d_k = query.size(-1) = {d_k} here."
            )
        return (
            f"your weights are softmax(scale · Q Kᵀ) with scale = {s.item():.4g} = 1/√{fixed}, but here "
            f"d_k = {d_k}: did you use a fixed d_k, such as a variable of the notebook? Take it "
            f"from the inputs: d_k = query.size(-1)."
        )
    return (
        f"your weights are softmax(scale · Q Kᵀ) with scale = {s.item():.4g}, but the scale must be "
        f"1/√d_k = {expected:.4g} (d_k = {d_k}, the size of each query and key vector)."
    )


def _weights_hint(q, k, w, mask) -> str | None:
    """What went wrong with weights that match no classic mistake, when it shows."""
    if torch.isnan(w).any():
        return (
            "NaN in the weights: exp overflowed. Use torch.softmax (it subtracts each row's max) "
            "instead of exp(scores) / sum."
        )
    if mask is None:  # the scale is read off the weights of every key, so only without a mask
        return keys_summed_hint(w) or _scale_hint(q, k, w) or _rows_hint(w)
    return keys_summed_hint(w) or _rows_hint(w)


def _rows_hint(w: torch.Tensor) -> str | None:
    rows = w.detach().double().sum(-1)
    if torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
        return None
    cols = w.detach().double().sum(-2)
    if torch.allclose(cols, torch.ones_like(cols), atol=1e-4):
        return "the columns of your weights sum to 1, not the rows: softmax over the keys, dim=-1."
    return "the rows of your weights do not sum to 1: did you apply torch.softmax(scores, dim=-1)?"


_CRASH_HINT = (
    "a shape mix-up. Check each step's shape: scores and weights are (..., L, S) = "
    "query @ key.transpose(-2, -1) (key.T reverses *all* axes of a batched tensor), and the output "
    "is weights @ value. A bool mask is inverted with ~attn_mask, not -attn_mask or 1 - attn_mask."
)


def _mask_hint(mask: torch.Tensor) -> str:
    return (
        f"your code runs without a mask but not with this one. attn_mask {shape_str(mask.shape)} "
        "is already shaped to broadcast against the scores (..., L, S): use it as it is, "
        "scores.masked_fill(~attn_mask, float('-inf')), with no unsqueeze, view or transpose."
    )


def call_attention(candidate, case, query, key, value, mask, *, crash_hint, mask_hint) -> tuple:
    """``candidate(query, key, value, attn_mask=mask)`` on copies of the inputs, held to returning
    a pair ``(output, weights)``. A crash says ``crash_hint``, or ``mask_hint(mask)`` when the
    code runs without the mask (lessons 01 and 02: a function, or a module)."""
    result = call_with_mask(
        candidate,
        case,
        query.clone(),
        key.clone(),
        value.clone(),
        attn_mask=mask,
        crash_hint=crash_hint,
        mask_hint=mask is not None and mask_hint(mask),
    )
    if not (isinstance(result, tuple) and len(result) == 2):
        raise ExerciseFailure(
            f"Case {case!r}: return a tuple (output, weights); got {type(result).__name__}"
            + (f" of length {len(result)}" if isinstance(result, tuple) else "")
            + "."
        )
    return result


def _in_order(case, out, w, ref_out, ref_w):
    """Fail when the pair came as (weights, output)."""
    if all(isinstance(t, torch.Tensor) for t in (out, w)) and (
        (out.shape == ref_w.shape and w.shape == ref_out.shape and out.shape != w.shape)
        or (_close(out, ref_w, 1e-5, 1e-4) and _close(w, ref_out, 1e-5, 1e-4))
    ):
        raise ExerciseFailure(
            f"Case {case!r}: you returned (weights, output): the first tensor is "
            f"{shape_str(out.shape)}, the shape of the weights, and the second "
            f"{shape_str(w.shape)}, that of the output.\n"
            "Likely cause: the order of the pair. Return (output, weights): "
            "return weights @ value, weights."
        )


def _weights_shape_hint(w, ref_w: torch.Tensor, mask) -> str:
    if isinstance(w, torch.Tensor) and tuple(w.shape) == (*ref_w.shape[:-1], 1):
        return (
            "your weights have one column instead of one per key: the einsum (or sum) removed the "
            "key axis. Keep it: einsum('... l d, ... s d -> ... l s', query, key)."
        )
    if mask is not None and isinstance(w, torch.Tensor) and w.dim() > ref_w.dim():
        return _mask_hint(mask)
    return (
        "weights are (..., L, S): one row per query, one column per key. "
        "Compute query @ key.transpose(-2, -1); key.T reverses *all* dims of a batched tensor."
    )


@checker(
    "scaled_dot_product_attention",
    "Replace `raise NotImplementedError` with your code: scores, scale, mask, softmax, weighted sum.",
    own_work=ATTENTION_ROUTINES,
)
def check_scaled_dot_product_attention(candidate) -> int:
    """Check ``candidate(query, key, value, attn_mask=None) -> (output, weights)`` against the
    reference, with and without masks (bool, True = may attend), batched and with a heads axis."""
    mistakes = _mistakes()
    n = 0
    for case, q, k, v, mask in _sdpa_cases():
        out, w = call_attention(
            candidate, case, q, k, v, mask, crash_hint=_CRASH_HINT, mask_hint=_mask_hint
        )
        ref_out, ref_w = reference.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), attn_mask=mask
        )
        _in_order(case, out, w, ref_out, ref_w)
        require_shape(case, "weights", w, ref_w.shape, _weights_shape_hint(w, ref_w, mask))
        output_hint = "output is (..., L, Ev): weights (..., L, S) @ value (..., S, Ev)."
        if isinstance(out, torch.Tensor) and out.shape[-1:] == k.shape[-1:] != v.shape[-1:]:
            output_hint = "your output has the keys' size; it should mix the values: output = weights @ value."
        require_shape(case, "output", out, ref_out.shape, output_hint)
        args = (q.double(), k.double(), v.double(), mask)
        compare(
            case,
            "weights",
            w,
            ref_w,
            mistakes=mistakes,
            args=args,
            pick=lambda r: r[1],
            cause=_weights_hint(q, k, w, mask),
        )
        compare(
            case,
            "outputs",
            out,
            ref_out,
            mistakes=mistakes,
            args=args,
            pick=lambda r: r[0],
            fallback_cause="the weights are right, so look at the last step: output = weights @ value.",
        )
        n += 1
    return n
