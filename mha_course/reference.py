"""The exercises' reference answers, with exactly the exercise skeletons' signatures.

The checkers compare a learner's code with these, and a notebook uses them in place of an
unfinished exercise so that the rest of the lesson still runs. Each is a thin adapter over the
package's own implementation (the package is the one place the maths is written).
"""

from __future__ import annotations

import torch

from .attention import scaled_dot_product_attention as _sdpa

__all__ = ["softmax", "scaled_dot_product_attention"]


def softmax(scores: torch.Tensor) -> torch.Tensor:
    """Lesson 00: softmax over the last axis."""
    return torch.softmax(scores, dim=-1)


def scaled_dot_product_attention(query, key, value, attn_mask=None):
    """Lesson 01: ``(output, weights)``; a bool ``attn_mask`` is True where a query may attend."""
    return _sdpa(query, key, value, attn_mask=attn_mask)
