"""One abstraction for lesson 08's variants of attention: FlexAttention's ``score_mod`` and
``mask_mod`` (``torch.nn.attention.flex_attention``, PyTorch 2.5+).

    scores = Q Kᵀ · scale                         (B, H, L, S)
    scores[b, h, i, j] = score_mod(scores[b, h, i, j], b, h, i, j)
    keep   [b, h, i, j] = mask_mod(b, h, i, j)     (False: the score is -inf)
    output = softmax(scores) V

A causal mask, a sliding window and a padding mask are ``mask_mod``s; ALiBi's bias is a
``score_mod``. Grouped-query attention is neither: it is which key/value head a query head reads
(``enable_gqa=True``). RoPE is neither either: it changes the queries and keys before the scores.

* :func:`attention_with_mods`: what ``flex_attention`` computes, written out with index tensors
  that broadcast (b (B, 1, 1, 1), h (1, H, 1, 1), i (1, 1, L, 1), j (1, 1, 1, S)), through the
  course's mask path and kernel. It runs on every device and torch;
* :func:`flex_unavailable`: why ``flex_attention`` cannot run here (None when it can).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

import torch
from torch import Tensor

from . import kernel, masks
from ._validate import shape_str

__all__ = ["attention_with_mods", "flex_unavailable", "EAGER_WARNING"]

EAGER_WARNING = "flex_attention called without torch.compile"
"""The start of the warning ``flex_attention`` gives when it runs uncompiled (the unfused
reference path: correct, but it builds the whole score matrix)."""


def attention_with_mods(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    score_mod: Callable | None = None,
    mask_mod: Callable | None = None,
    *,
    scale: float | None = None,
    enable_gqa: bool = False,
) -> Tensor:
    """softmax(score_mod(Q Kᵀ · scale) where mask_mod, else -inf) V, as ``flex_attention``:
    q (B, H, L, D), k (B, H_kv, S, D), v (B, H_kv, S, Dv) -> (B, H, L, Dv). ``score_mod(score, b,
    h, q_idx, kv_idx)`` and ``mask_mod(b, h, q_idx, kv_idx)`` get broadcasting index tensors, so
    a mod written with tensor operations (``slopes[h] * (q_idx - kv_idx)``) works unchanged. A
    query that keeps no key gets a zero output (flex_attention's too)."""
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"q, k and v must be 4-D (B, H, L, D), got {shape_str(q.shape)}, "
            f"{shape_str(k.shape)} and {shape_str(v.shape)}"
        )
    B, H, L, D = q.shape
    S = k.size(-2)
    if enable_gqa and H != k.size(1):  # query head h reads key/value head h // G
        if H % k.size(1):
            raise ValueError(
                f"with enable_gqa=True the query's heads must be a multiple of the key's: "
                f"{H} and {k.size(1)}"
            )
        group = H // k.size(1)
        k, v = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    device = q.device
    b = torch.arange(B, device=device).view(B, 1, 1, 1)
    h = torch.arange(H, device=device).view(1, H, 1, 1)
    i = torch.arange(L, device=device).view(1, 1, L, 1)
    j = torch.arange(S, device=device).view(1, 1, 1, S)
    scale = D**-0.5 if scale is None else scale
    scores = q @ k.transpose(-2, -1) * scale  # (B, H, L, S)
    if score_mod is not None:
        scores = score_mod(scores, b, h, i, j).expand(B, H, L, S)
    allowed = None if mask_mod is None else mask_mod(b, h, i, j)
    mask = masks.from_may_attend(allowed, scores.shape, scores.dtype, device=device)
    return kernel.attention_weights(scores, mask) @ v  # an empty query's weights are 0


def flex_unavailable(device: torch.device | str = "cpu") -> str | None:
    """None when ``flex_attention`` runs here on ``device`` (uncompiled); else why not, in one
    line (a torch older than 2.5, a device it does not support)."""
    device = torch.device(device)
    try:
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
    except ImportError:
        return (
            f"this torch ({torch.__version__}) has no torch.nn.attention.flex_attention "
            "(added in PyTorch 2.5)"
        )
    q = torch.zeros(1, 1, 16, 16, device=device)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=EAGER_WARNING)
            block_mask = create_block_mask(
                lambda b, h, i, j: j <= i, None, None, 16, 16, device=device
            )
            flex_attention(q, q, q, block_mask=block_mask)
    except Exception as error:  # what this device or build lacks, in its own words
        reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"flex_attention does not run on {device.type} here: {type(error).__name__} {reason}"
    return None
