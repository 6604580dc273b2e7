"""Lesson 01's attention: scaled dot-product attention, and one head of self-attention; a bool
mask is True where a query MAY attend (torch's convention), a float one is added to the scores."""

from __future__ import annotations

import dataclasses
import functools
import inspect

import torch
import torch.nn.functional as F

from .. import attention, masks
from .._validate import shape_str
from . import families
from ._core import call_with_mask, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, build_module, copy_weight_and_bias, pair, run, seeded_randn
from .l01_scores import _ONLY_THE_LAST_TWO, scale_hint

__all__ = ["ATTENTION_ROUTINES", "accepts", "call_attention", "mask_hint", "weights_cause"]
_TODO = "Replace `raise NotImplementedError` with your code: "


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """The reference: ``(output, weights)`` of softmax(Q Kᵀ · scale + M) V, the course's own
    (a bool ``attn_mask`` is True where a query may attend; a query with no key gets zeros)."""
    return attention.scaled_dot_product_attention(
        query, key, value, attn_mask, is_causal=is_causal, scale=scale
    )


def _sdpa(flaw=""):
    """The lesson's attention, with ``flaw`` (the scale's, is_causal's, or a family's) on."""

    def attend(query, key, value, attn_mask=None, is_causal=False, scale=None):
        if flaw in ("scale ignored", "divided by the scale") and scale:
            scale = None if flaw == "scale ignored" else 1 / scale
        if is_causal and flaw != "is_causal ignored":
            attn_mask = families.causal(query.size(-2), key.size(-2), flaw)
        return families.attention(query, key, value, attn_mask, flaw, scale=scale)

    return attend


ATTENTION_ROUTINES = {
    "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
    "the course's scaled_dot_product_attention (mha_course)": attention.scaled_dot_product_attention,
    "the course's reference (mha_course.reference)": scaled_dot_product_attention,
}
"""What lessons 01 and 06 ask the learner to write themselves (the checker names the one called)."""

_SDPA_FLAWS = {
    "scale ignored": "the scale argument is ignored: when one is given, the scores are multiplied "
    "by it instead of 1/√d_k.",
    "divided by the scale": "the scores are divided by the scale; a given scale multiplies them, "
    "as in torch (its default is 1/√d_k, not √d_k).",
    "is_causal ignored": "is_causal is ignored: when True, query i may attend to keys 0..i only.",
}
_FAMILIES = (*families.ATTENTION, *families.MASK, *families.FLOAT_MASK, *families.CAUSAL)
_FLAWS = (*_SDPA_FLAWS, *(f for f in _FAMILIES if f != "scaled by √d_model"))


def mask_hint(mask, scores: str = "(..., L, S)") -> str:
    """Why an answer crashes with ``mask``, or gives weights of another shape."""
    if mask.is_floating_point():
        return (
            "a float mask is added to the scores as it is: the ~ operator and masked_fill are for "
            "a bool mask (tell the two kinds apart by the mask's dtype), and it needs no new "
            "axis: it already broadcasts, (H, L, S) being a bias per head."
        )
    return (
        f"the mask {shape_str(mask.shape)} already broadcasts against the scores {scores}: use "
        "it as it is, with no new axis (an unsqueeze), view or transpose."
    )


def call_attention(candidate, case: str, *inputs, mask=None, crash_hint="", scores="(..., L, S)"):
    """``candidate(*inputs, attn_mask=mask)`` on copies of the inputs; a crash names its case, and
    ``mask_hint(mask, scores)`` when the answer runs without the mask."""
    hint = mask is not None and mask_hint(mask, scores)
    crash = hint if hint and mask.is_floating_point() else crash_hint
    why = hint and f"your code runs without a mask but not with this one: {hint}"
    try:
        clones = (x.clone() for x in inputs)
        return call_with_mask(
            candidate, case, *clones, attn_mask=mask, crash_hint=crash, mask_hint=why
        )
    except ExerciseFailure as failure:
        error = failure.raised
        if isinstance(error, NameError):
            name = getattr(error, "name", None) or "a name"
            raise failure.with_cause(f"your code uses `{name}`, {_UNDEFINED}") from error
        if isinstance(error, RuntimeError) and "view size is not compatible" in str(error):
            raise failure.with_cause(_VIEW) from error
        raise


