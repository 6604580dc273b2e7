"""Checkers for lesson 06's two back-of-the-envelope counts: the work of attention's two matmuls,
and the memory of one (B, H, L, S) scores tensor, the one that fused kernels never build."""

from __future__ import annotations

import torch

from .. import reference
from ._core import Mistake, checker
from ._steps import check_cases

__all__ = ["check_attention_flops", "check_scores_memory"]


# ---------------------------------------------------------------- attention_flops

_FLOPS = "4 * B * H * L * S * D"

_FLOPS_MISTAKES = [
    Mistake(
        "2·B·H·L·S·D",
        lambda B, H, L, S, D: 2 * B * H * L * S * D,
        "you counted 2·B·H·L·S·D: that is one of the two matmuls (Q Kᵀ and weights @ V cost "
        "2·B·H·L·S·D each), or both of them counting a multiply-add as 1 FLOP instead of 2. "
        f"In all: {_FLOPS}.",
    ),
    Mistake(
        "B·H·L·S·D",
        lambda B, H, L, S, D: B * H * L * S * D,
        "you counted the multiply-adds of one matmul: a multiply-add is 2 FLOPs, and there are "
        f"two matmuls, Q Kᵀ and weights @ V: {_FLOPS}.",
    ),
    Mistake(
        "no H",
        lambda B, H, L, S, D: 4 * B * L * S * D,
        f"the heads are missing: each of the H heads does its own two matmuls: {_FLOPS}.",
    ),
    Mistake(
        "L·L",
        lambda B, H, L, S, D: 4 * B * H * L * L * D,
        "you used L·L: there is one score per query and key, L·S (in cross-attention S differs "
        f"from L): {_FLOPS}.",
    ),
    Mistake(
        "S·S",
        lambda B, H, L, S, D: 4 * B * H * S * S * D,
        f"you used S·S: there is one score per query and key, L·S: {_FLOPS}.",
    ),
]


def _flops_hint(got: int, B: int, H: int, L: int, S: int, D: int) -> str:
    extra = got - reference.attention_flops(B, H, L, S, D)
    if extra > 0 and extra % (B * H * L * S) == 0:
        return (
            f"you also counted {extra // (B * H * L * S)} operation(s) per score (the scale, the "
            f"softmax): those are O(B·H·L·S), small next to the matmuls, and left out: {_FLOPS}."
        )
    return f"each matmul is 2·B·H·L·S·D (a multiply and an add per term); both: {_FLOPS}."


_FLOPS_CASES = [  # (case, B, H, L, S, D)
    ("B=2, H=8, L=16, S=24, D=64", 2, 8, 16, 24, 64),
    ("cross-attention, L ≠ S: B=3, H=4, L=10, S=7, D=16", 3, 4, 10, 7, 16),
    ("a long sequence: B=1, H=12, L=S=4096, D=64", 1, 12, 4096, 4096, 64),
    ("one head: B=5, H=1, L=9, S=3, D=8", 5, 1, 9, 3, 8),
    ("everything 1: B=H=L=S=D=1", 1, 1, 1, 1, 1),
]


@checker(
    "attention_flops",
    "Replace `raise NotImplementedError` with the FLOPs of Q Kᵀ and weights @ V.",
)
def check_attention_flops(candidate) -> int:
    """Check ``candidate(B, H, L, S, D) -> int`` = 4·B·H·L·S·D."""
    return check_cases(
        candidate,
        _FLOPS_CASES,
        reference.attention_flops,
        _FLOPS_MISTAKES,
        what="the FLOPs",
        fallback_cause=_flops_hint,
    )


# ---------------------------------------------------------------- scores_memory

_BYTES = "B * H * L * S * dtype.itemsize"

_MEMORY_MISTAKES = [
    Mistake(
        "bits",
        lambda B, H, L, S, dtype: B * H * L * S * torch.finfo(dtype).bits,
        "you counted bits; a byte is 8 bits. The bytes per number: dtype.itemsize (or "
        f"torch.finfo(dtype).bits // 8): {_BYTES}.",
    ),
    Mistake(
        "4 bytes whatever the dtype",
        lambda B, H, L, S, dtype: B * H * L * S * 4,
        "you used 4 bytes per number whatever the dtype; float16 and bfloat16 take 2, float64 "
        f"takes 8: {_BYTES}.",
    ),
    Mistake(
        "elements, not bytes",
        lambda B, H, L, S, dtype: B * H * L * S,
        f"that is the number of elements; multiply by the bytes of each, dtype.itemsize: {_BYTES}.",
    ),
    Mistake(
        "no H",
        lambda B, H, L, S, dtype: B * L * S * dtype.itemsize,
        f"the heads are missing: every head has its own (L, S) scores: {_BYTES}.",
    ),
    Mistake(
        "L·L",
        lambda B, H, L, S, dtype: B * H * L * L * dtype.itemsize,
        f"you used L·L: the scores are (L, S), one per query and key: {_BYTES}.",
    ),
    Mistake(
        "S·S",
        lambda B, H, L, S, dtype: B * H * S * S * dtype.itemsize,
        f"you used S·S: the scores are (L, S), one per query and key: {_BYTES}.",
    ),
]

_MEMORY_CASES = [  # (case, B, H, L, S, dtype)
    ("float32: B=2, H=8, L=128, S=64", 2, 8, 128, 64, torch.float32),
    ("float16: B=1, H=12, L=256, S=100", 1, 12, 256, 100, torch.float16),
    ("bfloat16: B=3, H=4, L=10, S=20", 3, 4, 10, 20, torch.bfloat16),
    ("float64: B=2, H=2, L=7, S=5", 2, 2, 7, 5, torch.float64),
    ("float32, everything 1: one score", 1, 1, 1, 1, torch.float32),
]


@checker(
    "scores_memory",
    "Replace `raise NotImplementedError` with the bytes of a (B, H, L, S) tensor of dtype.",
)
def check_scores_memory(candidate) -> int:
    """Check ``candidate(B, H, L, S, dtype) -> int`` = B·H·L·S·(bytes per element)."""
    return check_cases(
        candidate,
        _MEMORY_CASES,
        reference.scores_memory,
        _MEMORY_MISTAKES,
        what="the bytes",
        crash_hint="dtype is a torch.dtype such as torch.float16; its bytes per number are "
        "dtype.itemsize.",
        fallback_cause=f"one number per score, each dtype.itemsize bytes: {_BYTES}.",
    )
