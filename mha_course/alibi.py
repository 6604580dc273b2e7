"""ALiBi: attention with linear biases (Press, Smith and Lewis 2022, "Train Short, Test Long").

No position embeddings at all: each head adds to its scores a penalty that grows linearly with
the distance between query and key, bias[h, i, j] = -m_h · (i - j), so a far key needs a larger
score to win. Each head has its own slope m_h: for H heads (a power of two) the geometric
sequence m_h = 2^(-8(h+1)/H), h = 0..H-1 (for 8 heads: 1/2, 1/4, ..., 1/256), so some heads look
far and others near. For an H that is not a power of two the paper takes the slopes of the
closest smaller power of two and adds every other slope of the next one.

The bias is used with the causal mask (only j <= i matters); positions are top-left aligned, as
:func:`mha_course.masks.causal_mask` (``offset`` moves the queries, e.g. over a KV cache).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ._validate import require_positive_int

__all__ = ["alibi_slopes", "alibi_bias", "bias_from_slopes", "bias_from_distance"]


def _power_of_two_slopes(n: int) -> list[float]:
    start = 2 ** (-8 / n)
    return [start ** (h + 1) for h in range(n)]


def alibi_slopes(num_heads: int) -> Tensor:
    """The slope m_h of each head, (num_heads,), steepest first."""
    require_positive_int("num_heads", num_heads)
    closest = 2 ** math.floor(math.log2(num_heads))
    slopes = _power_of_two_slopes(closest)
    if closest < num_heads:  # the paper's recipe for other head counts
        slopes += _power_of_two_slopes(2 * closest)[0::2][: num_heads - closest]
    return torch.tensor(slopes, dtype=torch.float64)


def alibi_bias(
    num_heads: int,
    L: int,
    S: int,
    *,
    offset: int = 0,
    dtype: torch.dtype = torch.float32,
    device=None,
) -> Tensor:
    """Float (num_heads, L, S): bias[h, i, j] = -m_h · ((i + offset) - j), added to the scores of
    head h (0 on the diagonal, more negative the further back the key)."""
    require_positive_int("L", L)
    require_positive_int("S", S)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise TypeError(f"offset must be an int, got {type(offset).__name__} {offset!r}")
    slopes = alibi_slopes(num_heads).to(device=device, dtype=dtype)
    return bias_from_slopes(slopes, L, S, offset=offset)


def bias_from_slopes(slopes: Tensor, L: int, S: int, *, offset: int = 0) -> Tensor:
    """:func:`alibi_bias` from the slopes (H,), already on their device and in their dtype: what a
    model's forward calls, with the slopes kept in a buffer (no copy from the host per call)."""
    queries = torch.arange(L, device=slopes.device)[:, None] + offset  # (L, 1)
    keys = torch.arange(S, device=slopes.device)[None, :]  # (1, S)
    return bias_from_distance(slopes, queries - keys)  # (H, L, S)


def bias_from_distance(slopes: Tensor, distance: Tensor) -> Tensor:
    """-m_h · distance for the slopes (H,) and integer distances (L, S) between query and key
    (i - j), in the slopes' dtype: (H, L, S)."""
    exact = torch.promote_types(slopes.dtype, torch.float32)  # float16 rounds distances > 2048
    return (-slopes.to(exact)[:, None, None] * distance.to(exact)).to(slopes.dtype)
