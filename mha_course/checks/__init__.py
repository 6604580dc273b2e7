"""Exercise checkers, one module per lesson's topic. See :mod:`mha_course.checks._core` for the
protocol every checker keeps; :mod:`mha_course.exercises` is the registry that names them."""

from __future__ import annotations

from ._failure import ExerciseFailure, NotDoneYet
from .ablation import check_head_ablation
from .attention import check_scaled_dot_product_attention, check_self_attention, check_softmax
from .costs import check_attention_cost, check_attention_flops, check_scores_memory
from .cross_attention import check_decoder_layer
from .decoder import check_char_lm, check_decoder_block
from .encoder import check_encoder_layer
from .encoder_model import check_encoder_model
from .encoder_outputs import (
    check_embed_sentences,
    check_mean_pool,
    check_previous_token_score,
)
from .encoder_parts import check_encoder_stack, check_feed_forward
from .fast import check_attention_in_blocks
from .gradients import check_gradient_norms
from .head_jobs import check_job_scores
from .heads import check_merge_heads, check_split_heads
from .kv_cache import check_cached_attention
from .layers import check_layer_norm, check_positional_encoding
from .modern_attention import check_grouped_query_attention, check_sliding_window_attention
from .multihead import check_load_torch_weights, check_multi_head_attention
from .pretrained import check_load_layer, check_weight_map
from .relative_positions import check_alibi_bias, check_rope_attention, check_rotary
from .sampling import check_sample_next
from .scores_and_masks import (
    check_attention_scores,
    check_causal_mask,
    check_may_attend_mask,
    check_padding_mask,
)
from .sublayers import check_post_ln_sublayer, check_pre_ln_sublayer, check_residual_block
from .training import check_train_step
from .warmups import check_pairwise_dot, check_soft_lookup, check_weighted_average

__all__ = [
    "ExerciseFailure",
    "NotDoneYet",
    # lesson 00
    "check_softmax",
    "check_soft_lookup",
    "check_pairwise_dot",  # the steps of soft_lookup; no longer an exercise of their own
    "check_weighted_average",
    # lesson 01
    "check_attention_scores",
    "check_may_attend_mask",
    "check_padding_mask",  # the parts of may_attend_mask; no longer exercises of their own
    "check_causal_mask",
    "check_scaled_dot_product_attention",
    "check_self_attention",
    # lesson 02
    "check_split_heads",
    "check_merge_heads",
    "check_multi_head_attention",
    "check_load_torch_weights",
    "check_job_scores",
    # lesson 03
    "check_layer_norm",
    "check_post_ln_sublayer",
    "check_pre_ln_sublayer",
    "check_residual_block",
    "check_gradient_norms",
    "check_positional_encoding",
    # lesson 04
    "check_feed_forward",
    "check_encoder_layer",
    "check_encoder_stack",
    "check_encoder_model",
    "check_train_step",
    # lesson 05
    "check_load_layer",
    "check_weight_map",
    "check_previous_token_score",
    "check_mean_pool",
    "check_embed_sentences",
    "check_head_ablation",
    # lesson 06
    "check_attention_cost",
    "check_attention_flops",
    "check_scores_memory",
    "check_attention_in_blocks",
    # lesson 07
    "check_decoder_block",
    "check_char_lm",
    "check_sample_next",
    "check_cached_attention",
    "check_decoder_layer",
    # lesson 08
    "check_rotary",
    "check_rope_attention",
    "check_alibi_bias",
    "check_grouped_query_attention",
    "check_sliding_window_attention",
]
