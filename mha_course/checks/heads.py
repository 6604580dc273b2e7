"""Checkers for lesson 02's two reshapes: the features split into heads, and merged back.

Head h owns the D consecutive features h·D … (h+1)·D − 1 of each token, the grouping that the
projections' weights W_i^Q, W_i^K, W_i^V side by side give ('b l (h d) -> b h l d').
"""

from __future__ import annotations

import torch
from einops import rearrange

from .. import reference
from ._core import Mistake, checker
from ._steps import check_cases, randn

__all__ = ["check_split_heads", "check_merge_heads"]

_SPLIT = "x.view(B, L, H, D).transpose(1, 2), or rearrange(x, 'b l (h d) -> b h l d', h=num_heads)"
_MERGE = "x.transpose(1, 2).reshape(B, L, H * D), or rearrange(x, 'b h l d -> b l (h d)')"


# ---------------------------------------------------------------- split_heads


def _split(pattern: str):
    return lambda x, h: rearrange(x, pattern, h=h)


_SPLIT_MISTAKES = [
    Mistake(
        "view(B, H, L, D)",
        lambda x, h: x.reshape(x.size(0), h, x.size(1), x.size(2) // h),
        "x.view(B, H, L, D) cuts the tensor in the wrong place: each head gets whole tokens' "
        "features instead of its own D features of every token. Split the last axis, then move "
        f"the heads forward: {_SPLIT}.",
    ),
    Mistake(
        "no transpose",
        _split("b l (h d) -> b l h d"),
        "you split the features but did not move the heads axis: (B, L, H, D) needs "
        ".transpose(1, 2) to become (B, H, L, D).",
    ),
    Mistake(
        "(d h) grouping",
        _split("b l (d h) -> b h l d"),
        "your heads take every H-th feature ('(d h)'); head h owns the D consecutive features "
        f"h·D … (h+1)·D − 1: 'b l (h d) -> b h l d', h before d: {_SPLIT}.",
    ),
]


def _heads_hint(got: torch.Tensor, x: torch.Tensor, num_heads: int) -> str:
    if got.dim() == 4 and got.size(1) != num_heads:
        return (
            f"your result has {got.size(1)} heads, but num_heads = {num_heads} here: take the "
            f"number of heads from the argument, and D = E // num_heads = "
            f"{x.size(-1) // num_heads} (not a variable of the notebook)."
        )
    return f"split_heads returns (B, H, L, D), D = E // num_heads: {_SPLIT}."


def _split_cases():
    g = torch.Generator().manual_seed(20)
    yield "x (2, 5, 12), 3 heads of size 4", randn(g, 2, 5, 12), 3
    yield "L = H: x (2, 4, 8), 4 heads of size 2", randn(g, 2, 4, 8), 4
    yield "one sentence: x (1, 7, 6), 2 heads of size 3", randn(g, 1, 7, 6), 2
    yield "a single head: x (2, 3, 5), 1 head of size 5", randn(g, 2, 3, 5), 1
    yield "one feature per head: x (2, 3, 4), 4 heads of size 1", randn(g, 2, 3, 4), 4
    yield "float64: x (3, 2, 6), 2 heads of size 3", randn(g, 3, 2, 6, dtype=torch.float64), 2


@checker(
    "split_heads",
    "Replace `raise NotImplementedError` with the reshape (B, L, E) -> (B, H, L, D).",
)
def check_split_heads(candidate) -> int:
    """Check ``candidate(x (B, L, E), num_heads) -> (B, H, L, D)``, 'b l (h d) -> b h l d'."""
    return check_cases(
        candidate,
        _split_cases(),
        reference.split_heads,
        _SPLIT_MISTAKES,
        what="the heads",
        crash_hint="take every size from x and num_heads (B, L, E = x.shape, "
        f"D = E // num_heads), never from the notebook: {_SPLIT}.",
        shape_hint=_heads_hint,
        fallback_cause=f"head h of token l holds x[b, l, h·D:(h+1)·D]: {_SPLIT}.",
    )


# ---------------------------------------------------------------- merge_heads


def _merge(pattern: str):
    return lambda x: rearrange(x, pattern)


_MERGE_MISTAKES = [
    Mistake(
        "reshape without the transpose back",
        lambda x: x.reshape(x.size(0), x.size(2), -1),
        "a plain reshape to (B, L, H·D) without moving the heads axis back mixes tokens and "
        f"heads: {_MERGE}.",
    ),
    Mistake(
        "(d h) order",
        _merge("b h l d -> b l (d h)"),
        "you interleaved the heads' features ('(d h)'); concatenate head after head, "
        f"'b h l d -> b l (h d)': {_MERGE}.",
    ),
    Mistake(
        "(B, H·L, D)",
        _merge("b h l d -> b (h l) d"),
        "you stacked the heads along the tokens, (B, H·L, D); concatenate their features "
        f"instead, (B, L, H·D): {_MERGE}.",
    ),
    Mistake(
        "transpose only",
        lambda x: x.transpose(1, 2),
        "you moved the heads axis back but did not merge it with the features: add "
        ".reshape(B, L, H * D) after the transpose.",
    ),
    Mistake(
        "view after transpose",
        lambda x: x.transpose(1, 2).view(x.size(0), x.size(2), -1),
        "view cannot merge the axes of a transposed tensor (its memory is no longer in order): "
        "use .reshape(B, L, H * D), or .contiguous().view(B, L, H * D); rearrange does it too.",
    ),
]


def _merge_cases():
    g = torch.Generator().manual_seed(21)
    yield "x (2, 3, 5, 4): 3 heads of size 4 -> (2, 5, 12)", randn(g, 2, 3, 5, 4)
    yield "one sentence, 2 heads of size 3: x (1, 2, 7, 3)", randn(g, 1, 2, 7, 3)
    yield "a single head: x (2, 1, 4, 6)", randn(g, 2, 1, 4, 6)
    yield "float64: x (3, 2, 2, 5)", randn(g, 3, 2, 2, 5, dtype=torch.float64)
    yield (
        "the output of split_heads (a non-contiguous view): x (2, 4, 6, 3)",
        randn(g, 2, 6, 4, 3).transpose(1, 2),
    )
    yield "one feature per head: x (2, 4, 3, 1)", randn(g, 2, 4, 3, 1)


@checker(
    "merge_heads",
    "Replace `raise NotImplementedError` with the reshape (B, H, L, D) -> (B, L, H·D).",
)
def check_merge_heads(candidate) -> int:
    """Check ``candidate(x (B, H, L, D)) -> (B, L, H·D)``, 'b h l d -> b l (h d)'."""
    return check_cases(
        candidate,
        _merge_cases(),
        reference.merge_heads,
        _MERGE_MISTAKES,
        what="the merged heads",
        crash_hint=f"take every size from x (B, H, L, D = x.shape): {_MERGE}.",
        shape_hint=f"merge_heads returns (B, L, H·D), the heads side by side: {_MERGE}.",
        fallback_cause=f"token l's features are head 0's D features, then head 1's, ...: {_MERGE}.",
    )
