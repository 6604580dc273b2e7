"""Switching attention heads off, and measuring what each one is worth.

Multi-head attention concatenates the heads' outputs and multiplies by W^O:
``Concat(head_1, ..., head_h) W^O``. Head ``h`` fills features ``[h*D, (h+1)*D)`` of the
concatenation, and those features meet only columns ``[h*D, (h+1)*D)`` of ``out_proj.weight``
(stored, like every ``nn.Linear`` weight, as (out_features, in_features)). Zero those columns and
the head's output reaches nothing: the head is switched off, while the bias of W^O, shared by
every head, stays. That is what ``head_mask`` did in BERT (it multiplied a head's attention
weights by 0, so its output was 0); transformers 5 removed ``head_mask``, so this module works on
the weights instead, and works on any encoder whose layers have ``self_attn.out_proj``: the
package's MiniLM, ``torch.nn.TransformerEncoderLayer``, or the learner's own layers.

:func:`heads_off` switches heads off inside a ``with`` block; :func:`head_ablation` measures the
drop of a score when each head alone is off (Michel et al., 2019, *Are Sixteen Heads Really Better
than One?*): lesson 05's exercise, and its reference answer.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from torch import nn

__all__ = ["encoder_layers", "heads_off", "head_ablation"]


def encoder_layers(model: nn.Module) -> list[nn.Module]:
    """The encoder layers of ``model`` (``model.encoder.layers``), each with a ``self_attn``
    whose ``out_proj`` is W^O; a clear error otherwise."""
    layers = getattr(getattr(model, "encoder", None), "layers", None)
    if layers is None:
        raise ValueError(
            f"model must have its encoder layers in model.encoder.layers, got a "
            f"{type(model).__name__} without them"
        )
    for i, layer in enumerate(layers):
        if not isinstance(getattr(getattr(layer, "self_attn", None), "out_proj", None), nn.Linear):
            raise ValueError(
                f"encoder layer {i} has no self_attn.out_proj (an nn.Linear, W^O) to switch heads "
                "off in"
            )
    return list(layers)


def _num_heads(model: nn.Module, layer: nn.Module) -> int:
    heads = getattr(layer.self_attn, "num_heads", None)
    if heads is None:
        heads = getattr(getattr(model, "config", None), "num_attention_heads", None)
    if not isinstance(heads, int) or heads < 1:
        raise ValueError(
            "cannot tell how many heads the layers have: give self_attn a num_heads attribute"
        )
    return heads


def _head_columns(model: nn.Module, layers: list, layer: int, head: int) -> torch.Tensor:
    """The columns of layer ``layer``'s W^O that head ``head``'s output meets (a view)."""
    if isinstance(layer, bool) or not isinstance(layer, int) or not 0 <= layer < len(layers):
        raise ValueError(f"layer must be in [0, {len(layers)}), got {layer!r}")
    H = _num_heads(model, layers[layer])
    if isinstance(head, bool) or not isinstance(head, int) or not 0 <= head < H:
        raise ValueError(f"head must be in [0, {H}), got {head!r} (layer {layer})")
    weight = layers[layer].self_attn.out_proj.weight  # (E, E): (out, in = the concatenated heads)
    D = weight.size(1) // H
    return weight[:, head * D : (head + 1) * D]  # (E, D)


@contextmanager
def heads_off(model: nn.Module, heads: Iterable[tuple[int, int]]) -> Iterator[None]:
    """Inside the ``with`` block, the heads listed as ``(layer, head)`` pairs send nothing on:
    their columns of W^O are zero. Every weight is restored on leaving, even after an error.

        >>> with heads_off(model, [(5, 10), (0, 2)]):
        ...     embeddings = model.encode(sentences)  # without L5H10 and L0H2
    """
    layers = encoder_layers(model)
    columns = [_head_columns(model, layers, layer, head) for layer, head in heads]
    kept = [c.detach().clone() for c in columns]  # copies: the views below are zeroed
    try:
        with torch.no_grad():
            for c in columns:
                c.zero_()
        yield
    finally:
        with torch.no_grad():
            for c, original in zip(reversed(columns), reversed(kept)):
                c.copy_(original)


def head_ablation(model: nn.Module, score: Callable[[nn.Module], float]) -> torch.Tensor:
    """How much ``score(model)`` drops when each head alone is switched off: (layers, H).

    ``score`` runs the model and returns a number, higher is better; entry [l, h] is the score of
    the whole model minus the score with head h of layer l off (negative: the model did better
    without it). The model is left as it was.
    """
    layers = encoder_layers(model)
    baseline = float(score(model))
    drops = torch.zeros(len(layers), _num_heads(model, layers[0]))
    for layer in range(drops.size(0)):
        for head in range(drops.size(1)):
            with heads_off(model, [(layer, head)]):
                drops[layer, head] = baseline - float(score(model))
    return drops
