"""Checker for lesson 07's KV cache: ``CachedAttention(attn, num_heads)``, a lesson-02 attention
(q_proj, k_proj, v_proj, out_proj) with a cache of its keys and values.

A sequence is fed in pieces, as generation does (a prompt, then one token at a time, or a few),
each piece called the way a causal block calls its attention: ``(x, x, x, attn_mask=causal)``
with x the new tokens. After every piece, the output must equal the rows of those tokens in
causal attention over the whole sequence so far, computed at once (float64, the same weights).
Forward hooks on ``k_proj`` and ``v_proj`` count the tokens projected: each token's key and value
are computed once, then reused. The cache's layout is the learner's to choose: only its size is
held to what it must hold (every token so far).
"""

from __future__ import annotations

import math
import re

import torch
from einops import rearrange
from torch import nn

from .. import reference
from .._validate import shape_str
from ..attention import scaled_dot_product_attention
from ._core import Mistake, call_candidate, checker, compare, require_shape
from ._failure import ExerciseFailure
from ._steps import build_module, seeded_randn
from .decoder import causal

__all__ = ["check_cached_attention"]

_ATOL, _RTOL = 1e-4, 1e-3

_APPEND = "self.k = torch.cat([self.k, k], dim=2) (and the same for v)"
_MASK = (
    "the S cached keys come before every new query, so each of the T new queries sees all of "
    "them and the new keys up to its own: the causal mask (T, S + T) aligned bottom-right, "
    "torch.ones(T, S + T, dtype=torch.bool).tril(S)"
)


def _attention(q, k, v, mask, scale_dim=None):
    if scale_dim is None:
        out, weights = scaled_dot_product_attention(q, k, v, attn_mask=mask)
        return out, weights
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale_dim)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ v, weights


class _Reference:
    """The right cached attention and its classic wrong versions, in float64, run on every piece
    from the start (each returns the output for piece ``upto``)."""

    def __init__(self, attn: nn.Module, num_heads: int):
        self.attn, self.H = attn, num_heads

    def _heads(self, proj, x):
        return rearrange(
            nn.functional.linear(x.double(), proj.weight.double(), proj.bias.double()),
            "b l (h d) -> b h l d",
            h=self.H,
        )

    def run(self, x, spans, upto, *, mask="bottom-right", keep=True, new_keys=True, scale=None):
        cached_k = cached_v = None
        for i, (start, end) in enumerate(spans):
            piece = x[:, start:end]
            q, k, v = (
                self._heads(p, piece)
                for p in (self.attn.q_proj, self.attn.k_proj, self.attn.v_proj)
            )
            if keep and cached_k is not None:
                keys = torch.cat([cached_k, k], dim=2) if new_keys else cached_k
                values = torch.cat([cached_v, v], dim=2) if new_keys else cached_v
            else:
                keys, values = k, v
            T, S = q.size(2), keys.size(2)
            allowed = {
                "bottom-right": causal(T, S),
                "top-left": torch.ones(T, S, dtype=torch.bool).tril(),
                "none": None,
            }[mask if new_keys else "none"]
            d = {None: None, "d_model": q.size(-1) * self.H}[scale]
            heads, _ = _attention(q, keys, values, allowed, d)
            out = self.attn.out_proj(rearrange(heads.float(), "b h l d -> b l (h d)")).double()
            if i == upto:
                return out
            cached_k = torch.cat([cached_k, k], dim=2) if cached_k is not None else k
            cached_v = torch.cat([cached_v, v], dim=2) if cached_v is not None else v
        raise IndexError(upto)


def _mistakes(ref: _Reference, x, spans, upto) -> list[Mistake]:
    def run(**wrong):
        return lambda: ref.run(x, spans, upto, **wrong)

    return [
        Mistake(
            "mask aligned top-left",
            run(mask="top-left"),
            "your causal mask is aligned top-left (torch.ones(T, S + T).tril()): it treats the "
            "new queries as if they were the first tokens, so a new token sees only the oldest "
            "keys. With a cache, " + _MASK + ".",
        ),
        Mistake(
            "no mask",
            run(mask="none"),
            "there is no causal mask over the keys: with several new tokens at once (a prompt), "
            "each one sees the new tokens after it. " + _MASK[0].upper() + _MASK[1:] + ".",
        ),
        Mistake(
            "cache not used",
            run(keep=False),
            "the new queries attend only over the new tokens' keys: the cached keys and values "
            "are not used (or the cache is replaced instead of extended). Append the new keys "
            "and values to the cache, then attend over all of them: " + _APPEND + ".",
        ),
        Mistake(
            "the new token's key not included",
            run(new_keys=False),
            "the new queries attend over the cached keys only, not over their own: append the "
            "new keys and values first, then attend over the whole cache (a token attends to "
            "itself too).",
        ),
        Mistake(
            "scaled by √d_model",
            run(scale="d_model"),
            "the scores are scaled by √d_model; scale by √d_k, the size of one head, "
            "D = d_model // num_heads.",
        ),
    ]


