"""Exercise checkers. See :mod:`mha_course.checks._core` for the protocol every checker keeps."""

from __future__ import annotations

from ._core import ExerciseFailure, NotDoneYet
from .attention import check_scaled_dot_product_attention, check_softmax
from .encoder import check_encoder_layer
from .fast import check_attention_in_blocks
from .layers import check_layer_norm, check_positional_encoding
from .multihead import check_multi_head_attention
from .pretrained import check_load_layer, check_weight_map

__all__ = [
    "ExerciseFailure",
    "NotDoneYet",
    "check_softmax",
    "check_scaled_dot_product_attention",
    "check_multi_head_attention",
    "check_layer_norm",
    "check_positional_encoding",
    "check_encoder_layer",
    "check_load_layer",
    "check_weight_map",
    "check_attention_in_blocks",
    "yours_or_reference",
]


def yours_or_reference(check, yours, reference):
    """Return ``yours`` when it passes ``check``, else ``reference``, and say which one is used.

    Cells after an exercise call this, so an unfinished exercise does not break the rest of the
    lesson: they run on the course's reference until the learner's version passes.
    """
    name = getattr(check, "exercise", "your code")
    try:
        passed = yours is not None and check.passes(yours)
        problem = "is not done yet"
    except AssertionError:
        passed, problem = False, f"does not pass check_{name} yet"
    if passed:
        print(f"Using your {name} (it passes check_{name}).")
        return yours
    print(
        f"Your {name} {problem}, so the cells below use the course's reference "
        f"(mha_course.reference). Finish the exercise and re-run this cell to use yours."
    )
    return reference


# The small, one-step exercises (imported here, after the rest, so that they stay one block).
from .costs import check_attention_flops, check_scores_memory  # noqa: E402
from .encoder_outputs import check_mean_pool, check_previous_token_score  # noqa: E402
from .encoder_parts import check_encoder_stack, check_feed_forward  # noqa: E402
from .heads import check_merge_heads, check_split_heads  # noqa: E402
from .scores_and_masks import (  # noqa: E402
    check_attention_scores,
    check_causal_mask,
    check_padding_mask,
)
from .sublayers import check_post_ln_sublayer, check_pre_ln_sublayer  # noqa: E402
from .warmups import check_pairwise_dot, check_weighted_average  # noqa: E402

__all__ += [
    "check_pairwise_dot",
    "check_weighted_average",
    "check_attention_scores",
    "check_padding_mask",
    "check_causal_mask",
    "check_split_heads",
    "check_merge_heads",
    "check_post_ln_sublayer",
    "check_pre_ln_sublayer",
    "check_feed_forward",
    "check_encoder_stack",
    "check_previous_token_score",
    "check_mean_pool",
    "check_attention_flops",
    "check_scores_memory",
]
