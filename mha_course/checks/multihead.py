"""Checkers for lesson 02: multi-head attention against torch.nn.MultiheadAttention, and the copy of
torch's packed weights into the learner's module.

The learner's class is built as ``MultiHeadAttention(embed_dim, num_heads)``; torch's packed
``in_proj_weight`` = [W^Q; W^K; W^V] is cut into its ``q_proj``, ``k_proj`` and ``v_proj`` and
``out_proj`` gets W^O. Both run on the same inputs, and the outputs and the per-head weights
(torch's ``average_attn_weights=False``) must agree. A bool mask in the exercise is True where a
query **may attend**; torch's are True where it may **not**, so the checker inverts them for torch.
A float mask is added to the scores in both.

The lesson's skeleton has ``forward(query, key, value, attn_mask=None, need_weights=True)``: a
class whose forward takes ``need_weights`` is also held to float masks (a bias per query and key,
0/-inf padding, a bias per head) and to returning ``(output, None)`` when ``need_weights=False``.
A class written to the first skeleton, ``forward(query, key, value, attn_mask=None)`` with bool
masks, is checked on the five cases of bool masks only.
"""

from __future__ import annotations

import functools
import inspect

import torch
import torch.nn.functional as F
from torch import nn

from .. import multihead, reference
from .._validate import shape_str
from ._core import _close, call_candidate, checker, compare
from ._failure import ExerciseFailure
from ._multihead_mistakes import Weights, mistakes
from ._steps import copy_weight_and_bias, seeded_randn
from .attention import call_attention, keys_summed_hint

__all__ = ["check_multi_head_attention", "check_load_torch_weights"]

# What lesson 02 asks the learner to write themselves (the checker names the one called).
MHA_ROUTINES = {
    "torch's nn.MultiheadAttention": nn.MultiheadAttention,
    "torch's multi_head_attention_forward": F.multi_head_attention_forward,
    "the course's MultiHeadAttention (mha_course)": multihead.MultiHeadAttention,
    "the course's reference (mha_course.reference)": reference.MultiHeadAttention,
}

_PROJECTIONS = ("q_proj", "k_proj", "v_proj", "out_proj")
_ATOL, _RTOL = 1e-4, 1e-3  # the candidate runs in float32, torch in float64


# ---------------------------------------------------------------- building and loading the candidate


