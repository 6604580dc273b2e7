"""Layer normalisation, written out: each token's feature vector gets mean 0 and variance 1,
then a learned scale (``weight``, γ) and shift (``bias``, β).

    LayerNorm(x) = (x - mean(x)) / sqrt(var(x) + eps) * weight + bias

The mean and variance are taken over the last ``len(normalized_shape)`` axes (the features of one
token), never over the batch: each token is normalised on its own, so the result does not depend
on what else is in the batch (BatchNorm's does). The variance is the *biased* one (divide by n,
not n - 1), and eps sits *inside* the square root, exactly as ``torch.nn.LayerNorm``.

:func:`layer_norm_by_hand` is that formula, line by line (lesson 03 has the learner write it).
The module computes the same numbers with ``torch.nn.functional.layer_norm``, one fused kernel
that is several times faster than the five separate passes over memory of the written-out form;
the tests prove the two agree.
"""

from __future__ import annotations

import numbers

import torch
import torch.nn.functional as F
from torch import nn

from ._validate import require_finite_non_negative, require_floating, shape_str

__all__ = ["LayerNorm", "layer_norm_by_hand"]


def layer_norm_by_hand(
    x, normalized_shape, weight=None, bias=None, eps: float = 1e-5
) -> torch.Tensor:
    """LayerNorm(x) written out: normalise each token's features, then scale and shift."""
    features = tuple(range(-len(normalized_shape), 0))  # the last axes: one token's features
    mean = x.mean(dim=features, keepdim=True)
    var = x.var(dim=features, keepdim=True, correction=0)  # biased: divide by n
    x_hat = (x - mean) / torch.sqrt(var + eps)  # eps inside the square root
    if weight is not None:
        x_hat = x_hat * weight
    if bias is not None:
        x_hat = x_hat + bias
    return x_hat


def _sizes(normalized_shape) -> tuple[int, ...]:
    """``16`` -> ``(16,)``; ``(4, 8)``, ``[4, 8]`` or a ``torch.Size`` -> ``(4, 8)``. Anything else
    (a str, which is a sequence of characters; a float; a bool) is a TypeError."""

    def is_size(n) -> bool:
        return isinstance(n, numbers.Integral) and not isinstance(n, bool)

    if is_size(normalized_shape):
        return (int(normalized_shape),)
    if isinstance(normalized_shape, (tuple, list, torch.Size)) and all(
        is_size(n) for n in normalized_shape
    ):
        return tuple(int(n) for n in normalized_shape)
    raise TypeError(
        "normalized_shape must be an int (the number of features, e.g. 16) or a tuple of ints, "
        f"got {type(normalized_shape).__name__} {normalized_shape!r}"
    )


class LayerNorm(nn.Module):
    """A drop-in for ``torch.nn.LayerNorm`` (same arguments, parameter names and results).

    Args:
        normalized_shape: the feature shape to normalise over, e.g. ``d_model`` or ``(L, E)``;
            the input's trailing dims must equal it.
        eps: added to the variance inside the square root, so a constant token does not divide by 0.
        elementwise_affine: learn ``weight`` (init 1) and ``bias`` (init 0); else both are None.
        bias: learn ``bias`` too (when ``elementwise_affine``).
    """

    def __init__(
        self,
        normalized_shape: int | tuple[int, ...],
        eps: float = 1e-5,
        elementwise_affine: bool = True,
        bias: bool = True,
        device=None,
        dtype=None,
    ) -> None:
        super().__init__()
        normalized_shape = _sizes(normalized_shape)
        if not normalized_shape or any(n <= 0 for n in normalized_shape):
            raise ValueError(f"normalized_shape must be positive sizes, got {normalized_shape}")
        require_finite_non_negative("eps", eps)
        self.normalized_shape = normalized_shape
        self.eps = float(eps)
        self.elementwise_affine = elementwise_affine
        factory = {"device": device, "dtype": dtype}
        if elementwise_affine:
            self.weight = nn.Parameter(torch.ones(normalized_shape, **factory))
            self.bias = nn.Parameter(torch.zeros(normalized_shape, **factory)) if bias else None
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def reset_parameters(self) -> None:
        if self.weight is not None:
            nn.init.ones_(self.weight)
        if self.bias is not None:
            nn.init.zeros_(self.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self._check_input(x)
        # layer_norm_by_hand(x, ...) in one fused kernel: the same numbers, several times faster.
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def _check_input(self, x: torch.Tensor) -> None:
        require_floating("input", x)
        n = len(self.normalized_shape)
        if tuple(x.shape[-n:]) != self.normalized_shape or x.dim() < n:
            raise ValueError(
                f"input of shape {shape_str(x.shape)} must end with normalized_shape "
                f"{shape_str(self.normalized_shape)} (the features of each token)"
            )

    def extra_repr(self) -> str:
        return (
            f"{self.normalized_shape}, eps={self.eps}, elementwise_affine={self.elementwise_affine}"
        )