class _TokenCounter:
    """Counts the tokens a projection sees, by a forward hook."""

    def __init__(self, linear: nn.Module):
        self.seen = 0
        self.handle = linear.register_forward_hook(self._count)

    def _count(self, module, args, output):
        self.seen += args[0].shape[:-1].numel()

    def remove(self):
        self.handle.remove()


def _attn(E: int, H: int, seed: int) -> nn.Module:
    """The lesson-02 reference attention with random weights and biases."""
    torch.manual_seed(seed)
    attn = reference.MultiHeadAttention(E, H)
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in attn.parameters():
            p.copy_(torch.randn(p.shape, generator=g) / math.sqrt(E if p.dim() == 2 else 4))
    return attn.eval()


def _cases():
    randn = seeded_randn(73)
    # (case, E, H, x (B, total, E), the sizes of the pieces)
    yield (
        "a prompt of 4 tokens, then 1, 1, 1: E=16, 2 heads, B=2",
        16,
        2,
        randn(2, 7, 16),
        [4, 1, 1, 1],
    )
    yield (
        "token by token from the first: 1, 1, 1, 1, 1; E=12, 3 heads",
        12,
        3,
        randn(1, 5, 12),
        [1, 1, 1, 1, 1],
    )
    yield (
        "a prompt of 3, then 2 tokens at a time: 3, 2, 2; E=16, 4 heads",
        16,
        4,
        randn(2, 7, 16),
        [3, 2, 2],
    )
    yield (
        "a prompt of 3, then 3 more (as many new as cached); E=8, 2 heads",
        8,
        2,
        randn(2, 6, 8),
        [3, 3],
    )
    yield "the whole sequence at once, nothing cached: 6 tokens, 1 head", 8, 1, randn(1, 6, 8), [6]


def _spans(sizes):
    ends = torch.tensor(sizes).cumsum(0).tolist()
    return list(zip([0, *ends[:-1]], ends))


def _crash_cause(wrapper, error: BaseException, H: int, done: int, T: int) -> str:
    text = str(error)
    match = re.search(r"except in dimension (\d+)", text)
    cached = getattr(wrapper, "k", None)
    if match and isinstance(cached, torch.Tensor) and cached.dim() == 4:
        return (
            f"torch.cat failed: you append the new keys or values along axis {match.group(1)}, "
            f"but a cache of shape (B, H, S, D) grows along the tokens' axis, 2: {_APPEND}."
        )
    if (
        done > 0
        and T > 1
        and ("size of tensor" in text or "must match" in text or "broadcast" in text)
    ):
        return (
            "a mask of the wrong shape? The block passes its causal mask over the T new tokens, "
            "(T, T); with S cached tokens the scores are (B, H, T, S + T). "
            + _MASK[0].upper()
            + _MASK[1:]
            + "."
        )
    return (
        "a shape mix-up. The cache holds (B, H, S, D) keys and values; the new ones are "
        "(B, H, T, D); append along the tokens' axis, then attend with a (T, S + T) mask."
    )


