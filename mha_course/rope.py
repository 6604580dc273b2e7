"""Rotary position embeddings (RoPE; Su et al. 2021, "RoFormer"), in the rotate-half layout of
GPT-NeoX and Hugging Face's Llama.

Instead of adding a position vector to each token, RoPE rotates each query and key: the head's
D features form D/2 pairs, and pair i of the token at position p turns by the angle p · θ_i,
θ_i = base^(-2i/D). A rotation keeps lengths, and the dot product of two vectors turned by angles
a and b depends only on a - b, so q_m · k_n depends on the positions only through the offset
m - n. Values are not rotated.

Layout: feature i pairs with feature i + D/2 ("rotate half"); the "interleaved" layout of the
paper, GPT-J and Meta's Llama code pairs features 2i and 2i + 1. The two give the same model up to
a permutation of the features of W^Q and W^K (Hugging Face's Llama converter applies it).

    rotate(x)[..., :D/2] = x1 cos - x2 sin,    rotate(x)[..., D/2:] = x2 cos + x1 sin
    with x1 = x[..., :D/2], x2 = x[..., D/2:]; written x cos + rotate_half(x) sin

The angles depend only on the positions, so a model computes them once per forward
(:meth:`RotaryEmbedding.rotation`, a :class:`Rotation`) and every layer rotates its queries and
keys with them, as Hugging Face's Llama does with its ``position_embeddings``.
"""

from __future__ import annotations

import numbers
from typing import NamedTuple

import torch
from torch import Tensor, nn

from ._validate import require_positive_int, require_tensor, shape_str

__all__ = ["RotaryEmbedding", "Rotation", "rotate_half"]


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) on the two halves of the last axis."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat((-x2, x1), dim=-1)


class Rotation(NamedTuple):
    """The rotation of L tokens: cos and sin of their angles p · θ_i, each (L, D) (the D/2
    angles twice), in the dtype of the vectors they rotate. Made once per forward, applied to
    the queries and keys of every layer."""

    cos: Tensor
    sin: Tensor

    def rotate(self, x: Tensor) -> Tensor:
        """x (..., L, D) rotated: x cos + rotate_half(x) sin."""
        return x * self.cos + rotate_half(x) * self.sin


class RotaryEmbedding(nn.Module):
    """Rotates queries or keys (B, H, L, D) by their positions (L,): ``forward(x, positions)``;
    ``rotation(positions, dtype)`` is the same rotation computed once, for many tensors.

    Positions are absolute: with a KV cache, the new tokens' positions continue where the cache
    stopped (``torch.arange(cached, cached + L)``), so a key is rotated once, when it is cached.
    """

    def __init__(self, head_dim: int, base: float = 10000.0) -> None:
        super().__init__()
        require_positive_int("head_dim", head_dim)
        if head_dim % 2:
            raise ValueError(
                f"head_dim must be even for RoPE (its features rotate in pairs), got {head_dim}"
            )
        if isinstance(base, bool) or not isinstance(base, numbers.Real) or not base > 1:
            raise ValueError(f"base must be a number > 1, got {base!r}")
        self.head_dim, self.base = head_dim, float(base)

    def angles(self, positions: Tensor) -> tuple[Tensor, Tensor]:
        """cos and sin of p · θ_i for each position, each (L, D) (the D/2 angles, twice).

        θ_i is computed here, in float64, not kept in a buffer: ``model.to(torch.bfloat16)``
        would round a buffer's θ_i, and turn a token 2000 positions in by a radian or more."""
        D = self.head_dim
        exponents = torch.arange(0, D, 2, dtype=torch.float64, device=positions.device) / D
        inv_freq = self.base**-exponents  # θ_i = base^(-2i/D), (D/2,)
        angles = positions.to(torch.float64)[:, None] * inv_freq[None, :]  # (L, D/2)
        angles = torch.cat((angles, angles), dim=-1)  # (L, D): feature i and i + D/2 share one
        return angles.cos(), angles.sin()

    def rotation(self, positions: Tensor, dtype: torch.dtype = torch.float32) -> Rotation:
        """The :class:`Rotation` of tokens at ``positions`` (L,), for vectors in ``dtype`` (the
        angles are computed in float64, then rounded once)."""
        cos, sin = self.angles(positions)
        return Rotation(cos.to(dtype), sin.to(dtype))

    def forward(self, x: Tensor, positions: Tensor) -> Tensor:
        """x (..., L, D) rotated by ``positions`` (L,): x cos + rotate_half(x) sin."""
        self._check(x, positions)
        return self.rotation(positions, x.dtype).rotate(x)

    def _check(self, x, positions) -> None:
        require_tensor("x", x)
        require_tensor("positions", positions)
        if x.dim() < 2 or x.size(-1) != self.head_dim:
            raise ValueError(
                f"x must be (..., L, head_dim) with head_dim = {self.head_dim}, got shape "
                f"{shape_str(x.shape)}"
            )
        if positions.dim() != 1 or positions.size(0) != x.size(-2):
            raise ValueError(
                f"positions must be 1-D with one position per token, (L,) = ({x.size(-2)},), got "
                f"shape {shape_str(positions.shape)}"
            )

    def extra_repr(self) -> str:
        return f"head_dim={self.head_dim}, base={self.base}"
