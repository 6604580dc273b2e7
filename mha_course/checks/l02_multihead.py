"""Lesson 02's multi-head attention, held to torch's (F.multi_head_attention_forward) with the
same weights, and the copy of torch's packed weights into it. A case's W^Q, W^K, W^V, W^O are one
tensor (4, E, E + 1), each bias in the last column; the classic wrong answers are :func:`_mha`'s."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import math

import torch
import torch.nn.functional as F
from einops import rearrange
from torch import nn

from .. import attention, masks, multihead
from .._validate import require_divisible, shape_str
from . import families
from ._core import call_candidate, exercise
from ._failure import ExerciseFailure, close
from ._table import Case, Out, Table, build_module, copy_weight_and_bias, pair, run, seeded_randn
from .l01_attention import accepts, call_attention, mask_hint, weights_cause


class MultiHeadAttention(nn.Module):
    """The reference: MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O, batch first, on the
    course's attention. ``forward(query, key, value, attn_mask=None, need_weights=True)`` returns
    ``(output (B, L, E), weights (B, H, L, S))``, or ``(output, None)`` without the weights."""

    def __init__(self, embed_dim, num_heads):
        super().__init__()
        require_divisible("embed_dim", embed_dim, "num_heads", num_heads)
        self.num_heads, E = num_heads, embed_dim
        self.q_proj, self.k_proj, self.v_proj, self.out_proj = (nn.Linear(E, E) for _ in range(4))

    def forward(self, query, key, value, attn_mask=None, need_weights=True):
        q, k, v = (
            rearrange(proj(x), "b l (h d) -> b h l d", h=self.num_heads)
            for proj, x in ((self.q_proj, query), (self.k_proj, key), (self.v_proj, value))
        )
        heads, weights = attention.scaled_dot_product_attention(q, k, v, attn_mask)
        output = self.out_proj(rearrange(heads, "b h l d -> b l (h d)"))
        return output, (weights if need_weights else None)


MHA_ROUTINES = {
    "torch's nn.MultiheadAttention": nn.MultiheadAttention,
    "torch's multi_head_attention_forward": F.multi_head_attention_forward,
    "the course's MultiHeadAttention (mha_course)": multihead.MultiHeadAttention,
    "the course's reference (mha_course.reference)": MultiHeadAttention,
}
"""What lesson 02 asks the learner to write themselves (the checker names the one called)."""
_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")


def _torch_mha(query, key, value, attn_mask=None, *, weights, heads):
    """torch's multi-head attention with these weights (4, E, E + 1): what the answer is held to."""
    (B, L, E), S = query.shape, key.size(1)
    if attn_mask is not None:  # (B·H, L, S), True = masked out
        attn_mask = masks.other_convention(attn_mask.expand(B, heads, L, S).flatten(0, 1))
    W, b = weights[..., :-1], weights[..., -1]
    inputs = (x.transpose(0, 1) for x in (query, key, value))  # torch's (L, B, E)
    out, w = F.multi_head_attention_forward(
        *inputs, E, heads, W[:3].flatten(0, 1), b[:3].flatten(), None, None, False, 0.0, W[3],
        b[3], training=False, attn_mask=attn_mask, average_attn_weights=False,
    )  # fmt: skip
    return out.transpose(0, 1), w


def _mha(flaw=""):
    """Lesson 02's multi-head attention from its weights, with ``flaw`` switched on."""

    def attend(query, key, value, attn_mask=None, *, weights, heads):
        W, b = weights[..., :-1], weights[..., -1]
        k_i = 0 if flaw == "keys projected with W^Q" else 1  # the projection the keys go through
        inputs = ((0, query), (k_i, key), (2, key if flaw == "values from the key" else value))
        q, k, v = (families.split_heads(F.linear(x, W[i], b[i]), heads, flaw) for i, x in inputs)
        _, w = families.attention(q, k, v, attn_mask, flaw, d_model=query.size(-1))
        if not flaw.endswith("zeroed"):  # a plain softmax, as the lesson's: a query left with no
            w = w.masked_fill(w.eq(0).all(-1, keepdim=True), float("nan"))  # key gets NaN
        out = families.merge_heads(w @ v, flaw)
        out = out if flaw == "missing output projection" else F.linear(out, W[3], b[3])
        return out, (w.mean(1) if flaw == "weights averaged over the heads" else w)

    return attend


