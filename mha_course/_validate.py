"""Argument checks shared by the package: clear ValueErrors at the call, not deep in a matmul.

Every message names the argument, the shape (or value) it got and the one expected.
"""

from __future__ import annotations

import math
import numbers

import torch


def shape_str(shape) -> str:
    """``torch.Size([2, 3])`` -> ``(2, 3)``; the way shapes are written in every message."""
    return "(" + ", ".join(str(int(n)) for n in shape) + ")"


def require_tensor(name: str, x) -> None:
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(x).__name__}")


def require_floating(name: str, x: torch.Tensor) -> None:
    require_tensor(name, x)
    if not x.is_floating_point():
        raise ValueError(
            f"{name} must be a floating-point tensor, got dtype {x.dtype}; "
            f"convert it with {name}.float()"
        )


def require_ndim(name: str, x: torch.Tensor, allowed: tuple[int, ...], meaning: str) -> None:
    if x.dim() not in allowed:
        dims = " or ".join(f"{n}-D" for n in allowed)
        raise ValueError(
            f"{name} must be {dims} {meaning}, got {x.dim()}-D shape {shape_str(x.shape)}"
        )


def require_size(name: str, x: torch.Tensor, dim: int, expected: int, meaning: str) -> None:
    got = x.size(dim)
    if got != expected:
        raise ValueError(
            f"{name} has size {got} in dim {dim} (shape {shape_str(x.shape)}), expected {expected} ({meaning})"
        )


def require_positive_int(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__} {value!r}")
    if value <= 0:
        raise ValueError(f"{name} must be a positive int, got {value}")


def require_divisible(name: str, value: int, by_name: str, by: int) -> None:
    """``value`` splits into ``by`` equal parts, e.g. embed_dim into num_heads heads."""
    if value % by != 0:
        raise ValueError(
            f"{name} ({value}) must be divisible by {by_name} ({by}): each head gets "
            f"{name} / {by_name} features, and {value} / {by} is not a whole number"
        )


def require_probability(name: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{name} must be a probability in [0, 1], got {value}")


def require_positive_features(names: str, x: torch.Tensor, why: str) -> None:
    """The last dim (the features of each token, E) holds at least one number."""
    if x.size(-1) == 0:
        raise ValueError(
            f"{names} must have a positive feature size E (the last dim), got shape "
            f"{shape_str(x.shape)} with E = 0; {why}"
        )


def require_finite_non_negative(name: str, value) -> None:
    """A float >= 0 that is not NaN or infinite, e.g. LayerNorm's eps."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a float, got {type(value).__name__} {value!r}")
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"{name} must be a finite number >= 0, got {value}")
