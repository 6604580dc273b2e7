"""The classic mistakes that recur from exercise to exercise, built once: each family is a
computation with one *flaw* switched on by name (:func:`attention` with a key of
:data:`ATTENTION`, :data:`MASK` or :data:`FLOAT_MASK`; :func:`causal`, :func:`split_heads`,
:func:`merge_heads`, :func:`layer_norm`, :func:`residual`) and the flaw's explanation, in the
lesson's words, never the corrected line. An exercise writes its reference once with a ``flaw``
argument handed down to these; :func:`mistakes` (or :func:`flawed`) turns it into the classic
wrong answers.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Iterable

import torch

from ._core import Mistake

__all__ = ["ATTENTION", "MASK", "FLOAT_MASK", "CAUSAL", "HEADS", "NORM", "STATE", "RESIDUAL"]
__all__ += ["POST_LN", "PRE_LN", "attention", "causal", "split_heads", "merge_heads"]
__all__ += ["layer_norm", "residual", "mistakes", "flawed"]

ATTENTION = {  # flaws of the attention formula itself
    "no scale": "the scores are not scaled: between Q Kᵀ and the softmax they are multiplied by "
    "1/√d_k, d_k being the size of one query (and key) vector.",
    "divided by d_k": "the scores are divided by d_k itself; the scale is one over its square "
    "root.",
    "multiplied by √d_k": "the scores are multiplied by √d_k; the scale divides by it.",
    "scaled by the values' size": "the scale uses the size of the values; it uses d_k, the size "
    "of the queries and keys.",
    "scaled by √d_model": "the scores are scaled by √d_model, the size of the whole embedding; "
    "each head's scores are scaled by the size of its own queries, d_k = d_model / h.",
    "softmax over the queries": "the weights sum to 1 down each column, over the queries; each "
    "query's row must sum to 1 over the keys. Look at the axis your softmax runs over.",
    "softmax over the heads": "the weights sum to 1 over the heads; each query's weights, in "
    "every head, must sum to 1 over the keys. Look at the axis your softmax runs over.",
    "no softmax": "the scores are used as weights without a softmax: a query's weights must be "
    "positive and sum to 1.",
    "scores transposed": "the scores are transposed: rows belong to the queries and columns to "
    "the keys.",
    "keys as values": "the output mixes the keys; attention mixes the values with the weights.",
}

MASK = {  # flaws of a bool mask in the "may attend" convention (True = may attend)
    "mask ignored": "the mask has no effect: your weights are the ones you get without it. "
    "Blocked keys must be taken out before the softmax.",
    "mask inverted": "the mask is inverted: here True means the query MAY attend to that key, and "
    "your answer blocks exactly the keys it should keep.",
    "mask inverted, empty rows zeroed": "the mask is inverted: here True means the query MAY "
    "attend to that key, and your answer blocks exactly the keys it should keep (the rows it "
    "leaves with no key come out as zeros, so the mistake shows in the weights, not as NaN).",
    "mask filled with 0": "the blocked scores were set to 0, but exp(0) = 1, so blocked keys "
    "still get weight. A blocked score must be one whose exponential is 0.",
    "mask after the softmax": "the mask was applied after the softmax, so the rows no longer "
    "sum to 1: block the scores before the softmax.",
    "empty rows NaN": "a query with nothing to attend to: all its scores are blocked, and the "
    "softmax of such a row is 0/0 = NaN. Such a query gets weights of 0, and so an output of 0.",
    "empty rows uniform": "a query with nothing to attend to got equal weights on every key: the "
    "blocked scores were filled with a large finite number instead of one whose exponential is "
    "0. Such a query gets weights of 0.",
}

FLOAT_MASK = {  # flaws of a float mask, added to the scores
    "float mask ignored": "the float mask has no effect: your weights are the ones you get "
    "without it. A float mask is added to the scores (0: no change, -inf: blocked, any other "
    "number: a bias); read as a bool one, a mask with no 0 in it blocks nothing.",
    "float mask multiplied": "the float mask was multiplied into the scores; it is added to them.",
    "float mask subtracted": "the float mask is subtracted; it is added to the scores (its -inf "
    "entries block, its other entries shift the scores up or down).",
    "float mask read as bool": "the float mask was read as a bool one (0 = blocked). A float mask "
    "is no yes/no: it is added to the scores, 0 where nothing changes and -inf where a key is "
    "blocked. Tell the two kinds apart by the mask's dtype.",
    "float mask used to block": "the float mask was used to block the keys where it is not 0, and "
    "its values dropped. A float mask is added to the scores: -inf blocks, any other value "
    "shifts the score.",
    "float mask added before the scale": "the float mask is added before the scores are scaled "
    "by 1/√d_k, so it is scaled down too: it is added to the scaled scores, softmax(Q Kᵀ / √d_k "
    "+ M).",
}

CAUSAL = {  # flaws of a causal mask: which triangle, where its diagonal is
    "causal without the diagonal": "your causal mask leaves out the diagonal: a query may attend "
    "to itself, keys j ≤ i.",
    "causal upper triangle": "your causal mask keeps the future: query i sees the keys at or "
    "before its own position, never after.",
    "causal bottom-right": "with more keys than queries the causal mask is aligned top-left, as "
    "in torch: query i sees keys 0..i, whatever S.",
    "causal top-left": "your causal mask is aligned top-left: it treats the new queries as the "
    "first tokens, so query i sees keys 0..i only. They are the last L of S positions: each sees "
    "every key before it and itself, the diagonal shifted right by S − L.",
    "off-by-one diagonal": "your causal mask's diagonal is one place too far right: each query "
    "also sees the key just after its own position. A query sees the keys up to its own "
    "position, and not one further.",
}

HEADS = {  # flaws of the heads' split (b l (h d) -> b h l d) and merge (back)
    "split without transpose": "the heads are split by reading (B, L, E) straight as "
    "(B, H, L, D): that shuffles numbers between tokens instead of giving each head D features "
    "of every token. The head axis comes out of the feature axis first, and only then moves in "
    "front of the length axis.",
    "merge without transpose": "the heads are merged by reading (B, H, L, D) straight as "
    "(B, L, H·D): that mixes tokens. The length axis must be back next to the batch before the "
    "heads' features are joined.",
}

NORM = {  # flaws of LayerNorm
    "unbiased variance": "the variance divides by n − 1 (the unbiased estimate); LayerNorm's "
    "divides by n, the number of features.",
    "no eps": "eps is missing: it is added to the variance, inside the square root, so that a "
    "row with no spread does not divide by 0.",
    "eps outside the root": "eps is added after the square root; LayerNorm adds it to the "
    "variance, inside the root.",
    "normalised over the wrong axis": "each token is normalised over its own features, the last "
    "axis; yours normalises across the tokens.",
    "no weight and bias": "the normalised values are returned as they are: LayerNorm then scales "
    "them by its weight and shifts them by its bias.",
}

STATE = {  # flaws of something that keeps a state from call to call (a KV cache)
    "state not reset": "what was kept from the previous sequence is still there: a new object "
    "started where the last one stopped, so its state lives outside the object (on its class, "
    "on a module it wraps, in a global). A new sequence starts from an empty state, kept on the "
    "object itself.",
}

RESIDUAL = {  # flaws of a sub-layer wrapped with its residual and LayerNorm
    "pre-LN": "that is pre-LN, x + Sublayer(LayerNorm(x)); post-LN (the paper's add & norm) adds "
    "first and normalises the sum: LayerNorm(x + Sublayer(x)).",
    "post-LN": "that is post-LN, LayerNorm(x + Sublayer(x)); pre-LN normalises only the "
    "sub-layer's input and adds back the untouched x: x + Sublayer(LayerNorm(x)).",
    "no residual": "the residual is missing: the sub-layer's input x is added back to its output.",
    "no norm": "the LayerNorm is missing.",
    "norm on the sub-layer's output": "the sub-layer's output is normalised and then added to x; "
    "post-LN normalises the sum, pre-LN the sub-layer's input.",
    "residual from the norm": "the residual path carries LayerNorm(x), not x: pre-LN normalises "
    "only what goes into the sub-layer, and adds back the untouched x.",
    "norm on the sum too": "the sum is normalised too; pre-LN normalises only the sub-layer's "
    "input (a pre-LN model has one final LayerNorm after its last layer, not one per sub-layer).",
    "norm twice": "the LayerNorm is applied twice; once is enough, on the sum.",
    "sub-layer twice": "the sub-layer runs twice, the second time on its own output; it runs once, "
    "on x.",
    "norm of x alone": "x alone is normalised, then added; the norm goes around the sum, "
    "LayerNorm(x + Sublayer(x)).",
}
POST_LN = ["pre-LN", "no residual", "norm on the sub-layer's output", "norm twice"]
POST_LN += ["sub-layer twice", "norm of x alone", "no norm"]  # what a post-LN one can have
PRE_LN = ["post-LN", "residual from the norm", "no residual", "norm on the sum too"]
PRE_LN += ["norm on the sub-layer's output", "no norm"]  # what a pre-LN one can have

_FLAWS = {**ATTENTION, **MASK, **FLOAT_MASK, **CAUSAL, **HEADS, **NORM, **STATE, **RESIDUAL}


def mistakes(run: Callable[[str], Callable], flaws: Iterable[str], **texts: str) -> list[Mistake]:
    """The classic mistakes of an exercise: ``run(flaw)`` is its reference with ``flaw`` switched
    on (same call as the answer); the explanations are the family's, or ``texts[flaw]`` where
    the exercise words it better, or names a flaw of its own (keys with spaces: pass a dict
    with ``**``)."""
    explanations = {**_FLAWS, **texts}
    return [Mistake(flaw, run(flaw), explanations[flaw]) for flaw in flaws]


def flawed(reference: Callable, flaws: Iterable[str], **texts: str) -> list[Mistake]:
    """:func:`mistakes` of a ``reference`` that takes its flaw as the keyword ``flaw`` (the
    mistakes are called as the answer is)."""
    return mistakes(lambda flaw: functools.partial(reference, flaw=flaw), flaws, **texts)


def causal(L: int, S: int, flaw: str = "", device=None, *, offset: int = 0) -> torch.Tensor:
    """Bool (L, S), True where query i may attend to key j ≤ i + offset (``offset`` 0: top-left
    aligned, as torch; S − L: the queries are the last L of S positions), with ``flaw`` (a key
    of :data:`CAUSAL`) switched on."""
    ones = torch.ones(L, S, dtype=torch.bool, device=device)
    if flaw == "causal upper triangle":
        return ones.triu(offset)
    diagonal = {
        "causal without the diagonal": offset - 1,
        "off-by-one diagonal": offset + 1,
        "causal bottom-right": S - L,
        "causal top-left": 0,
    }.get(flaw, offset)
    return ones.tril(diagonal)


def attention(q, k, v, mask=None, flaw: str = "", *, scale=None, d_model=None):
    """``(output, weights)`` of softmax(Q Kᵀ · scale + M) V, with ``flaw`` (a key of
    :data:`ATTENTION`, :data:`MASK` or :data:`FLOAT_MASK`) switched on. ``mask``: bool (True = may
    attend) or float (added); a query with no key gets zero weights. ``d_model`` is what the
    "scaled by √d_model" flaw uses."""
    d_k = q.size(-1)
    scale = d_k**-0.5 if scale is None else scale
    scale = {
        "no scale": 1.0,
        "divided by d_k": 1 / d_k,
        "multiplied by √d_k": math.sqrt(d_k),
        "scaled by the values' size": v.size(-1) ** -0.5,
        "scaled by √d_model": (d_model or d_k) ** -0.5,
    }.get(flaw, scale)
    a, b = (k, q) if flaw == "scores transposed" else (q, k)
    scores = a @ b.transpose(-2, -1) * scale
    if mask is not None and mask.is_floating_point():
        mask = _float_mask(mask, flaw, scale)
    blocked = _blocked(mask, flaw)
    if blocked is not None and flaw != "mask after the softmax":
        fill = {"mask filled with 0": 0.0, "empty rows uniform": -1e9}.get(flaw, float("-inf"))
        scores = scores.masked_fill(blocked, fill)
    elif mask is not None and mask.is_floating_point():
        scores = scores * mask if flaw == "float mask multiplied" else scores + mask
    empty = scores.isneginf().all(dim=-1, keepdim=True)
    if flaw in ("mask inverted", "empty rows NaN"):  # as a plain softmax does: 0/0
        empty = torch.zeros_like(empty)
    if flaw == "no softmax":
        weights = scores
    else:
        axis = {"softmax over the queries": -2, "softmax over the heads": -3}.get(flaw, -1)
        weights = torch.softmax(scores.masked_fill(empty, 0.0), dim=axis).masked_fill(empty, 0.0)
    if flaw == "mask after the softmax" and blocked is not None:
        weights = weights.masked_fill(blocked, 0.0)
    return weights @ (k if flaw == "keys as values" else v), weights


def _float_mask(mask, flaw: str, scale):
    """A float mask as an answer with ``flaw`` uses it (a bool one where it reads it as one)."""
    return {
        "float mask ignored": None,
        "float mask subtracted": -mask,
        "float mask added before the scale": mask * scale,
        "float mask read as bool": mask != 0,
        "float mask used to block": mask == 0,
    }.get(flaw, mask)


def _blocked(mask, flaw: str):
    """Where a bool mask blocks (None for no mask, a float mask, or the mask ignored)."""
    if mask is None or mask.is_floating_point() or flaw == "mask ignored":
        return None
    return mask if flaw.startswith("mask inverted") else ~mask


def split_heads(x, H: int, flaw: str = ""):
    """'b l (h d) -> b h l d' (or with the "split without transpose" flaw)."""
    B, L, E = x.shape
    if flaw == "split without transpose":
        return x.reshape(B, H, L, E // H)
    return x.view(B, L, H, E // H).transpose(1, 2)


def merge_heads(x, flaw: str = ""):
    """'b h l d -> b l (h d)' (or with the "merge without transpose" flaw)."""
    B, H, L, D = x.shape
    if flaw == "merge without transpose":
        return x.reshape(B, L, H * D)
    return x.transpose(1, 2).reshape(B, L, H * D)


def layer_norm(x, weight=None, bias=None, eps: float = 1e-5, flaw: str = ""):
    """LayerNorm over the last axis (or with a flaw of :data:`NORM`)."""
    axis = 0 if flaw == "normalised over the wrong axis" else -1
    mean = x.mean(dim=axis, keepdim=True)
    var = x.var(dim=axis, keepdim=True, unbiased=flaw == "unbiased variance")
    eps = 0.0 if flaw == "no eps" else eps
    std = var.sqrt() + eps if flaw == "eps outside the root" else (var + eps).sqrt()
    normed = (x - mean) / std
    if flaw == "no weight and bias" or weight is None:
        return normed
    return normed * weight + bias


def residual(x, sublayer, norm, norm_first: bool = False, flaw: str = ""):
    """Post-LN, LayerNorm(x + Sublayer(x)), or with ``norm_first`` pre-LN, x + Sublayer(LayerNorm(x))
    (or with a flaw of :data:`RESIDUAL`)."""
    f, n = sublayer, norm
    forms = {
        "post-LN": lambda: n(x + f(x)),
        "pre-LN": lambda: x + f(n(x)),
        "no residual": lambda: f(n(x)) if norm_first else n(f(x)),
        "no norm": lambda: x + f(x),
        "norm on the sub-layer's output": lambda: x + n(f(x)),
        "residual from the norm": lambda: (lambda h: h + f(h))(n(x)),
        "norm on the sum too": lambda: n(x + f(n(x))),
        "norm twice": lambda: n(n(x + f(x))),
        "sub-layer twice": lambda: (lambda h: n(h + f(h)))(f(x)),
        "norm of x alone": lambda: n(x) + f(x),
    }
    return forms[flaw or ("pre-LN" if norm_first else "post-LN")]()