def _torch_module(E: int, H: int, seed: int) -> nn.MultiheadAttention:
    """torch's module, float64, with random biases too (torch starts them at 0), so a dropped
    bias shows."""
    torch.manual_seed(seed)
    module = nn.MultiheadAttention(E, H, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        module.in_proj_bias.normal_(0.0, 0.2)
        module.out_proj.bias.normal_(0.0, 0.2)
    # The candidate gets these weights in float32; round torch's copy the same way.
    return module.float().double().train()  # dropout 0, train mode: torch's plain path


_CRASH_HINT = (
    "a shape mix-up. Take every size from the inputs and from self (B, L, E = query.shape, "
    "S = key.size(1), H = self.num_heads, d_k = E // H), never from the notebook's variables: the "
    "check uses other sizes. Print the shapes step by step: (B, L, E) -> view (B, L, H, d_k) -> "
    "transpose (B, H, L, d_k)."
)


def _build(candidate, case: str, E: int, H: int, x: torch.Tensor) -> nn.Module:
    if isinstance(candidate, nn.Module):
        raise ExerciseFailure(
            "Pass the class itself, check_multi_head_attention(MultiHeadAttention), not "
            "an instance of it: the checker builds its own with several sizes."
        )
    module = call_candidate(candidate, case, E, H)
    if not isinstance(module, nn.Module):
        raise ExerciseFailure(
            f"Case {case!r}: MultiHeadAttention({E}, {H}) gave a {type(module).__name__}; "
            f"make the class an nn.Module (class MultiHeadAttention(nn.Module)) and call "
            f"super().__init__() first in __init__."
        )
    missing = [
        name for name in _PROJECTIONS if not isinstance(getattr(module, name, None), nn.Module)
    ]
    if missing:
        try:  # an unsolved skeleton is "not done yet", not "wrong"
            with torch.no_grad():
                call_candidate(module, case, x, x, x)
        except ExerciseFailure:
            pass  # it crashed: the missing parts explain why
        raise ExerciseFailure(
            f"Case {case!r}: your MultiHeadAttention has no {', '.join(missing)}. In __init__, define "
            f"the four projections, each nn.Linear(embed_dim, embed_dim): self.q_proj (W^Q), "
            f"self.k_proj (W^K), self.v_proj (W^V) and self.out_proj (W^O)."
        )
    return module


def _load(module: nn.Module, reference: nn.MultiheadAttention, case: str) -> None:
    """Copy torch's W^Q, W^K, W^V (rows of in_proj_weight) and W^O into the four Linears."""
    E = reference.embed_dim
    p = Weights.of(reference)
    linear = f"nn.Linear(embed_dim, embed_dim) = nn.Linear({E}, {E})"
    for name, (weight, bias) in zip(_PROJECTIONS, (p.q, p.k, p.v, p.o), strict=True):
        copy_weight_and_bias(
            getattr(module, name),
            weight,
            bias,
            case,
            f"self.{name}",
            linear,
            note=" (with its bias, as torch.nn.MultiheadAttention has)",
        )


def _cases():
    """(case, E, H, query, key, value, mask); the mask is True where a query may attend."""
    randn = seeded_randn(2)

    x = randn(2, 5, 24)
    yield "self-attention, no mask: x (2, 5, 24), 4 heads of size 6", 24, 4, x, x, x, None
    yield (
        "cross-attention: query (2, 5, 24), key and value (2, 7, 24), 4 heads",
        24,
        4,
        randn(2, 5, 24),
        randn(2, 7, 24),
        randn(2, 7, 24),
        None,
    )
    padding = torch.tensor([[True] * 6 + [False], [True] * 4 + [False] * 3]).view(2, 1, 1, 7)
    yield (
        "padding mask (2, 1, 1, 7), True = may attend: the last key of sentence 1 and the last 3 of "
        "sentence 2 are padding",
        24,
        4,
        randn(2, 5, 24),
        randn(2, 7, 24),
        randn(2, 7, 24),
        padding,
    )
    x = randn(2, 6, 24)
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    yield (
        "causal mask (6, 6), True = may attend: query i sees keys 0..i; 3 heads of size 8",
        24,
        3,
        x,
        x,
        x,
        causal,
    )
    x = randn(1, 4, 32)
    yield "8 heads of size 4 (h = 8, d_model = 32): x (1, 4, 32)", 32, 8, x, x, x, None


def _float_cases():
    """The cases of the lesson's skeleton (float masks), as :func:`_cases`; ``need_weights`` is the
    argument the module is called with (None: left out)."""
    randn = seeded_randn(3)

    def cross():  # query (2, 5, 24), key and value (2, 7, 24)
        return randn(2, 5, 24), randn(2, 7, 24), randn(2, 7, 24)

    def self_attention():  # x (2, 6, 24)
        x = randn(2, 6, 24)
        return x, x, x

    bias = "float mask (5, 7): a bias added to the scores of every head, no -inf; cross-attention"
    yield bias, 24, 4, *cross(), randn(5, 7), None
    padding = torch.zeros(2, 1, 1, 7)
    padding[0, ..., 6:] = padding[1, ..., 4:] = float("-inf")
    yield (
        "float padding mask (2, 1, 1, 7): 0 for a real key, -inf for padding (the last key of "
        "sentence 1, the last 3 of sentence 2)",
        *(24, 4, *cross(), padding, None),
    )
    per_head = (
        "a bias per head (4, 6, 6), as ALiBi adds: -slope_h·(i − j) for keys j ≤ i, -inf after i"
    )
    yield per_head, 24, 4, *self_attention(), _alibi_like(4, 6), None
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    no_weights = "need_weights=False, causal bool mask (6, 6), 3 heads: return (output, None)"
    yield no_weights, 24, 3, *self_attention(), causal, False


def _alibi_like(H: int, L: int) -> torch.Tensor:
    """(H, L, L): head h adds -slope_h · (i − j) to the score of query i and key j ≤ i, -inf
    to a later key (the bias of ALiBi, Press et al. 2022, with its causal mask)."""
    slopes = 2.0 ** -torch.arange(1, H + 1, dtype=torch.float32)
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    bias = -slopes[:, None, None] * (i - j).float()
    return bias.masked_fill(j > i, float("-inf"))


def _torch_mask(mask: torch.Tensor | None, B: int, H: int, L: int, S: int):
    """The exercise's mask, bool (True = may attend) or float (added), as torch's attn_mask of
    shape (B·H, L, S): True = masked out for a bool one; a float one as it is, in float64."""
    if mask is None:
        return None
    full = torch.broadcast_to(mask, (B, H, L, S)).reshape(B * H, L, S)
    return ~full if mask.dtype == torch.bool else full.double()


def _torch_masks(mask: torch.Tensor | None):
    """The exercise's mask (True = may attend) as torch's (attn_mask, key_padding_mask)."""
    if mask is None:
        return None, None
    if mask.dim() == 2:  # (L, S)
        return ~mask, None
    return None, ~mask.reshape(mask.size(0), -1)  # (B, 1, 1, S) padding


# ---------------------------------------------------------------- the checker


def _mask_hint(mask: torch.Tensor) -> str:
    if mask.dtype != torch.bool:
        return (
            f"your MultiHeadAttention runs without a mask but not with this float one, "
            f"{shape_str(mask.shape)}. A float mask is added to the scores (B, H, L, S), as it "
            "is: ~ and masked_fill are for bool masks; tell the two apart by attn_mask.dtype. No "
            "unsqueeze or view either: it already broadcasts ((H, L, S) is a bias per head)."
        )
    return (
        f"your MultiHeadAttention runs without a mask but not with this one. attn_mask "
        f"{shape_str(mask.shape)} is already shaped to broadcast against the scores (B, H, L, S): "
        "(B, 1, 1, S) for padding, (L, S) for causal. Use it as it is: no unsqueeze or view "
        "(an extra unsqueeze(1) makes it (B, 1, 1, 1, S), one axis too many)."
    )


@checker(
    "MultiHeadAttention",
    "Write __init__ (the four projections q_proj, k_proj, v_proj, out_proj) and forward (the "
    "output and every head's weights; bool and float masks; need_weights).",
    own_work=MHA_ROUTINES,
)
def check_multi_head_attention(candidate) -> int:
    """Check ``candidate(embed_dim, num_heads)`` (a MultiHeadAttention class with ``q_proj``, ``k_proj``,
    ``v_proj``, ``out_proj``; ``forward(query, key, value, attn_mask=None, need_weights=True)`` ->
    ``(output (B, L, E), weights (B, H, L, S) or None)``) against ``torch.nn.MultiheadAttention``
    with the same weights. A forward without ``need_weights`` (the first skeleton) is held to the
    bool-mask cases only."""
    with torch.random.fork_rng(
        devices=[]
    ):  # building the modules must not shift the learner's seed
        return _run_cases(candidate)


def _takes_need_weights(candidate) -> bool:
    """Whether the class's forward takes ``need_weights`` (the lesson's skeleton does)."""
    try:
        parameters = inspect.signature(candidate.forward).parameters.values()
    except (AttributeError, TypeError, ValueError):
        return False
    return any(p.name == "need_weights" or p.kind is p.VAR_KEYWORD for p in parameters)


def _all_cases(candidate):
    """The bool-mask cases, then, for a forward that takes ``need_weights``, the float-mask ones."""
    for case, E, H, query, key, value, mask in _cases():
        yield case, E, H, query, key, value, mask, None
    if _takes_need_weights(candidate):
        yield from _float_cases()


def _run_cases(candidate) -> int:
    n = 0
    for seed, (case, E, H, query, key, value, mask, need_weights) in enumerate(
        _all_cases(candidate)
    ):
        module = _build(candidate, case, E, H, query)
        reference = _torch_module(E, H, seed)
        _load(module, reference, case)
        module.eval()
        call = module if need_weights is None else functools.partial(module, need_weights=False)
        B, L, S = query.size(0), query.size(1), key.size(1)
        with torch.no_grad():
            out, weights = _call(call, case, query, key, value, mask)
            expected = reference(
                query.double(),
                key.double(),
                value.double(),
                attn_mask=_torch_mask(mask, B, H, L, S),
                average_attn_weights=False,
            )
        args = (query.double(), key.double(), value.double(), mask)
        classic = mistakes(Weights.of(reference))
        if need_weights is False:
            _check_no_weights(case, out, weights, expected, classic, args)
            n += 1
            continue
        _check_shapes(case, out, weights, expected, mask)
        _compare(
            case,
            (weights, expected, 1),
            classic,
            args,
            cause=_nan_hint(weights, mask) or keys_summed_hint(weights),
            fallback_cause="compare the steps: the queries and keys of each head, their scores "
            "scaled by √d_k, the mask, and the softmax over the keys (dim=-1).",
        )
        _compare(
            case,
            (out, expected, 0),
            classic,
            args,
            fallback_cause="the weights are right, so look at what follows: weights @ V, merge "
            "the heads back to (B, L, E), then out_proj.",
        )
        n += 1
    return n


def _call(module, case: str, query, key, value, mask) -> tuple:
    """The candidate on one case; a name it cannot find (a helper of an earlier notebook, say)
    is named as the likely cause."""
    try:
        return call_attention(
            module, case, query, key, value, mask, crash_hint=_CRASH_HINT, mask_hint=_mask_hint
        )
    except ExerciseFailure as failure:
        error = failure.raised
        if isinstance(error, NameError):
            name = getattr(error, "name", None) or "a name"
            cause = (
                f"your MultiHeadAttention uses `{name}`, which is not defined where it runs. A "
                "helper belongs in the exercise cell, with the class (that cell is what is saved "
                "and checked), or write its step inside forward."
            )
        elif isinstance(error, RuntimeError) and "view size is not compatible" in str(error):
            cause = (
                "view cannot merge the axes of a transposed tensor (its numbers are no longer in "
                "memory order): use reshape, or .contiguous() before view."
            )
        else:
            raise
        raise failure.with_cause(cause) from error


def _compare(case: str, got_expected_index, classic, args, **causes) -> None:
    """The candidate's output (index 0) or per-head weights (index 1) against torch's, the
    classic mistakes run on ``args`` to name the likely cause."""
    got, expected, i = got_expected_index
    what = ("outputs", "per-head weights")[i]
    compare(
        case,
        what,
        got,
        expected[i],
        atol=_ATOL,
        rtol=_RTOL,
        mistakes=classic,
        args=args,
        pick=lambda r: r[i],
        **causes,
    )


def _check_no_weights(case: str, out, weights, expected, classic, args) -> None:
    """``need_weights=False``: the output as before, and None in place of the weights."""
    if weights is not None:
        raise ExerciseFailure(
            f"Case {case!r}: the weights should be None, got "
            f"{type(weights).__name__}"
            + (f" {shape_str(weights.shape)}" if isinstance(weights, torch.Tensor) else "")
            + ".\nLikely cause: need_weights is ignored. With need_weights=False return "
            "(output, None), as torch.nn.MultiheadAttention does: a caller who needs no weights "
            "lets the layer skip them (a fused kernel never forms them in full)."
        )
    if not isinstance(out, torch.Tensor) or tuple(out.shape) != tuple(expected[0].shape):
        got = shape_str(out.shape) if isinstance(out, torch.Tensor) else type(out).__name__
        raise ExerciseFailure(
            f"Case {case!r}: the output is {got}, expected (B, L, E) = "
            f"{shape_str(expected[0].shape)}.\nLikely cause: with need_weights=False the output "
            "is the same as with the weights; only the weights become None."
        )
    _compare(
        case,
        (out, expected, 0),
        classic,
        args,
        fallback_cause="the output with need_weights=False should be the one with the weights; "
        "if this branch calls F.scaled_dot_product_attention, give it the same mask (its bool "
        "masks are True = may attend too, and it adds float ones).",
    )


def _check_shapes(case: str, out, weights, expected, mask) -> None:
    for what, got in (("output", out), ("weights", weights)):
        if not isinstance(got, torch.Tensor):
            hint = (
                "\nLikely cause: need_weights is True (the default) here: return every head's "
                "weights; only need_weights=False gives None."
                if what == "weights" and got is None
                else ""
            )
            raise ExerciseFailure(
                f"Case {case!r}: the {what} should be a torch.Tensor, got {type(got).__name__}."
                + hint
            )
    B, H, L, S = expected[1].shape
    if out.shape == expected[1].shape and weights.shape == expected[0].shape:
        raise ExerciseFailure(
            f"Case {case!r}: you returned (weights, output): the first tensor is "
            f"{shape_str(out.shape)}, the shape of the weights (B, H, L, S), and the second "
            f"{shape_str(weights.shape)}, that of the output (B, L, E).\n"
            f"Likely cause: the order of the pair. Return (output, weights)."
        )
    if tuple(weights.shape) != (B, H, L, S):
        if mask is not None and weights.dim() > 4:
            hint = _mask_hint(mask)
        elif tuple(weights.shape) == (B, L, S):
            averaged = _close(weights, expected[1].mean(dim=1), _ATOL, _RTOL)
            hint = (
                "you averaged the weights over the heads; return every head's weights, (B, H, L, S) "
                "(torch does this with average_attn_weights=False)."
                if averaged
                else "your weights have no heads axis: split Q, K and V into H heads of size "
                "D = embed_dim // num_heads, 'b l (h d) -> b h l d', and return every head's weights."
            )
        elif weights.dim() == 4 and tuple(weights.shape[::2]) == (B, L) and weights.size(-1) == S:
            hint = (
                f"your weights have {weights.size(1)} heads, but this case built the module with "
                f"num_heads={H}: use the num_heads given to __init__ (and head size "
                f"D = embed_dim // num_heads), not a fixed number."
            )
        else:
            hint = "one row per query and one column per key, for every head: (B, H, L, S)."
        raise ExerciseFailure(
            f"Case {case!r}: the weights have shape {shape_str(weights.shape)}, expected "
            f"(B, H, L, S) = {shape_str((B, H, L, S))}.\nLikely cause: {hint}"
        )
    if tuple(out.shape) != tuple(expected[0].shape):
        raise ExerciseFailure(
            f"Case {case!r}: the output has shape {shape_str(out.shape)}, expected (B, L, E) "
            f"= {shape_str(expected[0].shape)}.\nLikely cause: merge the heads back, "
            f"'b h l d -> b l (h d)', then apply out_proj."
        )


def _nan_hint(weights: torch.Tensor, mask: torch.Tensor | None) -> str | None:
    if not torch.isnan(weights).any():
        return None
    if (
        mask is not None and mask.dtype == torch.bool and not (~mask).any(dim=-1).all()
    ):  # inverted, some rows have no key: NaN
        return (
            "the mask is inverted: here True means 'may attend', so blank out where attn_mask is False. "
            "Inverted, some queries may attend to nothing, and the softmax of a row of -inf is NaN."
        )
    return (
        "NaN in the weights: a softmax over a row of -inf (a query with no key), or exp overflowed."
    )


# ---------------------------------------------------------------- load_torch_weights

_PACKED = (
    "torch's in_proj_weight (3·E, E) holds W^Q, W^K, W^V as its three blocks of E rows, in that "
    "order, each already laid out (out, in) as nn.Linear keeps its weight; in_proj_bias (3·E,) "
    "holds their biases the same way"
)


def _load_cases():
    """(case, E, H): torch modules with random weights and biases, and a module to fill."""
    yield "E = 24, 4 heads", 24, 4
    yield "E = 8, 2 heads", 8, 2
    yield "E = 6, 3 heads", 6, 3


def _random_torch_module(E: int, H: int, seed: int) -> nn.MultiheadAttention:
    torch.manual_seed(100 + seed)
    module = nn.MultiheadAttention(E, H, batch_first=True)
    with torch.no_grad():
        for t in (module.in_proj_bias, module.out_proj.bias):
            t.normal_(0.0, 0.5)  # torch starts them at 0: a bias left out would not show
    return module


def _expected_parts(module: nn.MultiheadAttention) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    p = Weights.of(module)
    return {
        name: (w.detach().clone(), b.detach().clone())
        for name, (w, b) in zip(_PROJECTIONS, (p.q, p.k, p.v, p.o), strict=True)
    }


def _shares_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()


def _which_block(got: torch.Tensor, expected: dict) -> str | None:
    """The name of the part whose weight (or bias) ``got`` is, if it is one of torch's."""
    for name, (w, b) in expected.items():
        for t in (w, b):
            if got.shape == t.shape and torch.equal(got.detach(), t):
                return name
    return None


def _part_failure(case: str, name: str, what: str, got, want, expected, before) -> ExerciseFailure:
    where = f"module.{name}.{what}"
    head = f"Case {case!r}: {where} is not torch's."
    g = got.detach()
    if torch.equal(g, before):
        cause = (
            "it was not copied: it still holds its own random numbers. Copy every part: "
            "q_proj, k_proj, v_proj and out_proj, each its weight and its bias"
            + (" (torch's out_proj is an nn.Linear too)." if name == "out_proj" else ".")
        )
    elif what == "weight" and g.shape == want.shape and torch.equal(g, want.T):
        cause = (
            "it is the transpose of torch's. nn.Linear keeps its weight as (out, in), and so "
            "does each block of in_proj_weight: copy it as it is, without .T."
        )
    elif (other := _which_block(g, expected)) is not None:
        cause = (
            f"it holds the {what} of {other}: the blocks are in the order W^Q, W^K, W^V. {_PACKED}."
        )
    else:
        cause = f"{_PACKED}; torch's out_proj is an nn.Linear like yours."
    return ExerciseFailure(f"{head}\nLikely cause: {cause}")


@checker(
    "load_torch_weights",
    "Copy torch's packed W^Q, W^K, W^V (in_proj_weight, in_proj_bias) and its out_proj into "
    "module's q_proj, k_proj, v_proj and out_proj, and return module.",
)
def check_load_torch_weights(candidate) -> int:
    """Check ``candidate(module, torch_mha) -> module``: torch's weights copied into the four
    Linears of a module like lesson 02's MultiHeadAttention, torch's own module left as it was."""
    with torch.random.fork_rng(devices=[]):
        return _run_load_cases(candidate)


def _run_load_cases(candidate) -> int:
    n = 0
    for seed, (case, E, H) in enumerate(_load_cases()):
        source = _random_torch_module(E, H, seed)
        expected = _expected_parts(source)
        torch.manual_seed(200 + seed)
        module = reference.MultiHeadAttention(E, H)
        before = {
            name: [t.detach().clone() for t in (part.weight, part.bias)]
            for name, part in ((name, getattr(module, name)) for name in _PROJECTIONS)
        }
        torch_state = {k: v.detach().clone() for k, v in source.state_dict().items()}
        result = _call_loader(candidate, case, module, source)
        changed = [k for k, v in source.state_dict().items() if not torch.equal(v, torch_state[k])]
        if changed:
            raise ExerciseFailure(
                f"Case {case!r}: torch's module changed ({', '.join(changed)}).\nLikely cause: "
                "the copy goes the other way: from torch_mha (left as it is) into module."
            )
        for name in _PROJECTIONS:
            for i, what in enumerate(("weight", "bias")):
                _check_part(case, module, source, name, what, expected, before[name][i])
        if result is not module:
            raise ExerciseFailure(
                f"Case {case!r}: the weights are right, but the function returned "
                f"{type(result).__name__}.\nLikely cause: end with `return module`, so that "
                "yours = load_torch_weights(MultiHeadAttention(E, H), torch_mha) works."
            )
        n += 1
    return n


def _call_loader(candidate, case: str, module: nn.Module, source: nn.Module):
    try:
        return call_candidate(
            candidate, case, module, source, crash_hint=f"{_PACKED}; copy them as they are."
        )
    except ExerciseFailure as failure:
        if failure.raised is None or "leaf Variable" not in str(failure.raised):
            raise
        raise failure.with_cause(
            "a parameter that requires grad cannot be changed in place while autograd records: "
            "do the copies inside `with torch.no_grad():`."
        ) from failure.raised


def _check_part(case, module, source, name: str, what: str, expected, before) -> None:
    got = getattr(getattr(module, name), what)
    want = expected[name][0 if what == "weight" else 1]
    if not isinstance(got, torch.Tensor) or got.shape != want.shape:
        shape = shape_str(got.shape) if isinstance(got, torch.Tensor) else "missing"
        raise ExerciseFailure(
            f"Case {case!r}: module.{name}.{what} is {shape}, expected "
            f"{shape_str(want.shape)}.\nLikely cause: {_PACKED}."
        )
    if not torch.equal(got.detach(), want):
        raise _part_failure(case, name, what, got, want, expected, before)
    if any(_shares_memory(got, t) for t in source.parameters()):
        raise ExerciseFailure(
            f"Case {case!r}: module.{name}.{what} shares its memory with torch's module.\n"
            "Likely cause: it was given torch's tensor (or a slice of it) instead of a copy of "
            "its numbers, so training one would change the other. Copy the numbers into the "
            "Linear's own tensor, under torch.no_grad()."
        )
    if not isinstance(got, nn.Parameter) or not got.requires_grad:
        raise ExerciseFailure(
            f"Case {case!r}: module.{name}.{what} is no longer a trainable nn.Parameter.\n"
            "Likely cause: copy the numbers into the existing parameter (under "
            "torch.no_grad()) rather than replacing it."
        )
