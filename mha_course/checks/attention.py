"""Checkers for lesson 00 (softmax warm-up) and lesson 01 (scaled dot-product attention)."""

from __future__ import annotations

import inspect
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
from ._steps import build_module, seeded_randn

__all__ = [
    "check_softmax",
    "check_scaled_dot_product_attention",
    "check_self_attention",
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
        "max subtracted, summed over the first axis",
        lambda s: _shifted_exp(s) / _shifted_exp(s).sum(dim=0, keepdim=True),
        "you subtracted each row's max (right), but then divided by sums over the first axis "
        "(dim=0), one per column; divide each row by its own sum: .sum(dim=-1, keepdim=True).",
    ),
    Mistake(
        "each column's max subtracted",
        lambda s: (lambda e: e / e.sum(dim=-1, keepdim=True))(
            (s - s.amax(dim=0, keepdim=True)).exp()
        ),
        "you subtracted each column's max (dim=0), a different number in every column of a row, "
        "which changes the row's softmax; subtract each row's own max: .amax(dim=-1, keepdim=True).",
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


def _shifted_exp(s):
    return (s - s.amax(dim=-1, keepdim=True)).exp()


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


_SOFTMAX_CRASH = (
    "a shape mix-up. A row's max and a row's sum must keep their axis (keepdim=True) to line "
    "up with the rows: shape (..., 1), not (...)."
)


@checker("softmax", "Replace `raise NotImplementedError` with your softmax over the last axis.")
def check_softmax(candidate) -> int:
    """Check ``candidate(scores)`` = softmax over the last axis, stable for large scores."""
    n = 0
    for case, scores in _softmax_cases():
        got = call_candidate(candidate, case, scores.clone(), crash_hint=_SOFTMAX_CRASH)
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


def _compare_attention(case, got, expected, q, k, v, mask, mistakes, args, weights_cause):
    """Hold ``got = (output, weights)`` to ``expected``: order, shapes, then values, naming the
    classic mistake (run on ``args``) that gives what the candidate gave."""
    (out, w), (ref_out, ref_w) = got, expected
    _in_order(case, out, w, ref_out, ref_w)
    require_shape(case, "weights", w, ref_w.shape, _weights_shape_hint(w, ref_w, mask))
    output_hint = "output is (..., L, Ev): weights (..., L, S) @ value (..., S, Ev)."
    if isinstance(out, torch.Tensor) and out.shape[-1:] == k.shape[-1:] != v.shape[-1:]:
        output_hint = (
            "your output has the keys' size; it should mix the values: output = weights @ value."
        )
    require_shape(case, "output", out, ref_out.shape, output_hint)
    compare(
        case,
        "weights",
        w,
        ref_w,
        mistakes=mistakes,
        args=args,
        pick=lambda r: r[1],
        cause=weights_cause(w),
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


# ---------------------------------------------------------------- the lesson's full signature
# Lesson 01's skeleton is scaled_dot_product_attention(query, key, value, attn_mask=None,
# is_causal=False, scale=None), with float masks and queries that may attend to nothing. A
# candidate whose signature accepts ``scale`` is held to those too (``is_causal`` when it accepts
# that); one written to the older skeleton, (query, key, value, attn_mask=None), to the cases above.


def _accepts(candidate, name: str) -> bool:
    try:
        parameters = inspect.signature(candidate).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def _variant(
    scale_rule="given", float_mask="add", bool_fill=float("-inf"), empty="zero", causal="tril"
):
    """The lesson's attention with one flaw switched on (the defaults are right)."""

    def attention_(query, key, value, attn_mask=None, is_causal=False, scale=None):
        d_k, L, S = query.size(-1), query.size(-2), key.size(-2)
        s = d_k**-0.5 if scale is None or scale_rule == "ignored" else scale
        scores = _scores(query, key, 1 / s if scale_rule == "divided" and scale else s)
        if is_causal and causal != "ignored":
            diagonal = {"tril": 0, "tril(-1)": -1, "bottom-right": S - L}.get(causal, 0)
            attn_mask = torch.ones(L, S, dtype=torch.bool).tril(diagonal)
            attn_mask = attn_mask.T.contiguous() if causal == "triu" else attn_mask
        if attn_mask is not None and attn_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attn_mask, bool_fill)
        elif attn_mask is not None and float_mask == "add":
            scores = scores + attn_mask
        elif attn_mask is not None and float_mask == "multiplied":
            scores = scores * attn_mask
        elif attn_mask is not None and float_mask == "as bool":
            scores = scores.masked_fill(attn_mask == 0, float("-inf"))
        nothing = scores.isneginf().all(dim=-1, keepdim=True)
        if empty == "zero":
            scores = scores.masked_fill(nothing, 0.0)
        weights = torch.softmax(scores, dim=-1)
        if empty == "zero":
            weights = weights.masked_fill(nothing, 0.0)
        return weights @ value, weights

    return attention_


_EMPTY_NAN = (
    "a query with nothing to attend to: its scores are all -inf, and the softmax of such a row "
    "is 0/0 = NaN. Find those rows and give them weights of 0 (so an output of 0), never NaN."
)

_FULL_MISTAKES = [
    Mistake(
        "scale ignored",
        _variant(scale_rule="ignored"),
        "the scale argument is ignored: when it is given, it replaces 1/√d_k (scores · scale).",
    ),
    Mistake(
        "divided by the scale",
        _variant(scale_rule="divided"),
        "you divided by the scale; it multiplies the scores, as in torch (its default is "
        "1/√d_k, not √d_k).",
    ),
    Mistake(
        "float mask ignored",
        _variant(float_mask="ignored"),
        "the float mask is ignored: a float attn_mask is added to the scores (0: no change, "
        "-inf: blocked, any other number: a bias).",
    ),
    Mistake(
        "float mask multiplied",
        _variant(float_mask="multiplied"),
        "the float mask was multiplied into the scores; it is added to them.",
    ),
    Mistake(
        "float mask read as bool",
        _variant(float_mask="as bool"),
        "a float mask is not True/False: its 0 entries mean 'allowed, no change', and the whole "
        "mask is added to the scores.",
    ),
    Mistake(
        "empty rows uniform",
        _variant(bool_fill=-1e9, empty="nan"),
        "a query with nothing to attend to got equal weights on every key: a large finite fill "
        "(-1e9) instead of -inf spreads its weight evenly. Its weights, and so its output, must be 0.",
    ),
    Mistake(
        "empty rows NaN",
        _variant(empty="nan"),
        _EMPTY_NAN,
    ),
    Mistake(
        "is_causal ignored",
        _variant(causal="ignored"),
        "is_causal=True is ignored: it means query i may attend to keys 0..i only.",
    ),
    Mistake(
        "is_causal upper triangle",
        _variant(causal="triu"),
        "with is_causal=True each query sees the future: keep the keys j <= i, the lower "
        "triangle, diagonal included.",
    ),
    Mistake(
        "is_causal without the diagonal",
        _variant(causal="tril(-1)"),
        "with is_causal=True the diagonal is missing: query i may attend to itself (keys j <= i).",
    ),
    Mistake(
        "is_causal bottom-right",
        _variant(causal="bottom-right"),
        "with more keys than queries, is_causal is aligned top-left, as in torch: query i may "
        "attend to keys 0..i, whatever S.",
    ),
]


def _full_cases(causal: bool):
    """``(case, query, key, value, kwargs)`` for the lesson's full signature."""
    randn = seeded_randn(2)
    yield (
        "scale = 0.5 given: it replaces 1/√d_k",
        randn(4, 8),
        randn(6, 8),
        randn(6, 5),
        {"scale": 0.5},
    )
    yield (
        "scale = None given: 1/√d_k",
        randn(2, 4, 8),
        randn(2, 6, 8),
        randn(2, 6, 5),
        {"scale": None},
    )
    yield (
        "a float mask (4, 6) added to the scores: a bias, no -inf",
        randn(4, 8),
        randn(6, 8),
        randn(6, 5),
        {"attn_mask": 2 * randn(4, 6)},
    )
    padding = torch.zeros(2, 1, 6)
    padding[1, :, 4:] = float("-inf")
    yield (
        "a float padding mask (2, 1, 6): 0 for real keys, -inf for the last 2 of sentence 2",
        randn(2, 4, 8),
        randn(2, 6, 8),
        randn(2, 6, 8),
        {"attn_mask": padding},
    )
    nothing = torch.rand(4, 6, generator=torch.Generator().manual_seed(3)) > 0.4
    nothing[:, 0], nothing[1] = True, False
    yield (
        "a bool mask (4, 6) where query 1 may attend to nothing",
        randn(4, 8),
        randn(6, 8),
        randn(6, 5),
        {"attn_mask": nothing},
    )
    empty_sentence = torch.tensor([[True] * 5, [False] * 5]).view(2, 1, 5)
    yield (
        "a padded batch (2, 1, 5) whose second sentence has no real token",
        randn(2, 3, 8),
        randn(2, 5, 8),
        randn(2, 5, 4),
        {"attn_mask": empty_sentence},
    )
    blocked = torch.zeros(3, 4)
    blocked[2] = float("-inf")
    yield (
        "a float mask (3, 4) whose last row is all -inf",
        randn(3, 8),
        randn(4, 8),
        randn(4, 5),
        {"attn_mask": blocked},
    )
    if causal:
        yield (
            "is_causal=True, L = S = 5",
            randn(5, 8),
            randn(5, 8),
            randn(5, 8),
            {"is_causal": True},
        )
        yield (
            "is_causal=True, 4 queries and 6 keys: query i may attend to keys 0..i",
            randn(2, 4, 8),
            randn(2, 6, 8),
            randn(2, 6, 3),
            {"is_causal": True},
        )


_FLOAT_MASK_CRASH = (
    "a float mask is added to the scores; ~ and masked_fill are for a bool mask. Tell the two "
    "kinds apart first: attn_mask.dtype == torch.bool."
)


def _in_double(kwargs: dict) -> dict:
    mask = kwargs.get("attn_mask")
    if mask is None or mask.dtype == torch.bool:
        return kwargs
    return {**kwargs, "attn_mask": mask.double()}


def _full_weights_cause(q, k, mask, expected_w):
    """NaN where the reference has an empty row: the query with nothing to attend to."""

    def cause(w):
        if isinstance(w, torch.Tensor) and torch.isnan(w).any():
            empty = (expected_w == 0).all(dim=-1)
            if bool(torch.isnan(w).any(dim=-1).eq(empty).all()) and bool(empty.any()):
                return _EMPTY_NAN
        return _weights_hint(q, k, w, mask)

    return cause


def _with_kwargs(mistake: Mistake, kwargs: dict) -> Mistake:
    return Mistake(mistake.name, lambda *args: mistake.run(*args, **kwargs), mistake.explanation)


def _plain_weights_cause(q, k, mask):
    return lambda w: _weights_hint(q, k, w, mask)


def _check_full_signature(candidate, causal: bool) -> int:
    n = 0
    for case, q, k, v, kwargs in _full_cases(causal):
        mask = kwargs.get("attn_mask")
        floating = mask is not None and mask.is_floating_point()
        hint = _FLOAT_MASK_CRASH if floating else _CRASH_HINT
        got = call_candidate(
            candidate, case, q.clone(), k.clone(), v.clone(), crash_hint=hint, **kwargs
        )
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ExerciseFailure(f"Case {case!r}: return a tuple (output, weights).")
        double = (q.double(), k.double(), v.double())
        expected = reference.scaled_dot_product_attention(*double, **_in_double(kwargs))
        _compare_attention(
            case,
            got,
            expected,
            q,
            k,
            v,
            mask,
            [_with_kwargs(m, _in_double(kwargs)) for m in _FULL_MISTAKES],
            double,
            _full_weights_cause(q, k, mask, expected[1]),
        )
        n += 1
    return n


@checker(
    "scaled_dot_product_attention",
    "Replace `raise NotImplementedError` with your code: scores, scale, mask, softmax, weighted sum.",
    own_work=ATTENTION_ROUTINES,
)
def check_scaled_dot_product_attention(candidate) -> int:
    """Check ``candidate(query, key, value, attn_mask=None) -> (output, weights)`` against the
    reference, with and without masks (bool, True = may attend), batched and with a heads axis.

    A candidate that accepts ``scale`` (lesson 01's skeleton) is also held to the scale, float
    masks (added to the scores) and queries with nothing to attend to (zero weights and output);
    one that accepts ``is_causal`` to that too."""
    mistakes = _mistakes()
    n = 0
    for case, q, k, v, mask in _sdpa_cases():
        got = call_attention(
            candidate, case, q, k, v, mask, crash_hint=_CRASH_HINT, mask_hint=_mask_hint
        )
        expected = reference.scaled_dot_product_attention(
            q.double(), k.double(), v.double(), attn_mask=mask
        )
        args = (q.double(), k.double(), v.double(), mask)
        _compare_attention(
            case,
            got,
            expected,
            q,
            k,
            v,
            mask,
            mistakes,
            args,
            _plain_weights_cause(q, k, mask),
        )
        n += 1
    if _accepts(candidate, "scale"):
        n += _check_full_signature(candidate, causal=_accepts(candidate, "is_causal"))
    return n


# ---------------------------------------------------------------- SelfAttention (lesson 01)


def _one_head(wq, wk, wv, x, mask, *, keys_with=None, values=None, swap=False, no_mask=False):
    """One head of self-attention from its weights (d_out, d_model), with one flaw at most."""
    q, k = x @ wq.T, x @ (wk if keys_with is None else keys_with).T
    v = x @ wv.T if values is None else values(x, wq, wk)
    if swap:
        q, k = k, q
    return reference.scaled_dot_product_attention(q, k, v, attn_mask=None if no_mask else mask)


_SELF_ATTENTION_MISTAKES = [
    Mistake(
        "keys projected with W^Q",
        lambda wq, wk, wv, x, m: _one_head(wq, wk, wv, x, m, keys_with=wq),
        "the keys were projected with the query weights: K = x W^K, with k_proj.",
    ),
    Mistake(
        "queries and keys swapped",
        lambda wq, wk, wv, x, m: _one_head(wq, wk, wv, x, m, swap=True),
        "the queries and the keys are swapped: Q = x W^Q (q_proj) asks, K = x W^K (k_proj) answers.",
    ),
    Mistake(
        "values projected with W^K",
        lambda wq, wk, wv, x, m: _one_head(wq, wk, wv, x, m, values=lambda x, wq, wk: x @ wk.T),
        "the values were projected with the key weights: V = x W^V, with v_proj.",
    ),
    Mistake(
        "values not projected",
        lambda wq, wk, wv, x, m: _one_head(wq, wk, wv, x, m, values=lambda x, wq, wk: x),
        "the values are x itself: project them too, V = x W^V (v_proj).",
    ),
    Mistake(
        "mask not passed on",
        lambda wq, wk, wv, x, m: _one_head(wq, wk, wv, x, m, no_mask=True),
        "the mask is not used: hand attn_mask on to the attention.",
    ),
]


def _self_attention_cases():
    """``(case, (d_model, d_k[, d_v]), x, attn_mask)``."""
    randn = seeded_randn(4)
    yield "one sentence: x (5, 16), SelfAttention(16, 8)", (16, 8), randn(5, 16), None
    yield (
        "a batch: x (2, 5, 16), SelfAttention(16, 8, 4): d_v = 4",
        (16, 8, 4),
        randn(2, 5, 16),
        None,
    )
    mask = reference.may_attend_mask(5, torch.tensor([5, 3]), causal=True)
    yield (
        "a padded, causal batch: x (2, 5, 16), attn_mask (2, 5, 5)",
        (16, 8),
        randn(2, 5, 16),
        mask,
    )
    yield "other sizes: x (3, 6), SelfAttention(6, 3)", (6, 3), randn(3, 6), None


def _require_projection(module, name: str, d_out: int, d_model: int, case: str) -> torch.nn.Module:
    made = f"an nn.Linear from d_model = {d_model} to {d_out} features, without bias"
    part = getattr(module, name, None)
    weight = getattr(part, "weight", None)
    if not isinstance(weight, torch.Tensor):
        raise ExerciseFailure(
            f"Case {case!r}: your SelfAttention has no `{name}` with a weight; create it in "
            f"__init__: {made}."
        )
    if tuple(weight.shape) != (d_out, d_model):
        raise ExerciseFailure(
            f"Case {case!r}: {name}.weight has shape {shape_str(weight.shape)}, expected "
            f"({d_out}, {d_model}): {name} should be {made} (nn.Linear keeps its weight as "
            "(out, in))."
        )
    if getattr(part, "bias", None) is not None:
        raise ExerciseFailure(
            f"Case {case!r}: your {name} has a bias.\nLikely cause: Q = x W^Q, K = x W^K and "
            "V = x W^V have none: make each nn.Linear with bias=False."
        )
    return part


@checker(
    "SelfAttention",
    "Replace each `raise NotImplementedError` with your code: the three projections in "
    "__init__, then forward.",
)
def check_self_attention(candidate) -> int:
    """Check ``SelfAttention(d_model, d_k, d_v=None)``: ``q_proj``, ``k_proj`` (d_model -> d_k)
    and ``v_proj`` (d_model -> d_v, d_k by default), nn.Linear without bias; ``forward(x,
    attn_mask=None) -> (output (..., L, d_v), weights (..., L, L))``, one head of self-attention.
    A learner's scaled_dot_product_attention that it calls, unfinished or wrong, is named by the
    checker protocol (:mod:`mha_course.checks._core`)."""
    n = 0
    for case, sizes, x, mask in _self_attention_cases():
        module = build_module(candidate, case, "SelfAttention", sizes, "check_self_attention")
        d_model, d_k = sizes[:2]
        d_v = sizes[2] if len(sizes) > 2 else d_k
        weights = _projection_weights(d_model, d_k, d_v)
        with torch.no_grad():
            for name, w in zip(("q_proj", "k_proj", "v_proj"), weights):
                _require_projection(module, name, w.size(0), d_model, case).weight.copy_(w)
        kwargs = {} if mask is None else {"attn_mask": mask}
        with torch.no_grad():
            got = call_candidate(
                module, case, x.clone(), crash_hint=_SELF_ATTENTION_CRASH, **kwargs
            )
        if not (isinstance(got, tuple) and len(got) == 2):
            raise ExerciseFailure(
                f"Case {case!r}: forward should return a pair (output, weights), as your "
                f"scaled_dot_product_attention does; got {type(got).__name__}."
            )
        args = (*(w.double() for w in weights), x.double(), mask)
        expected = _one_head(*args)
        out = got[0]
        if isinstance(out, torch.Tensor) and out.shape[-1] == d_model != d_v:
            require_shape(
                case,
                "output",
                out,
                expected[0].shape,
                "the output has x's d_model features: the values are x itself; project them "
                "too, V = x W^V (v_proj), to d_v features.",
            )
        q, k = x @ weights[0].T, x @ weights[1].T
        _compare_attention(
            case,
            got,
            expected,
            q,
            k,
            x @ weights[2].T,
            mask,
            _SELF_ATTENTION_MISTAKES,
            args,
            _plain_weights_cause(q, k, mask),
        )
        n += 1
    return n


def _projection_weights(d_model: int, d_k: int, d_v: int) -> list[torch.Tensor]:
    randn = seeded_randn(5)
    return [randn(d, d_model) / math.sqrt(d_model) for d in (d_k, d_k, d_v)]


_SELF_ATTENTION_CRASH = (
    "x is (..., L, d_model): project it three times (q_proj, k_proj, v_proj), then attend with "
    "your scaled_dot_product_attention, handing attn_mask on."
)
