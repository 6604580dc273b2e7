"""The exercises' reference answers, with exactly the exercise skeletons' signatures.

The checkers compare a learner's code with these, and a notebook uses them in place of an
unfinished exercise so that the rest of the lesson still runs. Each is a thin adapter over the
package's own implementation (the package is the one place the maths is written).
"""

from __future__ import annotations

import math

import torch


def __getattr__(name: str):
    """An exercise's reference, as its checker module declares it (mha_course.checks)."""
    from .checks import _registry

    exercise = _registry.find(name)
    if exercise is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return exercise.reference


__all__ = [
    "load_layer",
    "attention_in_blocks",
    "previous_token_score",
    "mean_pool",
    "embed_sentences",
    "head_ablation",
    "attention_flops",
    "scores_memory",
    "attention_cost",
]


# Lesson 03: ``LayerNorm(normalized_shape, eps=1e-5)`` and ``positional_encoding(max_len, d_model)``
# are the package's own (imported above); their signatures extend the exercise skeletons'.


def load_layer(layer, weights, i):
    """Lesson 05: copy layer ``i`` of the MiniLM checkpoint ``weights`` into ``layer`` (packed
    ``self_attn.in_proj_weight`` or separate ``q_proj``/``k_proj``/``v_proj``)."""
    from .pretrained import (
        load_layer as _load_layer,  # imported here: loading a model is lesson 05's business
    )

    _load_layer(layer, weights, i)


def attention_in_blocks(q, k, v, block_size, is_causal=False, return_lse=False):
    """Lesson 06: softmax(q kᵀ / √d_k) v, reading the keys ``block_size`` at a time with the online
    softmax (a running max m, a running sum ℓ of exp(s - m), an unnormalised output o, rescaled
    whenever m rises). q (..., L, D), k (..., S, D), v (..., S, Dv) -> (..., L, Dv); the largest
    scores tensor it holds is (..., L, block_size). ``is_causal``: query i attends to keys 0..i
    (torch's convention), each block masked from the positions, no (L, S) mask. ``return_lse``:
    also the log-sum-exp of each query's scores, (..., L). Written here only: the package's
    attention calls the fused kernels that do this (``torch.nn.functional.scaled_dot_product_attention``)."""
    m = q.new_full(q.shape[:-1] + (1,), -math.inf)  # running max of each query's scores
    sum_exp = q.new_zeros(q.shape[:-1] + (1,))  # ℓ: running sum of exp(s - m)
    o = q.new_zeros(q.shape[:-1] + v.shape[-1:])  # running sum of exp(s - m) · v
    query_position = torch.arange(q.size(-2), device=q.device)[:, None]  # (L, 1)
    for j in range(0, k.size(-2), block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) / math.sqrt(q.size(-1))
        if is_causal:
            key_position = torch.arange(j, j + s.size(-1), device=q.device)  # (block,)
            s = s.masked_fill(key_position > query_position, -math.inf)
        m_new = torch.maximum(m, s.amax(dim=-1, keepdim=True))
        rescale = torch.exp(m - m_new)
        p = torch.exp(s - m_new)
        sum_exp = sum_exp * rescale + p.sum(dim=-1, keepdim=True)
        o = o * rescale + p @ v[..., j : j + block_size, :]
        m = m_new
    out = o / sum_exp
    if return_lse:
        return out, (m + sum_exp.log()).squeeze(-1)
    return out


# ---------------------------------------------------------------- the small steps, lesson by lesson
# Each step of the lessons' longer exercises, on its own: what a learner writes before putting the
# pieces together.

# Lesson 00: the two matmuls of attention (the steps of ``soft_lookup``), and the lookup itself.


# Lesson 01: the scaled scores, the two masks and the mask that combines them (bool, True where a
# query may attend).


# Lesson 03: a sub-layer with its residual and LayerNorm, both ways round, and the gradient that
# reaches each block of a stack.


# Lesson 04: the position-wise feed-forward network, and a stack of layers.


# Lesson 05: reading a pretrained encoder's outputs.


def previous_token_score(weights: torch.Tensor) -> torch.Tensor:
    """weights (..., L, L), rows = queries -> (...): the mean of weights[..., i, i - 1] over the
    queries that have a previous token, i = 1 … L-1 (the diagonal just below the main one)."""
    return torch.diagonal(weights, offset=-1, dim1=-2, dim2=-1).mean(dim=-1)


def mean_pool(hidden: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
    """hidden (B, L, E), attention_mask (B, L) of 1/0 -> (B, E): the mean of the real tokens."""
    from .pretrained import mean_pool as _mean_pool  # lesson 05's module, imported when used

    return _mean_pool(hidden, attention_mask)


def embed_sentences(model, sentences):
    """Lesson 05: sentences -> (N, E) embeddings, each the mean of its real tokens' last hidden
    states (padding left out), normalised to length 1."""
    from .pretrained import embed_sentences as _embed_sentences

    return _embed_sentences(model, sentences)


def head_ablation(model, score):
    """Lesson 05: (layers, H), how much ``score(model)`` drops when each head alone is switched
    off (its columns of W^O zeroed); the model is left as it was."""
    from .pretrained import head_ablation as _head_ablation

    return _head_ablation(model, score)


# Lesson 06: what attention costs.


def attention_flops(B: int, H: int, L: int, S: int, D: int) -> int:
    """FLOPs of Q Kᵀ and weights @ V, a multiply-add counting 2: 2·B·H·L·S·D each. The scale
    and the softmax, O(B·H·L·S), are left out."""
    return 4 * B * H * L * S * D


def scores_memory(B: int, H: int, L: int, S: int, dtype: torch.dtype) -> int:
    """Bytes of one (B, H, L, S) tensor of ``dtype``."""
    return B * H * L * S * dtype.itemsize


def attention_cost(B: int, H: int, L: int, S: int, D: int, dtype: torch.dtype) -> dict[str, int]:
    """What softmax(Q Kᵀ/√d_k) V costs for B sequences, H heads, L queries, S keys, head size D:
    ``{"flops", "score_bytes", "unfused_bytes", "fused_bytes"}``, all ints. ``flops``: the two
    matmuls (:func:`attention_flops`); ``score_bytes``: one (B, H, L, S) tensor
    (:func:`scores_memory`); ``fused_bytes``: q, k, v read and the output written once;
    ``unfused_bytes``: that, plus four passes over a (B, H, L, S) tensor (the scores written, read
    by the softmax, the weights written, read by weights @ V)."""
    score_bytes = scores_memory(B, H, L, S, dtype)
    fused_bytes = 2 * B * H * (L + S) * D * dtype.itemsize
    return {
        "flops": attention_flops(B, H, L, S, D),
        "score_bytes": score_bytes,
        "unfused_bytes": fused_bytes + 4 * score_bytes,
        "fused_bytes": fused_bytes,
    }
