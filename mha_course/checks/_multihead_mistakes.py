"""Lesson 02's multi-head attention written from torch's weights, right and with each classic
mistake, for :mod:`mha_course.checks.multihead` to name the mistake a learner's answer matches.

A mask is bool (True = may attend) or float (added to the scaled scores), as in
``torch.nn.functional.scaled_dot_product_attention``."""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ._core import Mistake

__all__ = ["Weights", "mistakes"]


@dataclass
class Weights:
    """torch's weights, float64: W^Q, W^K, W^V, W^O as (weight, bias) pairs, and H."""

    q: tuple
    k: tuple
    v: tuple
    o: tuple
    H: int

    @classmethod
    def of(cls, module: nn.MultiheadAttention) -> Weights:
        q, k, v = zip(module.in_proj_weight.chunk(3), module.in_proj_bias.chunk(3), strict=True)
        return cls(q, k, v, (module.out_proj.weight, module.out_proj.bias), module.num_heads)


def _split(x, H):  # 'b l (h d) -> b h l d'
    B, L, E = x.shape
    return x.view(B, L, H, E // H).transpose(1, 2)


def _merge(x):  # 'b h l d -> b l (h d)'
    B, H, L, D = x.shape
    return x.transpose(1, 2).reshape(B, L, H * D)


def _mha(
    p: Weights,
    query,
    key,
    value,
    mask,
    *,
    split=_split,
    merge=_merge,
    key_weights="k",
    value_input="value",
    scale="d_k",
    softmax_dim=-1,
    mask_rule="may attend",
    out_proj=True,
):
    """Multi-head attention with the exercise's mask; each keyword swaps one step for a classic
    mistake (the defaults are the right answer)."""
    Q = split(F.linear(query, *p.q), p.H)
    K = split(F.linear(key, *(p.k if key_weights == "k" else p.q)), p.H)
    V = split(F.linear(value if value_input == "value" else key, *p.v), p.H)
    d = {"d_k": Q.size(-1), "d_model": query.size(-1), "none": 1}[scale]
    scores = Q @ K.transpose(-2, -1)
    if mask is not None and mask.dtype != torch.bool and mask_rule == "added before the scale":
        scores = scores + mask
    scores = scores / math.sqrt(d)
    if mask is not None and mask.dtype != torch.bool:
        scores = _float_mask(scores, mask, mask_rule)
    elif mask is not None and mask_rule != "ignored":
        allowed = ~mask if mask_rule == "inverted" else mask
        scores = scores.masked_fill(
            ~allowed, 0.0 if mask_rule == "filled with 0" else float("-inf")
        )
    weights = torch.softmax(scores, dim=softmax_dim)
    heads = merge(weights @ V)
    return (F.linear(heads, *p.o) if out_proj else heads), weights


def _float_mask(scores, mask, rule: str):
    """A float mask, added to the scaled scores; or one of the classic ways to misuse it."""
    if rule in ("ignored", "added before the scale"):
        return scores
    if rule == "subtracted":
        return scores - mask
    if rule == "read as bool":  # True (non-zero) = may attend, as if it were a bool mask
        return scores.masked_fill(mask == 0, float("-inf"))
    if rule == "used to block":  # non-zero = blocked, its values dropped
        return scores.masked_fill(mask != 0, float("-inf"))
    return scores + mask


def mistakes(p: Weights) -> list[Mistake]:
    def wrong(**step):
        return lambda q, k, v, mask: _mha(p, q, k, v, mask, **step)

    def view_no_transpose(x, H):  # 'b l (h d)' read as 'b h l d'
        B, L, E = x.shape
        return x.view(B, H, L, E // H)

    def merge_no_transpose(x):  # 'b h l d' read as 'b l (h d)'
        B, H, L, D = x.shape
        return x.reshape(B, L, H * D)

    return [
        Mistake(
            "view without transpose",
            wrong(split=view_no_transpose),
            "the heads are split with .view(B, H, L, D) straight from (B, L, E): that reshuffles the "
            "numbers instead of giving each head its own D features. View as (B, L, H, D), then "
            "swap the length and head axes: x.view(B, L, H, D).transpose(1, 2), or "
            "rearrange(x, 'b l (h d) -> b h l d', h=H).",
        ),
        Mistake(
            "merge without transpose back",
            wrong(merge=merge_no_transpose),
            "the weights are right, but the heads are merged with .reshape(B, L, E) straight from "
            "(B, H, L, D), which mixes positions and heads. Swap the axes back first: "
            "out.transpose(1, 2).reshape(B, L, E), or rearrange(out, 'b h l d -> b l (h d)').",
        ),
        Mistake(
            "scale by sqrt(d_model)",
            wrong(scale="d_model"),
            "the scores are divided by √d_model (the full embed_dim); each head compares D-dimensional "
            "vectors, so divide by √d_k with d_k = embed_dim // num_heads (the head size).",
        ),
        Mistake(
            "no scale",
            wrong(scale="none"),
            "the scores are not scaled: divide Q Kᵀ by √d_k, with d_k = embed_dim // num_heads.",
        ),
        Mistake(
            "keys projected with q_proj",
            wrong(key_weights="q"),
            "the keys are projected with q_proj; each input has its own projection: "
            "Q = q_proj(query), K = k_proj(key), V = v_proj(value).",
        ),
        Mistake(
            "values from the key",
            wrong(value_input="key"),
            "the values are computed from `key`; they come from `value`: V = v_proj(value).",
        ),
        Mistake(
            "missing output projection",
            wrong(out_proj=False),
            "the weights are right, but the output projection W^O is missing: after merging the heads, "
            "return self.out_proj(concatenated heads).",
        ),
        Mistake(
            "softmax over the queries",
            wrong(softmax_dim=-2),
            "the softmax runs over the queries (dim=-2); each query's weights must sum to 1 over the "
            "keys: torch.softmax(scores, dim=-1).",
        ),
        Mistake(
            "softmax over the heads",
            wrong(softmax_dim=1),
            "the softmax runs over the heads (dim=1); each query's weights must sum to 1 over the "
            "keys: torch.softmax(scores, dim=-1).",
        ),
        Mistake(
            "mask ignored",
            wrong(mask_rule="ignored"),
            "the mask is ignored: your weights are what you get without it. Use attn_mask on the "
            "scores of every head (it broadcasts over the heads axis): a bool mask blocks where it "
            "is False, a float mask is added as it is (made into a bool one, a float mask without "
            "a 0 blocks nothing).",
        ),
        Mistake(
            "mask inverted",
            wrong(mask_rule="inverted"),
            "the mask is inverted: here True means 'may attend' (the convention of "
            "torch.nn.functional.scaled_dot_product_attention and of your lesson-01 function), not "
            "'masked out' as in torch.nn.MultiheadAttention. Pass attn_mask on to your attention as it "
            "is; inside, blank out where it is False: scores.masked_fill(~attn_mask, float('-inf')).",
        ),
        Mistake(
            "float mask added before the scale",
            wrong(mask_rule="added before the scale"),
            "the float mask is added before the scores are divided by √d_k, so it is scaled down "
            "too. Add it to the scaled scores, as torch does: softmax(Q Kᵀ / √d_k + attn_mask).",
        ),
        Mistake(
            "float mask subtracted",
            wrong(mask_rule="subtracted"),
            "the float mask is subtracted; it is added to the scores (its -inf entries block, its "
            "other entries shift the scores up or down).",
        ),
        Mistake(
            "float mask read as a bool mask",
            wrong(mask_rule="read as bool"),
            "the float mask was read as a bool one (0 = blocked). A float mask is not a yes/no: it "
            "is added to the scores, 0 where nothing changes and -inf where a key is blocked. Tell "
            "the two kinds apart by attn_mask.dtype.",
        ),
        Mistake(
            "float mask used to block",
            wrong(mask_rule="used to block"),
            "the float mask was used to block the keys where it is not 0, and its values dropped. "
            "A float mask is added to the scores: -inf blocks, any other value shifts the score.",
        ),
        Mistake(
            "mask filled with 0",
            wrong(mask_rule="filled with 0"),
            "masked scores were set to 0, but exp(0) = 1, so masked keys still get weight. Fill them "
            "with float('-inf'), whose exp is 0.",
        ),
    ]