_OWN_FLAWS = {
    "keys projected with W^Q": "the keys are projected with q_proj; each input has its own "
    "projection: K comes from key through k_proj (W^K).",
    "values from the key": "the values are computed from the key input; they come from value, "
    "through v_proj (W^V).",
    "missing output projection": "the output projection W^O is missing: the heads, merged, go "
    "through out_proj.",
    "weights averaged over the heads": "you averaged the weights over the heads; every head's "
    "weights are returned, (B, H, L, S) (torch gives them when told not to average).",
}
_FLAWS = (*families.HEADS, "scaled by √d_model", "no scale", "softmax over the queries")
_FLAWS += ("softmax over the heads", *_OWN_FLAWS, "mask ignored", "mask inverted")
_FLAWS += ("mask inverted, empty rows zeroed", "mask filled with 0", *families.FLOAT_MASK)


def _case(randn):
    """``case(name, E, H, query, key, value, mask, **extra)``: key and value default to the query;
    the weights (4, E, E + 1) are drawn, biases not 0 (as torch's start) so that one left out shows."""

    def case(name, E, H, query, key=None, value=None, mask=None, **extra):
        key, W = query if key is None else key, randn(4, E, E) / math.sqrt(E)
        weights = torch.cat([W, 0.2 * randn(4, E, 1)], dim=-1)
        kwargs = {"attn_mask": mask, "weights": weights, "heads": H}
        return Case(name, (query, key, key if value is None else value), kwargs, extra)

    return case


def _mha_cases():
    case = _case(randn := seeded_randn(2))
    yield case("self-attention, no mask: x (2, 5, 24), 4 heads of size 6", 24, 4, randn(2, 5, 24))
    cross = "cross-attention: query (2, 5, 24), key and value (2, 7, 24), 4 heads"
    yield case(cross, 24, 4, randn(2, 5, 24), randn(2, 7, 24), randn(2, 7, 24))
    padding = torch.tensor([[True] * 6 + [False], [True] * 4 + [False] * 3]).view(2, 1, 1, 7)
    name = "padding mask (2, 1, 1, 7), True = may attend: 6 and 4 real keys of 7"
    yield case(name, 24, 4, randn(2, 5, 24), randn(2, 7, 24), randn(2, 7, 24), padding)
    causal = "causal mask (6, 6), True = may attend: query i sees keys 0..i; 3 heads of size 8"
    yield case(causal, 24, 3, randn(2, 6, 24), mask=families.causal(6, 6))
    yield case("8 heads of size 4 (h = 8, d_model = 32): x (1, 4, 32)", 32, 8, randn(1, 4, 32))


def _float_cases():
    """The cases of the lesson's skeleton: float masks, and need_weights."""
    case = _case(randn := seeded_randn(3))
    bias = "float mask (5, 7): a bias added to the scores of every head, no -inf; cross-attention"
    yield case(bias, 24, 4, randn(2, 5, 24), randn(2, 7, 24), randn(2, 7, 24), randn(5, 7))
    padding = torch.zeros(2, 1, 1, 7)
    padding[0, ..., 6:] = padding[1, ..., 4:] = float("-inf")
    name = "float padding mask (2, 1, 1, 7): 0 for the 6 and 4 real keys, -inf for the pads"
    yield case(name, 24, 4, randn(2, 5, 24), randn(2, 7, 24), randn(2, 7, 24), padding)
    name = "a bias per head (4, 6, 6), as ALiBi adds: -slope_h·(i − j) for j ≤ i, -inf after i"
    i, j, slopes = torch.arange(6)[:, None], torch.arange(6), 2.0 ** -torch.arange(1.0, 5.0)
    alibi = (-slopes[:, None, None] * (i - j)).masked_fill(j > i, float("-inf"))  # Press et al.
    yield case(name, 24, 4, randn(2, 6, 24), mask=alibi)
    no_weights = "need_weights False, causal bool mask (6, 6), 3 heads: the weights are None"
    yield case(no_weights, 24, 3, randn(2, 6, 24), mask=families.causal(6, 6), need_weights=False)


