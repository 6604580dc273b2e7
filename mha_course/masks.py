"""Attention masks: building them, checking them, and the one form the attention kernel reads.

A mask says which keys each query may look at. The lessons meet it in two conventions:

* **may attend** (``torch.nn.functional.scaled_dot_product_attention``, lessons 01 and 02):
  a bool mask is True where a query *may* attend to a key;
* **masked out** (``torch.nn.MultiheadAttention`` and the encoder, lessons 02 to 05): a bool mask
  is True where attention is *not allowed*, e.g. a key padding mask is True at the padding.

A float mask means the same in both: it is *added* to the scores (0 = allowed, -inf = not).

The public functions and modules check a mask where it comes in and convert it, once, into the
canonical form :class:`AttentionMask`; everything inside (the kernel, every layer of an encoder)
reads only that form and checks nothing:

* ``bias``: the additive float mask M in the scores' dtype, broadcastable to (B, H, L, S) and no
  bigger than the masks it came from ((B, 1, 1, S) for key padding, (L, S) for a causal mask):
  softmax(Q Kᵀ · scale + M) is the masked attention, one add and no branch;
* ``empty``: bool (..., L, 1), True for a query that may attend to no key at all. Its row of
  ``bias`` is set to 0, so softmax never sees a row of -inf (which gives NaN), and the kernel then
  sets that query's weights and output to 0, always (no test of whether any row is empty: such a
  test reads a tensor's value, which on a GPU waits for the GPU, and torch.compile cannot trace it);
* ``causal``: True when ``bias`` is exactly the causal mask, so a fused kernel may use its own
  causal mode instead of reading ``bias``.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
from torch import Tensor

from ._validate import require_tensor, shape_str

__all__ = [
    "AttentionMask",
    "NO_MASK",
    "causal_mask",
    "causal_over_cache",
    "fold_groups",
    "sliding_window_mask",
    "padding_mask",
    "other_convention",
    "nothing_to_attend",
    "canonical",
    "from_may_attend",
    "from_masked_out",
    "MAY_ATTEND",
    "MASKED_OUT",
    "require_mask",
    "broadcasts_to",
    "require_broadcastable",
    "require_torch_masks",
]

MAY_ATTEND = "True = may attend"  # the two conventions, as the error messages name them
MASKED_OUT = "True = masked out"


class AttentionMask(NamedTuple):
    """The canonical mask: what the attention kernel reads (see the module's docstring)."""

    bias: Tensor | None = None  # float, broadcastable to (B, H, L, S): 0 allowed, -inf not
    empty: Tensor | None = None  # bool (..., L, 1): the queries with nothing to attend to
    causal: bool = False  # bias is exactly the causal mask (a hint for fused kernels)

    def zero_empty(self, x: Tensor) -> Tensor:
        """``x`` (..., L, F) with the rows of the empty queries set to 0."""
        return x if self.empty is None else x.masked_fill(self.empty, 0.0)


NO_MASK = AttentionMask()
"""Every query may attend to every key."""


# --------------------------------------------------------------------------- building masks


def causal_mask(L: int, S: int, device=None, *, offset: int = 0) -> Tensor:
    """Bool (L, S), True where query i may attend to key j: j <= i + offset. With ``offset=0``
    top-left aligned, as the ``is_causal`` of torch's SDPA; with ``offset = S - L`` the queries
    are the last L of S positions (bottom-right aligned: new tokens over a KV cache, where a new
    query sees every cached key). Every query may attend at least to key 0."""
    return torch.ones(L, S, dtype=torch.bool, device=device).tril(offset)


def sliding_window_mask(L: int, S: int, window: int, device=None, *, offset: int = 0) -> Tensor:
    """Bool (L, S), True where query i may attend to key j: causal and at most ``window`` keys
    back, j <= i + offset and (i + offset) - j < window (the query itself counts as one of the
    window's keys). ``window >= S`` is the causal mask. ``offset`` as in :func:`causal_mask`."""
    if isinstance(window, bool) or not isinstance(window, int):
        raise TypeError(f"window must be an int, got {type(window).__name__} {window!r}")
    if window < 1:
        raise ValueError(f"window must be >= 1 (each query sees at least itself), got {window}")
    causal = causal_mask(L, S, device, offset=offset)
    return causal & ~causal_mask(L, S, device, offset=offset - window)


def padding_mask(lengths: Tensor, S: int) -> Tensor:
    """Bool (B, S), True at the padded positions (the ``key_padding_mask`` of
    torch.nn.MultiheadAttention): sequence b is ``lengths[b]`` real tokens, then padding."""
    require_tensor("lengths", lengths)
    return torch.arange(S, device=lengths.device) >= lengths.unsqueeze(-1)


# --------------------------------------------------------------------------- the two conventions


def other_convention(mask: Tensor) -> Tensor:
    """A bool mask in the other convention: True = may attend <-> True = masked out, i.e. its
    negation (for torch.nn.MultiheadAttention, ``key_padding_mask=other_convention(is_real)``).
    A float mask means the same in both and comes back as it is."""
    return ~mask if mask.dtype == torch.bool else mask


def nothing_to_attend(mask: Tensor) -> Tensor:
    """The queries a mask leaves with no key at all, shape (..., L, 1): for a bool mask
    (True = may attend) a row of False, for a float mask a row of -inf."""
    if mask.dtype == torch.bool:
        return ~mask.any(dim=-1, keepdim=True)
    return mask.isneginf().all(dim=-1, keepdim=True)


def _bias(mask: Tensor, masked_out: bool, dtype: torch.dtype) -> Tensor:
    """A mask as the additive float mask: a float mask as it is, a bool one as 0 / -inf."""
    if mask.is_floating_point():
        return mask
    blocked = mask if masked_out else ~mask
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(
        blocked, float("-inf")
    )


# --------------------------------------------------------------------------- the canonical form


def canonical(
    attn_mask: Tensor | None,
    key_padding_mask: Tensor | None,
    scores_shape: tuple[int, ...],
    dtype: torch.dtype,
    *,
    masked_out: bool,
    is_causal: bool = False,
    device=None,
) -> AttentionMask:
    """Checked masks -> :class:`AttentionMask`: the one conversion every route makes, once.

    ``attn_mask`` and ``key_padding_mask`` broadcast to ``scores_shape`` (..., L, S) (e.g. (L, S)
    and (B, 1, 1, S)), bool in the ``masked_out`` convention or float in ``dtype``.
    ``is_causal`` without ``attn_mask`` builds the (L, S) causal mask; with one, it says that
    ``attn_mask`` is that mask (torch's meaning of the flag).
    """
    if attn_mask is None and is_causal:
        bias = _bias(causal_mask(*scores_shape[-2:], device=device), False, dtype)  # (L, S)
        if key_padding_mask is None:  # every query may attend to key 0: no query is empty
            return AttentionMask(bias, None, causal=True)
    elif attn_mask is not None:
        bias = _bias(attn_mask, masked_out, dtype)
    else:
        bias = None
    if key_padding_mask is not None:
        padding = _bias(key_padding_mask, masked_out, dtype)
        bias = padding if bias is None else bias + padding  # (B, H or 1, L or 1, S)
    if bias is None:
        return NO_MASK
    if bias.dim() < 2:  # a 1-D mask (S,): give it its query axis
        bias = bias.view(1, -1)
    empty = nothing_to_attend(bias)  # (..., L or 1, 1)
    causal = is_causal and key_padding_mask is None
    return AttentionMask(bias.masked_fill(empty, 0.0), empty, causal)


def causal_over_cache(L: int, S: int, dtype: torch.dtype, device=None) -> AttentionMask:
    """The canonical causal mask of L new queries over S keys, the last L of which are the new
    tokens themselves (S - L are cached): bottom-right aligned. No mask at all for one new token
    (it sees every key), the kernel's own causal mode when nothing is cached."""
    if L == S:
        return canonical(None, None, (L, S), dtype, masked_out=False, is_causal=True, device=device)
    if L == 1:
        return NO_MASK
    return AttentionMask(_bias(causal_mask(L, S, device, offset=S - L), False, dtype))


def fold_groups(mask: AttentionMask, num_heads: int, group: int, L: int) -> AttentionMask:
    """A canonical mask broadcastable to (B, H, L, S), for queries folded into groups
    (B, H_kv, G·L, D) (grouped-query attention, :func:`mha_course.kernel.attend_heads`):
    broadcastable to (B, H_kv, G·L, S), query head h = kv · G + g at rows g·L .. g·L + L - 1 of
    key/value head kv."""

    def fold(t: Tensor | None) -> Tensor | None:
        if t is None:
            return None
        t = t.expand(*t.shape[:-2], L, t.size(-1))  # one row per query
        if t.dim() >= 3 and t.size(-3) == num_heads:  # per query head: regroup the heads
            return t.unflatten(-3, (num_heads // group, group)).flatten(-3, -2)
        return t.unsqueeze(-3).expand(*t.shape[:-2], group, L, t.size(-1)).flatten(-3, -2)

    return AttentionMask(fold(mask.bias), fold(mask.empty), causal=False)


def from_may_attend(
    attn_mask: Tensor | None, scores_shape, dtype: torch.dtype, is_causal=False, device=None
) -> AttentionMask:
    """SDPA's ``attn_mask`` (bool True = may attend, or float; broadcastable to the scores'
    shape (..., L, S)) or its ``is_causal``, as the canonical form."""
    return canonical(
        attn_mask, None, scores_shape, dtype, masked_out=False, is_causal=is_causal, device=device
    )


def from_masked_out(
    attn_mask: Tensor | None,
    key_padding_mask: Tensor | None,
    scores_shape: tuple[int, int, int, int],
    dtype: torch.dtype,
    is_causal: bool = False,
    device=None,
) -> AttentionMask:
    """torch.nn.MultiheadAttention's two masks (bool True = masked out, or float; ``attn_mask``
    (L, S) or (B·H, L, S), ``key_padding_mask`` (B, S), as :func:`require_torch_masks` checks)
    as the canonical form, broadcastable to the scores' shape (B, H, L, S)."""
    B, H, L, S = scores_shape
    if attn_mask is not None and attn_mask.dim() == 3:
        attn_mask = attn_mask.reshape(B, H, L, S)  # (B·H, L, S) -> (B, H, L, S)
    if key_padding_mask is not None:
        key_padding_mask = key_padding_mask.reshape(B, 1, 1, S)  # the same for every head, query
    return canonical(
        attn_mask,
        key_padding_mask,
        scores_shape,
        dtype,
        masked_out=True,
        is_causal=is_causal,
        device=device,
    )


# --------------------------------------------------------------------------- checks


def require_mask(name: str, mask, dtype: torch.dtype, convention: str, floats: bool = True) -> None:
    """A mask is a tensor, bool (``convention`` says what True means) or, with ``floats``, of
    the inputs' float ``dtype`` (added to the scores)."""
    require_tensor(name, mask)
    if mask.dtype == torch.bool or (floats and mask.dtype == dtype):
        return
    if not floats:
        raise ValueError(f"{name} must be a bool tensor ({convention}), got dtype {mask.dtype}")
    kind = "float" if mask.is_floating_point() else "integer"
    fix = f"{name}.to({dtype})" if mask.is_floating_point() else f"{name}.bool()"
    raise ValueError(
        f"{name} has dtype {mask.dtype}; expected torch.bool ({convention}) or the inputs' "
        f"float dtype {dtype} (added to the scores). Convert the {kind} mask with {fix}"
    )


def broadcasts_to(shape, target) -> bool:
    """Does ``shape`` broadcast to ``target`` without growing it?"""
    try:
        return torch.broadcast_shapes(shape, target) == torch.Size(target)
    except RuntimeError:
        return False


def require_broadcastable(name: str, mask: Tensor, scores_shape) -> None:
    """``mask`` broadcasts to the scores' shape without growing it."""
    if not broadcasts_to(mask.shape, scores_shape):
        raise ValueError(
            f"{name} of shape {shape_str(mask.shape)} does not broadcast to the scores' shape "
            f"{shape_str(scores_shape)}"
        )


def require_torch_masks(
    attn_mask,
    key_padding_mask,
    scores_shape: tuple[int, int, int, int],
    dtype: torch.dtype,
    batched: bool,
    names: tuple[str, str] = ("attn_mask", "key_padding_mask"),
    heads: str = "num_heads",
    lengths: tuple[str, str] = ("L", "S"),
) -> None:
    """torch.nn.MultiheadAttention's masks for scores (B, H, L, S): ``attn_mask`` (L, S) or
    (B·H, L, S) ((H, L, S) for one sequence), ``key_padding_mask`` (B, S) ((S,) for one sequence),
    each bool (True = masked out) or float. ``names``, ``heads`` and ``lengths`` are what the
    caller calls them in its messages (the encoder's ``src_mask``, ``nhead``, (L, L))."""
    B, H, L, S = scores_shape
    ell, s = lengths
    if attn_mask is not None:
        require_mask(names[0], attn_mask, dtype, MASKED_OUT)
        per_head = ((B * H, L, S), f"(B·{heads}, {ell}, {s}) = ({B}·{H}, {L}, {S})")
        if not batched:
            per_head = ((H, L, S), f"({heads}, {ell}, {s}) = ({H}, {L}, {S})")
        _require_shape(names[0], attn_mask, ((L, S), f"({ell}, {s}) = ({L}, {S})"), per_head)
    if key_padding_mask is not None:
        require_mask(names[1], key_padding_mask, dtype, MASKED_OUT)
        expected = ((B, S), f"(B, {s}) = ({B}, {S})") if batched else ((S,), f"({s},) = ({S},)")
        _require_shape(names[1], key_padding_mask, expected)


def _require_shape(name: str, mask: Tensor, *shapes: tuple[tuple[int, ...], str]) -> None:
    if tuple(mask.shape) not in [shape for shape, _ in shapes]:
        expected = " or ".join(text for _, text in shapes)
        raise ValueError(f"{name} has shape {shape_str(mask.shape)}, expected {expected}")
