"""The weight map: which checkpoint tensor goes into which of the course's parameters.

The map is data, :func:`weight_map`: rows of ``(checkpoint key, our parameter, how)``, and one
function, :func:`copy_weights`, follows it. BERT keeps Q, K and V as three Linears; the course's
:class:`~mha_course.MultiHeadAttention` (like ``torch.nn.MultiheadAttention``) packs them into one
``in_proj_weight`` of shape (3E, E), rows ``[0:E]`` for Q, ``[E:2E]`` for K, ``[2E:3E]`` for V.
For one layer i::

    encoder.layer.i.attention.self.query.*      -> self_attn.in_proj_*  rows [0:E]    (Q)
    encoder.layer.i.attention.self.key.*        -> self_attn.in_proj_*  rows [E:2E]   (K)
    encoder.layer.i.attention.self.value.*      -> self_attn.in_proj_*  rows [2E:3E]  (V)
    encoder.layer.i.attention.output.dense.*    -> self_attn.out_proj.*               (W^O)
    encoder.layer.i.attention.output.LayerNorm.*-> norm1.*   (Step 2: after attention)
    encoder.layer.i.intermediate.dense.*        -> linear1.* (FFN, E -> 1536)
    encoder.layer.i.output.dense.*              -> linear2.* (FFN, 1536 -> E)
    encoder.layer.i.output.LayerNorm.*          -> norm2.*   (Step 3: after the FFN)

Both ``nn.Linear`` and the checkpoint store a weight as (out_features, in_features): copy, never
transpose.

Lesson 05's exercise writes this map as code for one layer; :func:`load_layer` is the reference
answer, for either layout (Q, K, V packed, or the lesson-04 layer's separate ``q_proj``,
``k_proj``, ``v_proj``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import torch
from torch import nn

from .._validate import require_positive_int, shape_str

__all__ = [
    "WeightMapping",
    "layer_weight_map",
    "weight_map",
    "copy_weights",
    "load_layer",
    "is_packed",
]


class WeightMapping(NamedTuple):
    """One row of the map: checkpoint tensor -> our parameter.

    ``how`` is ``"copy"`` (same shape, copied as is) or ``"q"``, ``"k"``, ``"v"``: that third of a
    packed ``in_proj`` (rows [0:E], [E:2E], [2E:3E]).
    """

    checkpoint: str
    parameter: str
    how: str


_QKV = (("q", "query"), ("k", "key"), ("v", "value"))
_THIRDS = {"q": 0, "k": 1, "v": 2}
# (checkpoint name inside "encoder.layer.{i}.", our module inside one EncoderLayer)
_LAYER = [
    ("attention.output.dense", "self_attn.out_proj"),
    ("attention.output.LayerNorm", "norm1"),
    ("intermediate.dense", "linear1"),
    ("output.dense", "linear2"),
    ("output.LayerNorm", "norm2"),
]
# (checkpoint name, our parameter in MiniLM): the embedding block before the first layer
_EMBEDDINGS = [
    ("embeddings.word_embeddings.weight", "embeddings.word_embeddings.weight"),
    ("embeddings.position_embeddings.weight", "embeddings.position_embeddings.weight"),
    ("embeddings.token_type_embeddings.weight", "embeddings.token_type_embeddings.weight"),
    ("embeddings.LayerNorm.weight", "embeddings.norm.weight"),
    ("embeddings.LayerNorm.bias", "embeddings.norm.bias"),
]


def layer_weight_map(i: int, packed: bool = True) -> list[WeightMapping]:
    """The map of checkpoint layer ``i`` into one encoder layer (parameter names relative to it).

    ``packed=True``: Q, K, V go into the thirds of ``self_attn.in_proj_weight`` / ``in_proj_bias``
    (``mha_course.EncoderLayer``, ``torch.nn.TransformerEncoderLayer``). ``packed=False``: into
    ``self_attn.q_proj``, ``k_proj``, ``v_proj`` (the lesson-04 exercise's layer).
    """
    if isinstance(i, bool) or not isinstance(i, int) or i < 0:
        raise ValueError(f"i must be a layer index >= 0, got {i!r}")
    prefix = f"encoder.layer.{i}."
    rows = []
    for part in ("weight", "bias"):
        for letter, name in _QKV:
            ours = (
                (f"self_attn.in_proj_{part}", letter)
                if packed
                else (f"self_attn.{letter}_proj.{part}", "copy")
            )
            rows.append(WeightMapping(f"{prefix}attention.self.{name}.{part}", *ours))
    for theirs, ours in _LAYER:
        rows += [
            WeightMapping(f"{prefix}{theirs}.{part}", f"{ours}.{part}", "copy")
            for part in ("weight", "bias")
        ]
    return rows


def weight_map(num_layers: int = 6) -> list[WeightMapping]:
    """The whole model's map: the embedding block, then every layer under ``encoder.layers.{i}.``."""
    require_positive_int("num_layers", num_layers)
    rows = [WeightMapping(theirs, ours, "copy") for theirs, ours in _EMBEDDINGS]
    for i in range(num_layers):
        rows += [
            m._replace(parameter=f"encoder.layers.{i}.{m.parameter}") for m in layer_weight_map(i)
        ]
    return rows


def copy_weights(
    module: nn.Module, weights: dict[str, torch.Tensor], mapping: Sequence[WeightMapping]
) -> None:
    """Copy ``weights[row.checkpoint]`` into ``module``'s ``row.parameter`` for every row.

    Every parameter of ``module`` must be filled (each third of a packed in_proj once): a map that
    forgets one would leave random numbers in the model, so that is an error, not a warning.
    """
    params = dict(module.named_parameters())
    missing = [row.checkpoint for row in mapping if row.checkpoint not in weights]
    if missing:
        raise ValueError(
            f"the checkpoint lacks {len(missing)} tensors the map needs, e.g. {missing[:3]}"
        )
    filled: dict[str, set[str]] = {}
    with torch.no_grad():  # copying into parameters is not part of the model's computation
        for row in mapping:
            if row.parameter not in params:
                raise ValueError(f"the map names {row.parameter!r}, which the model does not have")
            source, target = weights[row.checkpoint], _place(params[row.parameter], row.how)
            if source.shape != target.shape:
                raise ValueError(
                    f"{row.checkpoint} has shape {shape_str(source.shape)}, but its place in "
                    f"{row.parameter} ({row.how}) has shape {shape_str(target.shape)}"
                )
            target.copy_(source)
            filled.setdefault(row.parameter, set()).add(row.how)
    unfilled = [
        name
        for name in params
        if name not in filled or (filled[name] != {"copy"} and filled[name] != {"q", "k", "v"})
    ]
    if unfilled:
        raise ValueError(f"the map leaves these parameters (or parts of them) unfilled: {unfilled}")


def _place(parameter: torch.Tensor, how: str) -> torch.Tensor:
    """The part of ``parameter`` a row fills: all of it, or one third (rows) of a packed in_proj."""
    if how == "copy":
        return parameter
    third = parameter.size(0) // 3  # E: in_proj is (3E, E), its bias (3E,)
    start = _THIRDS[how] * third
    return parameter[start : start + third]


def load_layer(layer: nn.Module, weights: dict[str, torch.Tensor], i: int) -> None:
    """Fill one encoder layer with layer ``i`` of the checkpoint: the reference answer of lesson
    05's exercise.

    Works on both layouts: a packed ``self_attn.in_proj_weight`` (``mha_course.EncoderLayer``,
    ``torch.nn.TransformerEncoderLayer``) or separate ``q_proj``/``k_proj``/``v_proj`` (the
    lesson-04 exercise's layer).
    """
    copy_weights(layer, weights, layer_weight_map(i, packed=is_packed(layer)))


def is_packed(layer: nn.Module) -> bool:
    """Does ``layer.self_attn`` keep Q, K, V in one packed ``in_proj_weight``?"""
    return getattr(getattr(layer, "self_attn", None), "in_proj_weight", None) is not None