_UNDEFINED = (
    "which is not defined where it runs: a helper belongs in the exercise cell, with the answer "
    "(that cell is what is saved and checked)."
)
_VIEW = "view cannot merge the axes of a transposed tensor (out of memory order); reshape can."


def _sdpa_call(candidate, case: Case, table: Table):
    options = {k: v for k, v in case.kwargs.items() if k != "attn_mask"}
    call = functools.partial(candidate, **options) if options else candidate
    mask = case.kwargs.get("attn_mask")
    return call_attention(call, case.name, *case.args, mask=mask, crash_hint=table.crash)


def weights_cause(qk=None):
    """Why the weights differ, when no classic mistake says: NaN, the keys summed, the scale
    (``qk(case)``: the queries and keys, for a case without a mask), rows that do not sum to 1."""

    def cause(w, case):
        mask, w = case.kwargs.get("attn_mask"), w.detach().double()
        if torch.isnan(w).any():
            if mask is not None and bool(masks.nothing_to_attend(mask).any()):
                return families.MASK["empty rows NaN"]
            return "NaN in the weights: exp overflowed (inf/inf); subtract each row's max first."
        if w.size(-1) > 1 and torch.allclose(w, w.mean(-1, keepdim=True), atol=1e-6):
            return (
                f"every key gets the same weight (1/S = 1/{w.size(-1)}): your scores do not depend "
                "on the key (an einsum or a sum over the keys?): keep one score per query and key."
            )
        if qk and mask is None and (scale := scale_hint(w.clamp_min(1e-300).log(), *qk(case))):
            return scale
        rows, columns = w.sum(-1), w.sum(-2)
        if torch.allclose(rows, torch.ones_like(rows), atol=1e-4):
            return None
        if torch.allclose(columns, torch.ones_like(columns), atol=1e-4):
            return f"the columns of your weights sum to 1, not the rows: {_OVER_THE_KEYS}"
        return f"the rows of your weights do not sum to 1: {_OVER_THE_KEYS}"

    return cause


_OVER_THE_KEYS = "each query's softmax runs over the keys."


def _weights_shape_hint(got, case) -> str:
    mask, query, key = case.kwargs.get("attn_mask"), *case.args[:2]
    if got.dim() and got.size(-1) == 1 < key.size(-2):
        return (
            "your weights have one column instead of one per key: the scores lost the keys' axis "
            "(an einsum or a sum that adds up over the keys). Keep one score per query and key."
        )
    if mask is not None and got.dim() > max(query.dim(), key.dim(), mask.dim()):
        return mask_hint(mask)
    return "one row per query and one column per key, (..., L, S)."


_SDPA_OUTPUTS = [
    Out("the weights", 1, _weights_shape_hint, weights_cause(lambda case: case.args[:2])),
    Out(
        "the outputs",
        0,
        "one output per query, (..., L, Ev): the weights (..., L, S) mix the values (..., S, Ev).",
        fallback="the weights are right, so look at the last step: each output mixes the values "
        "with its row of weights.",
    ),
]


def _attention_case(randn):
    """``case(name, q, k, v, **kwargs)``: a Case of a random query, key and value of these shapes."""
    return lambda name, *shapes, **kwargs: Case(name, tuple(randn(*s) for s in shapes), kwargs)


def _sdpa_cases():
    case = _attention_case(randn := seeded_randn(1))
    yield case("one sentence: query (4, 8), key (6, 8), value (6, 5)", (4, 8), (6, 8), (6, 5))
    name = "a batch: query (2, 4, 8), key (2, 6, 8), value (2, 6, 5)"
    yield case(name, (2, 4, 8), (2, 6, 8), (2, 6, 5))
    name = "batch and heads: query (2, 3, 4, 8), key (2, 3, 6, 8), value (2, 3, 6, 8)"
    yield case(name, *((2, 3, L, 8) for L in (4, 6, 6)))
    name = "another size: query (3, 5), key (4, 5), value (4, 3), so d_k = 5"
    yield case(name, (3, 5), (4, 5), (4, 3))
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 6)
    name = "padding mask (2, 1, 6), True = may attend; the last 2 keys of sentence 2 are padding"
    yield case(name, *((2, L, 8) for L in (4, 6, 6)), attn_mask=padding)
    name = "causal mask (5, 5): query i may attend to keys 0..i"
    yield case(name, *[(5, 8)] * 3, attn_mask=families.causal(5, 5))
    name = "huge scores (query × 200): needs a stable softmax"
    yield Case(name, (200 * randn(3, 8), randn(4, 8), randn(4, 8)))


