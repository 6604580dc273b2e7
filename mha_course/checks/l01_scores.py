"""Lesson 01's first two exercises: the scaled scores Q Kᵀ / √d_k, and the mask of a padded (and
causal) batch, bool, True where a query MAY attend (torch's convention)."""

from __future__ import annotations

import math

import torch

from . import families
from ._core import exercise
from ._table import Case, Out, Table, reverse_axes, seeded_randn

__all__ = ["check_attention_scores", "check_may_attend_mask", "may_attend_mask", "scale_hint"]


def _scores(flaw=""):
    """The scores Q Kᵀ / √d_k, or with ``flaw``."""

    def attention_scores(query, key):
        """Q Kᵀ / √d_k: query (..., L, E), key (..., S, E) -> (..., L, S)."""
        if flaw == "softmax applied":
            return torch.softmax(_scores()(query, key), dim=-1)
        d_k, S = query.size(-1), key.size(-2)
        scale = {"no scale": 1.0, "divided by d_k": 1 / d_k, "multiplied by √d_k": d_k**0.5}
        scale = {**scale, "scaled by √S": S**-0.5}.get(flaw, d_k**-0.5)
        a, b = (key, query) if flaw == "scores transposed" else (query, key)
        return a @ _TURNED.get(flaw, lambda t: t.mT)(b) * scale

    return attention_scores


_TURNED = {"keys.T on a batch": reverse_axes, "a 2-D transpose": torch.t}
_ONE_PER_PAIR = "one score per query and key, (..., L, S)."
_ONLY_THE_LAST_TWO = "only the keys' last two axes are swapped, whatever comes before them"
_SCORE_FLAWS = {
    "no scale": "the scores are not scaled: their variance is d_k (the lesson's prediction), not 1.",
    "scaled by √S": "the scores are scaled by the number of keys S; the scale is 1/√d_k, d_k "
    "being the size of each query and key vector.",
    "keys.T on a batch": f"the T attribute reverses every axis of batched keys: {_ONLY_THE_LAST_TWO}.",
    "a 2-D transpose": "a transpose made for 2-D matrices (torch.t) cannot take the leading batch "
    f"and head axes: {_ONLY_THE_LAST_TWO}.",
    "softmax applied": "the softmax is applied: attention_scores stops at the scaled scores; the "
    "softmax turns them into weights in the next step.",
}
_SCORE_FAMILY = ("divided by d_k", "multiplied by √d_k", *_SCORE_FLAWS, "scores transposed")


def scale_hint(logits, query, key) -> str | None:
    """When ``logits`` are s · Q Kᵀ, row by row up to a constant (the scores, or the log of the
    weights), for a wrong s: which s it is."""
    raw = (query.double() @ key.double().mT).reshape(-1, key.size(-2))
    got = logits.detach().double().reshape(-1, key.size(-2))
    raw, got = raw - raw.mean(-1, keepdim=True), got - got.mean(-1, keepdim=True)
    s = float((raw * got).sum() / (raw * raw).sum())
    if not math.isfinite(s) or s <= 0 or (got - s * raw).abs().max() > 1e-3 * (1 + got.abs().max()):
        return None
    d_k, n = query.size(-1), round(s**-2)
    if 0 < n != d_k and math.isclose(s, n**-0.5, rel_tol=1e-3):
        size = {query.size(-2): "L, the number of queries", key.size(-2): "S, the number of keys"}
        if n in size:
            return (
                f"the scores are scaled by 1/√{n}, {size[n]}; d_k is the size of each query "
                f"and key vector, {d_k} here."
            )
        return (
            f"the scores are scaled by {s:.4g} = 1/√{n}, but here d_k = {d_k}: a d_k fixed in advance, such "
            "as a variable of the notebook? It comes from the inputs, the size of their last axis."
        )
    return f"the scores are scaled by {s:.4g}; the scale is 1/√d_k = {d_k**-0.5:.4g} (d_k = {d_k})."


def _score_cases():
    randn = seeded_randn(12)
    yield Case("query (4, 8), key (6, 8): d_k = 8", (randn(4, 8), randn(6, 8)))
    yield Case("a batch: query (2, 4, 8), key (2, 6, 8)", (randn(2, 4, 8), randn(2, 6, 8)))
    name = "batch and heads: query (2, 3, 4, 16), key (2, 3, 5, 16): d_k = 16"
    yield Case(name, (randn(2, 3, 4, 16), randn(2, 3, 5, 16)))
    yield Case("d_k = 5: query (3, 5), key (7, 5)", (randn(3, 5), randn(7, 5)))
    yield Case("L = S: query (4, 6), key (4, 6)", (randn(4, 6), randn(4, 6)))
    yield Case("float64: query (2, 3), key (5, 3)", (randn(2, 3).double(), randn(5, 3).double()))
    yield Case("one query: query (1, 4), key (3, 4)", (randn(1, 4), randn(3, 4)))


attention_scores = _scores()
SCORES = Table(
    cases=_score_cases,
    reference=attention_scores,
    mistakes=families.mistakes(_scores, _SCORE_FAMILY, **_SCORE_FLAWS),
    outputs=[Out("the scores", None, _ONE_PER_PAIR, fallback=lambda g, c: scale_hint(g, *c.args))],
    crash=f"the inputs may have leading batch and head axes: {_ONLY_THE_LAST_TWO}.",
)
todo = "Replace `raise NotImplementedError` with the scores, scaled to a variance of 1."
check_attention_scores = exercise(
    "attention_scores", "01", reference=attention_scores, todo=todo, table=SCORES
)


