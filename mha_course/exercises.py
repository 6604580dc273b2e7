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
    Exercise("pairwise_dot", "00", checks.check_pairwise_dot, reference.pairwise_dot),
    Exercise("weighted_average", "00", checks.check_weighted_average, reference.weighted_average),
    Exercise("attention_scores", "01", checks.check_attention_scores, reference.attention_scores),
    Exercise("padding_mask", "01", checks.check_padding_mask, reference.padding_mask),
    Exercise("causal_mask", "01", checks.check_causal_mask, reference.causal_mask),
    Exercise(
        "scaled_dot_product_attention",
        "01",
        checks.check_scaled_dot_product_attention,
        reference.scaled_dot_product_attention,
    ),
    Exercise("split_heads", "02", checks.check_split_heads, reference.split_heads),
    Exercise("merge_heads", "02", checks.check_merge_heads, reference.merge_heads),
    Exercise(
        "MultiHeadAttention", "02", checks.check_multi_head_attention, reference.MultiHeadAttention
    ),
    Exercise("LayerNorm", "03", checks.check_layer_norm, reference.LayerNorm),
    Exercise("post_ln_sublayer", "03", checks.check_post_ln_sublayer, reference.post_ln_sublayer),
    Exercise("pre_ln_sublayer", "03", checks.check_pre_ln_sublayer, reference.pre_ln_sublayer),
    Exercise(
        "positional_encoding", "03", checks.check_positional_encoding, reference.positional_encoding
    ),
    Exercise("FeedForward", "04", checks.check_feed_forward, reference.FeedForward),
    Exercise("EncoderLayer", "04", checks.check_encoder_layer, reference.EncoderLayer),
    Exercise("EncoderStack", "04", checks.check_encoder_stack, reference.EncoderStack),
    Exercise("load_layer", "05", checks.check_load_layer, reference.load_layer),
    Exercise(
        "previous_token_score",
        "05",
        checks.check_previous_token_score,
        reference.previous_token_score,
    ),
    Exercise("mean_pool", "05", checks.check_mean_pool, reference.mean_pool),
    Exercise("attention_flops", "06", checks.check_attention_flops, reference.attention_flops),
    Exercise("scores_memory", "06", checks.check_scores_memory, reference.scores_memory),
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