def _full_cases(is_causal: bool):
    """The lesson's whole signature: the scale, float masks, empty rows and (if taken) is_causal."""
    case, one = _attention_case(randn := seeded_randn(2)), ((4, 8), (6, 8), (6, 5))
    inf = float("inf")
    yield case("scale = 0.5 given: it replaces 1/√d_k", *one, scale=0.5)
    yield case("scale = None given: 1/√d_k", (2, 4, 8), (2, 6, 8), (2, 6, 5), scale=None)
    bias = 2 * randn(4, 6)
    yield case("a float mask (4, 6) added to the scores: a bias, no -inf", *one, attn_mask=bias)
    padding = torch.tensor([[0.0] * 6, [0.0] * 4 + [-inf] * 2]).view(2, 1, 6)
    name = "a float padding mask (2, 1, 6): 0 for real keys, -inf for the last 2 of sentence 2"
    yield case(name, *((2, L, 8) for L in (4, 6, 6)), attn_mask=padding)
    nothing = torch.rand(4, 6, generator=torch.Generator().manual_seed(3)) > 0.4
    nothing[:, 0], nothing[1] = True, False
    yield case("a bool mask (4, 6) where query 1 may attend to nothing", *one, attn_mask=nothing)
    empty = torch.tensor([[True] * 5, [False] * 5]).view(2, 1, 5)
    name = "a padded batch (2, 1, 5) whose second sentence has no real token"
    yield case(name, (2, 3, 8), (2, 5, 8), (2, 5, 4), attn_mask=empty)
    blocked = torch.tensor([[0.0] * 4, [0.0] * 4, [-inf] * 4])
    name = "a float mask (3, 4) whose last row is all -inf"
    yield case(name, (3, 8), (4, 8), (4, 5), attn_mask=blocked)
    if is_causal:
        yield case("is_causal, L = S = 5", *[(5, 8)] * 3, is_causal=True)
        name = "is_causal, 4 queries and 6 keys: query i may attend to keys 0..i"
        yield case(name, (2, 4, 8), (2, 6, 8), (2, 6, 3), is_causal=True)


SDPA = Table(
    cases=_sdpa_cases,
    reference=scaled_dot_product_attention,
    mistakes=families.mistakes(_sdpa, _FLAWS, **_SDPA_FLAWS),
    outputs=_SDPA_OUTPUTS,
    call=_sdpa_call,
    shape_checks=[pair("output", "weights")],
    crash="a shape mix-up: the scores and weights are (..., L, S), one row per query and one "
    f"column per key ({_ONLY_THE_LAST_TWO}: the T attribute reverses them all); the output "
    "(..., L, Ev) mixes the values with the weights.",
)


def accepts(function, name: str) -> bool:
    """Whether ``function`` takes the keyword argument ``name`` (or any keyword)."""
    try:
        parameters = inspect.signature(function).parameters
    except (TypeError, ValueError):
        return False
    return name in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


@exercise(
    "scaled_dot_product_attention",
    "01",
    reference=scaled_dot_product_attention,
    todo=_TODO + "scores, scale, mask, softmax, weighted sum.",
    points=3,
    own_work=ATTENTION_ROUTINES,
)
def check_scaled_dot_product_attention(candidate) -> int:
    """Check ``candidate(query, key, value, attn_mask=None) -> (output, weights)``; one that takes
    ``scale`` is also held to it, float masks and empty rows, and one that takes ``is_causal`` too."""
    n = run(candidate, SDPA)
    if not accepts(candidate, "scale"):
        return n
    whole = functools.partial(_full_cases, accepts(candidate, "is_causal"))
    return n + run(candidate, dataclasses.replace(SDPA, cases=whole), candidate.__name__)


class SelfAttention(torch.nn.Module):
    """The reference: one head of self-attention, softmax((x W^Q)(x W^K)ᵀ / √d_k) (x W^V), its
    projections nn.Linear without bias (d_v = d_k unless given)."""

    def __init__(self, d_model, d_k, d_v=None):
        super().__init__()
        self.q_proj = torch.nn.Linear(d_model, d_k, bias=False)  # W^Q
        self.k_proj = torch.nn.Linear(d_model, d_k, bias=False)  # W^K
        self.v_proj = torch.nn.Linear(d_model, d_v or d_k, bias=False)  # W^V

    def forward(self, x, attn_mask=None):
        q, k, v = self.q_proj(x), self.k_proj(x), self.v_proj(x)
        return scaled_dot_product_attention(q, k, v, attn_mask=attn_mask)


