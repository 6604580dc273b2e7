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
    """Return ``yours`` when it passes ``check``, else ``reference``, and say which one is used
    (and, when it is the reference, why in one line, and what to do).

    Cells after an exercise call this, so an unfinished exercise does not break the rest of the
    lesson: they run on the course's reference until the learner's version passes.
    """
    from ..exercises import evaluate  # the registry imports the checkers

    verdict = evaluate(check, yours)
    name, check_name = verdict.exercise.name, getattr(check, "__name__", "its check")
    if verdict.passed:
        print(f"Using your {name} (it passes {check_name}).")
        return yours
    problem, then = {
        "not done yet": (
            "is not done yet",
            "Finish the exercise and re-run this cell to use yours.",
        ),
        "did not run": (
            "is an earlier definition: its exercise cell did not run",
            "Fix the cell, run it, then re-run this cell.",
        ),
    }.get(
        verdict.status,
        (
            f"does not pass {check_name} yet",
            "Run the check cell above for the full message; fix your answer, then re-run this cell.",
        ),
    )
    print(
        f"Your {name} {problem}, so the cells below use the course's reference "
        f"(mha_course.reference). {then}"
    )
    if verdict.reason:
        print(f"  ({verdict.reason})")
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