def _run_case(candidate, case: str, E: int, H: int, x, sizes) -> None:
    attn = _attn(E, H, len(sizes) + E)
    wrapper = build_module(candidate, case, "CachedAttention", (attn, H), "check_cached_attention")
    wrapper.eval()
    ref = _Reference(attn, H)
    spans = _spans(sizes)
    counters = [_TokenCounter(attn.k_proj), _TokenCounter(attn.v_proj)]
    try:
        for i, (start, end) in enumerate(spans):
            T, B = end - start, x.size(0)
            piece = x[:, start:end].clone()
            label = f"{case}; piece {i} (tokens {start}..{end - 1})"
            try:
                with torch.no_grad():
                    result = call_candidate(
                        wrapper, label, piece, piece, piece, attn_mask=causal(T)
                    )
            except ExerciseFailure as failure:
                if failure.raised is None:
                    raise
                raise failure.with_cause(
                    _crash_cause(wrapper, failure.raised, H, start, T)
                ) from failure.raised
            out, weights = _unpack(label, result)
            full_out, full_weights = _full(ref, x[:, :end])
            require_shape(
                label, "the output", out, (B, T, E), "return the output of the new tokens only."
            )
            compare(
                label,
                "outputs",
                out,
                full_out[:, start:end],
                atol=_ATOL,
                rtol=_RTOL,
                mistakes=_mistakes(ref, x, spans, i),
                fallback_cause="append the new keys and values to the cache, then attend with "
                "the new queries over all of them; " + _MASK + ".",
            )
            if isinstance(weights, torch.Tensor):
                require_shape(
                    label, "the weights", weights, (B, H, T, end), "one per head, query and key."
                )
                compare(
                    label, "weights", weights, full_weights[:, :, start:end], atol=_ATOL, rtol=_RTOL
                )
            _require_cache_size(wrapper, label, B, E, end, T)
            _require_projected_once(counters, label, B, end)
    finally:
        for counter in counters:
            counter.remove()


def _full(ref: _Reference, x):
    """Causal attention over the whole sequence so far, at once: output and weights."""
    return ref.run(x, [(0, x.size(1))], 0), _full_weights(ref, x)


def _full_weights(ref: _Reference, x):
    q, k = (ref._heads(p, x) for p in (ref.attn.q_proj, ref.attn.k_proj))
    L = x.size(1)
    _, weights = scaled_dot_product_attention(q, k, k, attn_mask=causal(L))
    return weights


def _unpack(case: str, result):
    if not isinstance(result, tuple) or len(result) != 2:
        made = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
        raise ExerciseFailure(
            f"Case {case!r}: your forward returned {made}; return (output, weights) as your "
            f"MultiHeadAttention does, so that the block can call either."
        )
    return result


def _require_cache_size(wrapper, case: str, B: int, E: int, end: int, T: int) -> None:
    """Whatever its layout, the cached keys (``self.k``) hold every token so far: B·end·E numbers."""
    for name in ("k", "v"):
        cached = getattr(wrapper, name, None)
        if not isinstance(cached, torch.Tensor):
            continue
        held, needed = cached.numel(), B * end * E
        if held == needed:
            continue
        tokens = held / (B * E)
        what = "keys" if name == "k" else "values"
        if tokens == end - T:
            cause = f"the new tokens' {what} were not added to the cache: {_APPEND}."
        elif tokens == T:
            cause = f"self.{name} holds only the newest tokens' {what}: it is replaced each call instead of extended: {_APPEND}."
        else:
            cause = f"append the new {what} along the tokens' axis: {_APPEND}."
        raise ExerciseFailure(
            f"Case {case!r}: after {end} tokens, self.{name} has shape {shape_str(cached.shape)}: "
            f"{held} numbers, where the {what} of {end} tokens are B·{end}·E = {needed}.\n"
            f"Likely cause: {cause}"
        )


def _require_projected_once(counters, case: str, B: int, end: int) -> None:
    for counter, what in zip(counters, ("k_proj", "v_proj")):
        if counter.seen > B * end:
            raise ExerciseFailure(
                f"Case {case!r}: after {end} tokens, {what} has projected {counter.seen // B} "
                f"tokens per sequence: each token's key and value are computed again at every "
                f"step.\nLikely cause: you cache the inputs (or recompute every key). Cache the "
                f"projected keys and values themselves: project only the new tokens, then "
                f"append them."
            )


@checker(
    "CachedAttention",
    "Replace `raise NotImplementedError` in CachedAttention.forward: project the new tokens, "
    "append their keys and values to the cache, attend over all of them with the right mask.",
)
def check_cached_attention(candidate) -> int:
    """Check ``candidate(attn, num_heads)`` (a CachedAttention class: ``forward(query, key,
    value, attn_mask=None)`` on the new tokens -> ``(output (B, T, E), weights)``, keeping the
    keys and values of every token so far) against causal attention over the whole sequence."""
    with torch.random.fork_rng(devices=[]):
        n = 0
        for case, E, H, x, sizes in _cases():
            _run_case(candidate, case, E, H, x, sizes)
            n += 1
        return n