def _one_head(flaw=""):
    """One head from its weights W^Q, W^K, W^V (d_out, d_model), with ``flaw``."""

    def head(wq, wk, wv, x, attn_mask=None):
        q, k, v = x @ wq.mT, x @ (wq if flaw == "keys projected with W^Q" else wk).mT, x @ wv.mT
        v = {"values projected with W^K": x @ wk.mT, "values not projected": x}.get(flaw, v)
        q, k = (k, q) if flaw == "queries and keys swapped" else (q, k)
        mask = None if flaw == "mask not passed on" else attn_mask
        return scaled_dot_product_attention(q, k, v, attn_mask=mask)

    return head


_HEAD_FLAWS = {
    "keys projected with W^Q": "the keys are projected with the query weights: K = x W^K comes "
    "from k_proj.",
    "queries and keys swapped": "the queries and the keys are swapped: Q = x W^Q (q_proj) asks, "
    "K = x W^K (k_proj) answers.",
    "values projected with W^K": "the values are projected with the key weights: V = x W^V comes "
    "from v_proj.",
    "values not projected": "the values are x itself: they are projected too, V = x W^V (v_proj).",
    "mask not passed on": "the mask is not used: forward hands it on to the attention.",
}


def _build_head(candidate, case: Case, table: Table):
    """The learner's SelfAttention, its three projections loaded with the case's weights."""
    (*weights, x), mask = case.args, case.kwargs.get("attn_mask")
    d_model, d_k, d_v = x.size(-1), weights[0].size(0), weights[2].size(0)
    module = build_module(candidate, case, (d_model, d_k) + ((d_v,) if d_v != d_k else ()))
    for name, w in zip(("q_proj", "k_proj", "v_proj"), weights, strict=True):
        made = f"an nn.Linear from d_model = {d_model} to {w.size(0)} features, without bias"
        copy_weight_and_bias(getattr(module, name, None), w, None, case.name, f"self.{name}", made)
    with torch.no_grad():
        return call_attention(module, case.name, x, mask=mask, crash_hint=table.crash)


def _head_cases():
    randn = seeded_randn(4)

    def case(name, x, d_k, d_v=None, **kwargs):
        w = [randn(d, x.size(-1)) / x.size(-1) ** 0.5 for d in (d_k, d_k, d_v or d_k)]
        return Case(name, (*w, x), kwargs)

    yield case("one sentence: x (5, 16), SelfAttention(16, 8)", randn(5, 16), 8)
    yield case("a batch: x (2, 5, 16), SelfAttention(16, 8, 4): d_v = 4", randn(2, 5, 16), 8, 4)
    mask = families.causal(5, 5) & (torch.arange(5) < torch.tensor([5, 3])[:, None])[:, None, :]
    name = "a padded, causal batch: x (2, 5, 16), attn_mask (2, 5, 5)"
    yield case(name, randn(2, 5, 16), 8, attn_mask=mask)
    yield case("other sizes: x (3, 6), SelfAttention(6, 3)", randn(3, 6), 3)


HEAD = Table(
    cases=_head_cases,
    reference=_one_head(),
    mistakes=families.mistakes(_one_head, _HEAD_FLAWS, **_HEAD_FLAWS),
    outputs=[
        Out(
            "the weights",
            1,
            "one row per query and one column per key, (..., L, L).",
            weights_cause(lambda c: (c.args[3] @ c.args[0].mT, c.args[3] @ c.args[1].mT)),  # Q, K
        ),
        _SDPA_OUTPUTS[1],
    ],
    call=_build_head,
    shape_checks=[pair("output", "weights")],
    crash="x is (..., L, d_model): it is projected three times (q_proj, k_proj, v_proj), then "
    "your scaled_dot_product_attention attends, with the mask handed on.",
)
todo = _TODO + "the three projections in __init__, then forward."
check_self_attention = exercise(
    "SelfAttention", "01", reference=SelfAttention, todo=todo, table=HEAD
)
