"""Checker for lesson 02: multi-head attention, against torch.nn.MultiheadAttention.

The learner's class is built as ``MultiHeadAttention(embed_dim, num_heads)``; torch's packed
``in_proj_weight`` = [W^Q; W^K; W^V] is cut into its ``q_proj``, ``k_proj`` and ``v_proj`` and
``out_proj`` gets W^O. Both run on the same inputs, and the outputs and the per-head weights
(torch's ``average_attn_weights=False``) must agree. Masks in the exercise are True where a query
**may attend**; torch's are True where it may **not**, so the checker inverts them for torch.
"""

from __future__ import annotations

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

__all__ = ["check_multi_head_attention"]

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


def _torch_masks(mask: torch.Tensor | None):
    """The exercise's mask (True = may attend) as torch's (attn_mask, key_padding_mask)."""
    if mask is None:
        return None, None
    if mask.dim() == 2:  # (L, S)
        return ~mask, None
    return None, ~mask.reshape(mask.size(0), -1)  # (B, 1, 1, S) padding


# ---------------------------------------------------------------- the checker


def _mask_hint(mask: torch.Tensor) -> str:
    return (
        f"your MultiHeadAttention runs without a mask but not with this one. attn_mask "
        f"{shape_str(mask.shape)} is already shaped to broadcast against the scores (B, H, L, S): "
        "(B, 1, 1, S) for padding, (L, S) for causal. Pass it on as it is: no unsqueeze or view "
        "(an extra unsqueeze(1) makes it (B, 1, 1, 1, S), one axis too many)."
    )


@checker(
    "MultiHeadAttention",
    "Write __init__ (self.num_heads and the four Linears q_proj, k_proj, v_proj, out_proj) and "
    "forward: project, split into heads, attend (with your scaled_dot_product_attention), merge "
    "the heads, out_proj.",
    own_work=MHA_ROUTINES,
)
def check_multi_head_attention(candidate) -> int:
    """Check ``candidate(embed_dim, num_heads)`` (a MultiHeadAttention class with ``q_proj``, ``k_proj``,
    ``v_proj``, ``out_proj``; ``forward(query, key, value, attn_mask=None)`` -> ``(output (B, L, E),
    weights (B, H, L, S))``) against ``torch.nn.MultiheadAttention`` with the same weights."""
    with torch.random.fork_rng(
        devices=[]
    ):  # building the modules must not shift the learner's seed
        return _run_cases(candidate)


def _run_cases(candidate) -> int:
    n = 0
    for seed, (case, E, H, query, key, value, mask) in enumerate(_cases()):
        module = _build(candidate, case, E, H, query)
        reference = _torch_module(E, H, seed)
        _load(module, reference, case)
        module.eval()
        attn_mask, padding = _torch_masks(mask)
        with torch.no_grad():
            out, weights = call_attention(
                module, case, query, key, value, mask, crash_hint=_CRASH_HINT, mask_hint=_mask_hint
            )
            expected = reference(
                query.double(),
                key.double(),
                value.double(),
                attn_mask=attn_mask,
                key_padding_mask=padding,
                average_attn_weights=False,
            )
        _check_shapes(case, out, weights, expected, mask)
        args = (query.double(), key.double(), value.double(), mask)
        classic = mistakes(Weights.of(reference))
        compare(
            case,
            "per-head weights",
            weights,
            expected[1],
            atol=_ATOL,
            rtol=_RTOL,
            mistakes=classic,
            args=args,
            pick=lambda r: r[1],
            cause=_nan_hint(weights, mask) or keys_summed_hint(weights),
            fallback_cause="compare the steps: Q = split(q_proj(query)), K = split(k_proj(key)), "
            "weights = softmax(Q Kᵀ / √d_k, masked) over the keys, dim=-1.",
        )
        compare(
            case,
            "outputs",
            out,
            expected[0],
            atol=_ATOL,
            rtol=_RTOL,
            mistakes=classic,
            args=args,
            pick=lambda r: r[0],
            fallback_cause="the weights are right, so look at what follows: weights @ V, merge the "
            "heads back to (B, L, E), then out_proj.",
        )
        n += 1
    return n


def _check_shapes(case: str, out, weights, expected, mask) -> None:
    for what, got in (("output", out), ("weights", weights)):
        if not isinstance(got, torch.Tensor):
            raise ExerciseFailure(
                f"Case {case!r}: the {what} should be a torch.Tensor, got {type(got).__name__}."
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
    if mask is not None and not (~mask).any(dim=-1).all():  # inverted, some rows have no key: NaN
        return (
            "the mask is inverted: here True means 'may attend', so blank out where attn_mask is False. "
            "Inverted, some queries may attend to nothing, and the softmax of a row of -inf is NaN."
        )
    return (
        "NaN in the weights: a softmax over a row of -inf (a query with no key), or exp overflowed."
    )
