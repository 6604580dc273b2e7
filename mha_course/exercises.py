"""The course's exercises, in lesson order: what the learner defines, how it is checked, and
the reference used in its place until the learner's version passes."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import checks, reference

__all__ = ["Exercise", "EXERCISES", "by_name"]


@dataclass(frozen=True)
class Exercise:
    name: str  # the function or class the learner writes; also the cell marker "# exercise: <name>"
    lesson: str  # "01"
    check: Callable[..., bool]
    reference: object


EXERCISES: list[Exercise] = [
    Exercise("softmax", "00", checks.check_softmax, reference.softmax),
    Exercise(
        "scaled_dot_product_attention",
        "01",
        checks.check_scaled_dot_product_attention,
        reference.scaled_dot_product_attention,
    ),
    Exercise(
        "MultiHeadAttention", "02", checks.check_multi_head_attention, reference.MultiHeadAttention
    ),
    Exercise("LayerNorm", "03", checks.check_layer_norm, reference.LayerNorm),
    Exercise(
        "positional_encoding", "03", checks.check_positional_encoding, reference.positional_encoding
    ),
    Exercise("EncoderLayer", "04", checks.check_encoder_layer, reference.EncoderLayer),
    Exercise("load_layer", "05", checks.check_load_layer, reference.load_layer),
    Exercise(
        "attention_in_blocks",
        "06",
        checks.check_attention_in_blocks,
        reference.attention_in_blocks,
    ),
]


def by_name(name: str) -> Exercise:
    for exercise in EXERCISES:
        if exercise.name == name:
            return exercise
    known = ", ".join(e.name for e in EXERCISES)
    raise ValueError(f"no exercise named {name!r}; the exercises are: {known}")
