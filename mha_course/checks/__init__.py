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

LESSON_MODULES = (
    "l00_warmups",
    "l01_scores",
    "l01_attention",
    "l02_multihead",
    "l02_head_jobs",
    "l03_layer_norm",
    "l03_residuals",
    "l03_positions",
    "l04_encoder_layer",
    "l04_encoder_model",
    "l07_decoder",
    "l07_generation",
    "l07_cross_attention",
    "l08_modern",
)
"""The checker modules, in lesson order (the order the registry lists the exercises in)."""

for _module in LESSON_MODULES:
    import_module(f"{__name__}.{_module}")

# ---------------------------------------------------------------- not yet in a lesson module
# ruff: noqa: F401
from .. import reference as _reference  # noqa: E402
from .ablation import check_head_ablation  # noqa: E402
from .costs import check_attention_cost, check_attention_flops, check_scores_memory  # noqa: E402
from .encoder_outputs import (  # noqa: E402
    check_embed_sentences,
    check_mean_pool,
    check_previous_token_score,
)
from .fast import check_attention_in_blocks  # noqa: E402
from .pretrained import check_load_layer  # noqa: E402

_POINTS = {
    "load_layer": 2,
    "attention_in_blocks": 3,
}
_NOT_CONVERTED = [
    ("05", check_load_layer),
    ("05", check_embed_sentences),
    ("05", check_head_ablation),
    ("06", check_attention_cost),
    ("06", check_attention_in_blocks),
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