def _build_mha(candidate, case: Case, table: Table):
    """The learner's class built for the case, loaded with its weights, called on its inputs."""
    weights, H, mask = case.kwargs["weights"], case.kwargs["heads"], case.kwargs["attn_mask"]
    E = weights.size(1)
    module = build_module(candidate, case, (E, H))
    missing = [n for n in _PROJECTIONS if not isinstance(getattr(module, n, None), nn.Module)]
    if missing:  # an unsolved skeleton is "not done yet", not "wrong"
        with torch.no_grad(), contextlib.suppress(ExerciseFailure):
            call_candidate(module, case.name, *case.args)
        raise ExerciseFailure(
            f"Case {case.name!r}: your MultiHeadAttention has no {', '.join(missing)}. __init__ "
            "makes the four projections W^Q, W^K, W^V and W^O, each an nn.Linear from embed_dim "
            "to embed_dim features: self.q_proj, self.k_proj, self.v_proj and self.out_proj."
        )
    made = f"an nn.Linear from embed_dim = {E} to {E} features, with a bias (as torch's has)"
    for name, W, b in zip(_PROJECTIONS, weights[..., :-1], weights[..., -1], strict=True):
        copy_weight_and_bias(getattr(module, name), W, b, case.name, f"self.{name}", made)
    module.eval()
    options = {"mask": mask, "crash_hint": table.crash, "scores": "(B, H, L, S)"}
    with torch.no_grad():
        got = call_attention(module, case.name, *case.args, **options)
        if case.extra.get("need_weights") is not False:
            return got
        no_weights = functools.partial(module, need_weights=False)
        without = call_attention(no_weights, case.name, *case.args, **options)
    _require_no_weights(case, without, got)
    return without[0], got[1]


def _require_no_weights(case: Case, without, got) -> None:
    """``need_weights=False``: the output as with the weights, and None in their place."""
    pair("output", "weights")(case, without, got)
    if (weights := without[1]) is not None:
        made = f" {shape_str(weights.shape)}" if isinstance(weights, torch.Tensor) else ""
        raise ExerciseFailure(
            f"Case {case.name!r}: the weights should be None, got {type(weights).__name__}{made}.\n"
            "Likely cause: need_weights is ignored. When it is False the layer gives (output, "
            "None), as torch.nn.MultiheadAttention does, and may skip forming the weights."
        )
    output = got[0] if isinstance(got, tuple) and len(got) == 2 else None
    if output is not None and not close(without[0], output, 1e-5, 1e-5, equal_nan=True):
        raise ExerciseFailure(
            f"Case {case.name!r}: the outputs differ with need_weights False and True.\nLikely "
            "cause: the branch without weights; if it calls F.scaled_dot_product_attention, give "
            "it the same mask (its bool masks are True = may attend too, and it adds float ones)."
        )


def _weights_given(case: Case, got, expected) -> None:
    if got[1] is None:
        raise ExerciseFailure(
            f"Case {case.name!r}: the weights should be a torch.Tensor, got NoneType.\nLikely "
            "cause: need_weights is True here, its default: every head's weights come back."
        )


