"""Exercise checkers, one module per lesson (``l01_attention.py`` holds lesson 01's), each
declaring its exercises (:func:`._core.exercise`): name, lesson, reference, points and the case
table they are checked on. :mod:`._core` is the protocol every checker keeps, :mod:`._table` the
one loop that runs a table, :mod:`.families` the classic mistakes that recur from lesson to
lesson; :mod:`mha_course.exercises` is the registry's public face.

Every checker is importable from here by its name, ``check_<name in snake case>``
(``check_multi_head_attention``).
"""

from __future__ import annotations

from importlib import import_module

from ._failure import ExerciseFailure, NotDoneYet
from ._registry import REGISTRY, Exercise, register

LESSON_MODULES = ("l00_warmups", "l09_flash")
"""The checker modules, in lesson order (the order the registry lists the exercises in)."""

for _module in LESSON_MODULES:
    import_module(f"{__name__}.{_module}")

# ---------------------------------------------------------------- not yet in a lesson module
# ruff: noqa: F401
from .. import reference as _reference  # noqa: E402
from .ablation import check_head_ablation  # noqa: E402
from .attention import (  # noqa: E402
    check_scaled_dot_product_attention,
    check_self_attention,
)
from .costs import check_attention_cost, check_attention_flops, check_scores_memory  # noqa: E402
from .cross_attention import check_decoder_layer  # noqa: E402
from .decoder import check_char_lm, check_decoder_block  # noqa: E402
from .encoder import check_encoder_layer  # noqa: E402
from .encoder_model import check_encoder_model  # noqa: E402
from .encoder_outputs import (  # noqa: E402
    check_embed_sentences,
    check_mean_pool,
    check_previous_token_score,
)
from .encoder_parts import check_encoder_stack, check_feed_forward  # noqa: E402
from .fast import check_attention_in_blocks  # noqa: E402
from .gradients import check_gradient_norms  # noqa: E402
from .head_jobs import check_job_scores  # noqa: E402
from .heads import check_merge_heads, check_split_heads  # noqa: E402
from .kv_cache import check_cached_attention  # noqa: E402
from .layers import check_layer_norm, check_positional_encoding  # noqa: E402
from .modern_attention import (  # noqa: E402
    check_grouped_query_attention,
    check_sliding_window_attention,
)
from .multihead import check_load_torch_weights, check_multi_head_attention  # noqa: E402
from .pretrained import check_load_layer  # noqa: E402
from .relative_positions import check_alibi_bias, check_rope_attention, check_rotary  # noqa: E402
from .sampling import check_sample_next  # noqa: E402
from .scores_and_masks import (  # noqa: E402
    check_attention_scores,
    check_causal_mask,
    check_may_attend_mask,
    check_padding_mask,
)
from .sublayers import (  # noqa: E402
    check_post_ln_sublayer,
    check_pre_ln_sublayer,
    check_residual_block,
)
from .training import check_train_step  # noqa: E402

_POINTS = {
    "scaled_dot_product_attention": 3,
    "MultiHeadAttention": 3,
    "LayerNorm": 2,
    "EncoderLayer": 3,
    "load_layer": 2,
    "attention_in_blocks": 3,
    "ResidualBlock": 2,
    "EncoderModel": 2,
    "CharLM": 2,
    "CachedAttention": 3,
    "DecoderLayer": 2,
    "sliding_window_attention": 3,
}
_NOT_CONVERTED = [
    ("01", check_attention_scores),
    ("01", check_may_attend_mask),
    ("01", check_scaled_dot_product_attention),
    ("01", check_self_attention),
    ("02", check_multi_head_attention),
    ("02", check_load_torch_weights),
    ("02", check_job_scores),
    ("03", check_layer_norm),
    ("03", check_residual_block),
    ("03", check_gradient_norms),
    ("03", check_positional_encoding),
    ("04", check_encoder_layer),
    ("04", check_encoder_model),
    ("04", check_train_step),
    ("05", check_load_layer),
    ("05", check_embed_sentences),
    ("05", check_head_ablation),
    ("06", check_attention_cost),
    ("06", check_attention_in_blocks),
    ("07", check_decoder_block),
    ("07", check_char_lm),
    ("07", check_sample_next),
    ("07", check_cached_attention),
    ("07", check_decoder_layer),
    ("08", check_rotary),
    ("08", check_rope_attention),
    ("08", check_alibi_bias),
    ("08", check_grouped_query_attention),
    ("08", check_sliding_window_attention),
]
for _lesson, _check in _NOT_CONVERTED:
    _name = _check.exercise
    _entry = Exercise(_name, _lesson, _check, getattr(_reference, _name), _POINTS.get(_name, 1))
    register(_entry)
REGISTRY.sort(key=lambda e: e.lesson)  # stable: within a lesson, the order of declaration

globals().update({e.check.__name__: e.check for e in REGISTRY})
check_weight_map = check_load_layer  # the exercise is "write the weight-loading map"
__all__ = ["ExerciseFailure", "NotDoneYet", "check_weight_map"]
__all__ += [e.check.__name__ for e in REGISTRY]