def _may_attend(flaw=""):
    """The may-attend mask of self-attention over S positions, or with ``flaw``."""

    def may_attend_mask(S, lengths=None, causal=False):
        """Bool (S, S), or (B, S, S) with ``lengths`` (B,): True where query i may attend to key
        j, a real token (j < lengths[b]) and, when ``causal``, j ≤ i."""
        device = None if lengths is None else lengths.device
        rule = torch.ones(S, S, dtype=torch.bool, device=device)
        if causal and flaw != "causal ignored":
            rule = families.causal(S, S, flaw, device) if flaw in families.CAUSAL else rule.tril()
            rule = ~rule if flaw == "causal inverted" else rule
        if lengths is None:
            return rule
        j = torch.arange(S, device=device)
        real = {  # (B, S): the real tokens
            "padding ≤": j <= lengths[:, None],
            "padding one too few": j < lengths[:, None] - 1,
            "padding transposed": j[:, None] < lengths,
        }.get(flaw, j < lengths[:, None])
        real = {"padding inverted": ~real, "padding ignored": real | True}.get(flaw, real)
        keys = real[:, None, :] & (real[:, :, None] if flaw == "padding on the queries" else True)
        return rule | keys if flaw == "or instead of and" else rule & keys

    return may_attend_mask


may_attend_mask = _may_attend()
_MASK_FLAWS = {
    "causal inverted": "the causal part is inverted: here True means may attend (torch's "
    "nn.MultiheadAttention says the opposite), and query i may attend to the keys j ≤ i.",
    "causal ignored": "the causal part is missing: when causal, query i attends to keys j ≤ i only.",
    "padding inverted": "the padding part is inverted: the real tokens (j < lengths[b]) may be "
    "attended to, the pads may not.",
    "padding ≤": "one key too many is real: positions count from 0, so a sentence of length 3 "
    "holds positions 0, 1, 2 (j < lengths[b], strictly).",
    "padding on the queries": "you blocked the pads' own rows (their queries). Only the keys are "
    "masked (a pad's column is False); a pad's own row is ignored later, as torch's is.",
    "padding ignored": "the lengths are ignored (or the first sentence's length is used for all): "
    "key j of sentence b is real only when j < lengths[b], its own length.",
    "or instead of and": "the two parts are combined with 'or': a pair is allowed only when both "
    "allow it.",
    "padding one too few": "one real key too few: key j of sentence b is real when j < lengths[b].",
    "padding transposed": "the padding part is (S, B), transposed: one row per sentence and one "
    "column per key, (B, S).",
}


def _mask_shape_hint(got, case) -> str:
    S, lengths = case.args[0], case.kwargs["lengths"]
    if lengths is not None and tuple(got.shape) in ((len(lengths), 1, S), (len(lengths), S)):
        return (
            f"your mask is {'(B, 1, S)' if got.dim() == 3 else '(B, S)'}: right for padding "
            "alone, but here each query has its row, (B, S, S), where the causal part fits too."
        )
    return "(S, S) without lengths, (B, S, S) with lengths: one row per query, one column per key."


_WHERE_TRUE = "True where key j is a real token (j < lengths[b]) and, when causal, j ≤ i."
_ADDITIVE = (
    "this is the additive float form of a mask (0 where allowed, -inf where blocked), which "
    "torch's attention also takes; this exercise returns the bool form: "
)


def _mask_values_hint(got, case) -> str:
    additive = got.is_floating_point() and bool(((got == 0) | got.isneginf()).all())
    return (_ADDITIVE if additive else "") + _WHERE_TRUE


def _mask_cases():
    def case(name, S, lengths=None, causal=False):
        return Case(name, (S,), {"lengths": lengths, "causal": causal})

    yield case("S = 4, no lengths, not causal: every pair is allowed", 4)
    yield case("S = 4, causal", 4, causal=True)
    yield case("lengths [4, 2], S = 4, causal", 4, torch.tensor([4, 2]), True)
    yield case("lengths [3, 5, 1], S = 5", 5, torch.tensor([3, 5, 1]))
    yield case("B = S: lengths [1, 3, 2], S = 3, causal", 3, torch.tensor([1, 3, 2]), True)
    yield case("a length of 0: lengths [0, 3], S = 3", 3, torch.tensor([0, 3]))
    yield case("lengths of dtype int32: [2, 1], S = 3", 3, torch.tensor([2, 1], dtype=torch.int32))
    yield case("S = 7, causal: another size", 7, causal=True)


_FAMILY = ("causal upper triangle", *_MASK_FLAWS, "causal without the diagonal")
MAY_ATTEND = Table(
    cases=_mask_cases,
    reference=may_attend_mask,
    mistakes=families.mistakes(_may_attend, _FAMILY, **_MASK_FLAWS),
    outputs=[Out("the mask's entries", None, _mask_shape_hint, fallback=_mask_values_hint)],
    crash="the lengths (B,) and the positions (S,) make a (B, S) table of the real keys only "
    "when each has an axis of its own; with one for the queries, (B, 1, S), it fits (S, S) too.",
)
todo = "Replace `raise NotImplementedError` with the mask: which keys may each query attend to?"
check_may_attend_mask = exercise(
    "may_attend_mask", "01", reference=may_attend_mask, todo=todo, table=MAY_ATTEND
)