def _heads_hint(got, case: Case) -> str:
    (B, L, _), S = case.args[0].shape, case.args[1].size(1)
    H, mask = case.kwargs["heads"], case.kwargs["attn_mask"]
    if mask is not None and got.dim() > 4:
        return mask_hint(mask, "(B, H, L, S)")
    if tuple(got.shape) == (B, L, S):
        return (
            "your weights have no heads axis: Q, K and V are split into H heads of D = E / H "
            "features each, (B, H, L, D), and every head's weights come back."
        )
    if got.dim() == 4 and got.size(1) != H:
        return (
            f"your weights have {got.size(1)} heads, but this case built the module with {H}: use "
            "the number of heads given to __init__ (and D = E / H), not a fixed number."
        )
    return "one row per query and one column per key, for every head: (B, H, L, S)."


_EACH_STEP = (
    "compare the steps: the queries and keys of each head, their scores scaled by √d_k, the mask, "
    "and the softmax over the keys."
)
_MERGED = "the output is (B, L, E): the heads merged back side by side, then W^O (out_proj)."
_AFTER_THE_WEIGHTS = (
    "the weights are right, so look at what follows: each head's weighted sum of its values, the "
    "heads merged back to (B, L, E), then W^O (out_proj)."
)
MHA = Table(
    cases=_mha_cases,
    reference=_torch_mha,
    mistakes=families.mistakes(_mha, _FLAWS, **_OWN_FLAWS),
    outputs=[
        Out("the per-head weights", 1, _heads_hint, weights_cause(), fallback=_EACH_STEP),
        Out("the outputs", 0, _MERGED, fallback=_AFTER_THE_WEIGHTS),
    ],
    call=_build_mha,
    shape_checks=[pair("output", "weights"), _weights_given],
    crash="a shape mix-up. Every size comes from the inputs and from self (B, L, E from the "
    "query, S from the key, H given to __init__, D = E / H), never from the notebook's variables. "
    "Follow the shapes: (B, L, E), then (B, L, H, D), then (B, H, L, D).",
    atol=1e-4,
    rtol=1e-3,
)


@exercise(
    "MultiHeadAttention",
    "02",
    reference=MultiHeadAttention,
    todo="Write __init__ (the four projections q_proj, k_proj, v_proj, out_proj) and forward (the "
    "output and every head's weights; bool and float masks; need_weights).",
    points=3,
    own_work=MHA_ROUTINES,
)
def check_multi_head_attention(candidate) -> int:
    """Check ``MultiHeadAttention(embed_dim, num_heads)`` against torch's with the same weights: five
    cases of bool masks, and four of float masks and need_weights for a forward that takes it."""
    n = run(candidate, MHA)
    if accepts(getattr(candidate, "forward", None), "need_weights"):
        n += run(candidate, dataclasses.replace(MHA, cases=_float_cases))
    return n


def load_torch_weights(module, torch_mha):
    """The reference: torch's W^Q, W^K, W^V (in_proj_weight and in_proj_bias, three blocks of rows)
    and W^O copied into ``module``'s four Linears; ``module`` comes back."""
    blocks = zip(torch_mha.in_proj_weight.chunk(3), torch_mha.in_proj_bias.chunk(3), strict=True)
    with torch.no_grad():
        for linear, (weight, bias) in zip((module.q_proj, module.k_proj, module.v_proj), blocks):
            linear.weight.copy_(weight)
            linear.bias.copy_(bias)
        module.out_proj.load_state_dict(torch_mha.out_proj.state_dict())
    return module


_PACKED = (
    "torch's in_proj_weight (3·E, E) holds W^Q, W^K, W^V as three blocks of E rows, in that order, "
    "each (out, in) as nn.Linear keeps its weight; in_proj_bias (3·E,) their biases the same way"
)
_COPY_ALL = "Copy every part (q_proj, k_proj, v_proj and out_proj), each its weight and its bias"


def _parts(module: nn.Module) -> dict[str, list[torch.Tensor]]:
    """Copies of the weight and bias of each of the exercise module's four Linears, by name."""
    return {n: [t.detach().clone() for t in getattr(module, n).parameters()] for n in _PROJECTIONS}


