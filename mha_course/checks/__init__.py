"""Exercise checkers, one module per lesson topic (``l01_attention.py``: lesson 01's attention),
each declaring its exercises with :func:`._core.exercise`. Every checker is importable from here
as ``check_<name in snake case>`` (``check_multi_head_attention``).
"""

from __future__ import annotations

from importlib import import_module

from ._failure import ExerciseFailure, NotDoneYet
from ._registry import REGISTRY

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
    "l05_weights",
    "l05_outputs",
    "l06_fast",
    "l07_decoder",
    "l07_generation",
    "l07_decoding",
    "l07_cross_attention",
    "l08_modern",
    "l09_flash",
)
"""The checker modules, in the lessons' order: the order the registry lists the exercises in."""

for _module in LESSON_MODULES:
    import_module(f"{__name__}.{_module}")

globals().update({e.check.__name__: e.check for e in REGISTRY})
__all__ = ["ExerciseFailure", "NotDoneYet", "REGISTRY"]
__all__ += [e.check.__name__ for e in REGISTRY]