def _check_part(case: str, module, source, name: str, what: str, parts: dict, before) -> None:
    got, want = getattr(getattr(module, name), what), parts[name][what == "bias"]
    where = f"module.{name}.{what}"
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        shape = shape_str(got.shape) if isinstance(got, torch.Tensor) else "missing"
        raise ExerciseFailure(
            f"Case {case!r}: {where} is {shape}, expected {shape_str(want.shape)}.\nLikely cause: "
            f"{_PACKED}."
        )
    if not torch.equal(numbers := got.detach(), want):
        other = next((n for n, p in parts.items() for t in p if torch.equal(numbers, t)), None)
        cause = f"it holds the {what} of {other}: {_PACKED}." if other else f"{_PACKED}."
        if torch.equal(numbers, before):
            end = ": torch's out_proj is an nn.Linear too." if name == "out_proj" else "."
            cause = f"it was not copied: it still holds its own random numbers. {_COPY_ALL}{end}"
        elif what == "weight" and torch.equal(numbers, want.mT):
            cause = (
                "it is the transpose of torch's. nn.Linear keeps its weight as (out, in), and so "
                "does each block of in_proj_weight: no transpose is needed."
            )
        raise ExerciseFailure(f"Case {case!r}: {where} is not torch's.\nLikely cause: {cause}")
    memory = got.untyped_storage().data_ptr()
    if any(memory == t.untyped_storage().data_ptr() for t in source.parameters()):
        raise ExerciseFailure(
            f"Case {case!r}: {where} shares its memory with torch's module.\nLikely cause: it was "
            "given torch's tensor (or a slice of it), not a copy of its numbers: training one "
            "would change the other."
        )
    if not isinstance(got, nn.Parameter) or not got.requires_grad:
        raise ExerciseFailure(
            f"Case {case!r}: {where} is no longer a trainable nn.Parameter.\nLikely cause: the "
            "numbers go into the existing parameter (with autograd off, torch.no_grad), rather "
            "than a new tensor in its place."
        )


todo = "Copy torch's in_proj and out_proj weights into module's four Linears; give module back."


@exercise("load_torch_weights", "02", reference=load_torch_weights, todo=todo)
def check_load_torch_weights(candidate) -> int:
    """Check ``candidate(module, torch_mha) -> module``: torch's weights copied into the four
    Linears of a MultiHeadAttention, torch's own module left as it was."""
    for seed, (E, H) in enumerate(((24, 4), (8, 2), (6, 3))):
        case = f"E = {E}, {H} heads"
        torch.manual_seed(100 + seed)
        source = nn.MultiheadAttention(E, H, batch_first=True)
        with torch.no_grad():  # torch starts the biases at 0: a bias left out would not show
            source.in_proj_bias.normal_(0.0, 0.5)
            source.out_proj.bias.normal_(0.0, 0.5)
        state = {k: v.clone() for k, v in source.state_dict().items()}
        module = MultiHeadAttention(E, H)
        before, parts = _parts(module), _parts(load_torch_weights(MultiHeadAttention(E, H), source))
        try:
            result = call_candidate(candidate, case, module, source, crash_hint=f"{_PACKED}.")
        except ExerciseFailure as failure:
            if "leaf Variable" not in str(failure.raised):
                raise
            raise failure.with_cause(
                "a parameter that requires grad cannot be changed in place while autograd "
                "records: make the copies with autograd off (torch.no_grad)."
            ) from failure.raised
        changed = [k for k, v in source.state_dict().items() if not torch.equal(v, state[k])]
        if changed:
            raise ExerciseFailure(
                f"Case {case!r}: torch's module changed ({', '.join(changed)}).\nLikely cause: the "
                "copy goes the other way: from torch_mha (left as it is) into module."
            )
        for name in _PROJECTIONS:
            for what in ("weight", "bias"):
                _check_part(case, module, source, name, what, parts, before[name][what == "bias"])
        if result is not module:
            raise ExerciseFailure(
                f"Case {case!r}: the weights are right, but the function returned "
                f"{type(result).__name__}.\nLikely cause: the function gives the module back too, "
                "so that a module can be made and loaded in one line."
            )
    return 3
