"""The lesson-07 checker of CachedAttention accepts every correct cache (split or unsplit
layout, the block's mask extended or a new one built) and names each classic mistake: the mask
aligned top-left, keys appended along the wrong axis, the cache not used or replaced, every key
projected again."""

import math

import pytest
import torch
from einops import rearrange
from torch import nn

from mha_course import reference
from mha_course.checks import check_cached_attention
from mha_course.exercises import by_name

from checker_helpers import fails_with, not_done, passes


def split(x, H):
    return rearrange(x, "b l (h d) -> b h l d", h=H)


def attention(q, k, v, mask, scale=None):
    scores = q @ k.transpose(-2, -1) / math.sqrt(scale or q.size(-1))
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(-1)
    return weights @ v, weights


def bottom_right(T, S):
    return torch.ones(T, S, dtype=torch.bool).tril(S - T)


def cached(
    mask=bottom_right, axis=2, keep=True, attend_first=False, scale=None, reproject=False, pair=True
):
    """A CachedAttention written as the skeleton asks; each keyword makes one mistake."""

    class CachedAttention(nn.Module):
        def __init__(self, attn, num_heads):
            super().__init__()
            self.attn, self.num_heads = attn, num_heads
            self.k = self.v = None

        def forward(self, query, key, value, attn_mask=None):
            H, a = self.num_heads, self.attn
            q = split(a.q_proj(query), H)
            if reproject:  # caches the inputs and projects them all again
                self.k = key if self.k is None else torch.cat([self.k, key], dim=1)
                k, v = split(a.k_proj(self.k), H), split(a.v_proj(self.k), H)
            else:
                k, v = split(a.k_proj(key), H), split(a.v_proj(value), H)
                if attend_first and self.k is not None:
                    keys, values = self.k, self.v
                    self.k = torch.cat([self.k, k], dim=axis)
                    self.v = torch.cat([self.v, v], dim=axis)
                    k, v = keys, values
                else:
                    if self.k is not None and keep:
                        k = torch.cat([self.k, k], dim=axis)
                        v = torch.cat([self.v, v], dim=axis)
                    self.k, self.v = k, v
            T, S = q.size(2), k.size(2)
            heads, weights = attention(q, k, v, None if mask is None else mask(T, S), scale)
            out = a.out_proj(rearrange(heads, "b h l d -> b l (h d)"))
            return (out, weights) if pair else out

    return CachedAttention


class Unsplit(nn.Module):
    """Another correct style: the cache holds the projected keys and values before the split,
    (B, S, E), and the block's mask is extended with the cached columns."""

    def __init__(self, attn, num_heads):
        super().__init__()
        self.attn, self.num_heads = attn, num_heads
        self.k = self.v = None

    def forward(self, query, key, value, attn_mask=None):
        k, v = self.attn.k_proj(key), self.attn.v_proj(value)
        if self.k is not None:
            k, v = torch.cat([self.k, k], dim=1), torch.cat([self.v, v], dim=1)
        self.k, self.v = k, v
        T, S = query.size(1), k.size(1)
        mask = torch.cat([attn_mask.new_ones(T, S - T), attn_mask], dim=-1)
        H = self.num_heads
        heads, weights = attention(
            split(self.attn.q_proj(query), H), split(k, H), split(v, H), mask
        )
        return self.attn.out_proj(rearrange(heads, "b h l d -> b l (h d)")), weights


@pytest.mark.parametrize("candidate", [reference.CachedAttention, cached(), Unsplit])
def test_cached_attention_accepts_correct_caches(candidate, capsys):
    passes(check_cached_attention, candidate, capsys)


def given_mask(T, S):
    return torch.ones(T, T, dtype=torch.bool).tril()


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (cached(mask=lambda T, S: torch.ones(T, S, dtype=torch.bool).tril()), "aligned top-left"),
        (cached(mask=lambda T, S: bottom_right(T, S + 1)[:, :-1]), "one place too far right"),
        (cached(mask=None), "there is no causal mask over the keys"),
        (cached(mask=given_mask), "a mask of the wrong shape?"),
        (cached(axis=1), "along axis 1"),
        (cached(axis=-1), "along axis 3"),
        (cached(keep=False), "the cached keys and values are not used"),
        (cached(attend_first=True), "the cached keys only, not their own"),
        (cached(scale="E"), "scaled by √d_model"),
        (cached(reproject=True), "computed again at every step"),
        (cached(pair=False), "returns (output, weights)"),
    ],
)
def test_cached_attention_names_each_mistake(candidate, phrase):
    if phrase == "scaled by √d_model":
        candidate = scaled_by_d_model()
    fails_with(check_cached_attention, candidate, phrase)


def scaled_by_d_model():
    class Scaled(reference.CachedAttention):
        def forward(self, query, key, value, attn_mask=None):
            a, H = self.attn, self.num_heads
            q, k, v = split(a.q_proj(query), H), split(a.k_proj(key), H), split(a.v_proj(value), H)
            if self.k is not None:
                k, v = torch.cat([self.k, k], 2), torch.cat([self.v, v], 2)
            self.k, self.v = k, v
            T, S = q.size(2), k.size(2)
            heads, w = attention(q, k, v, bottom_right(T, S), scale=query.size(-1))
            return a.out_proj(rearrange(heads, "b h l d -> b l (h d)")), w

    return Scaled


class OnTheAttention(reference.CachedAttention):
    """Keeps its cache on the attention it wraps: the next CachedAttention around the same
    attention starts with the previous sequence's keys and values."""

    def forward(self, query, key, value, attn_mask=None):
        self.k, self.v = getattr(self.attn, "cache", (None, None))
        result = super().forward(query, key, value, attn_mask)
        self.attn.cache = (self.k, self.v)
        return result


class OnTheClass(reference.CachedAttention):
    """Keeps its cache on the class, shared by every CachedAttention."""

    shared = {}

    def forward(self, query, key, value, attn_mask=None):
        self.k, self.v = OnTheClass.shared.get("k"), OnTheClass.shared.get("v")
        result = super().forward(query, key, value, attn_mask)
        OnTheClass.shared.update(k=self.k, v=self.v)
        return result


@pytest.mark.parametrize("candidate", [OnTheAttention, OnTheClass])
def test_cached_attention_a_cache_that_keeps_the_previous_sequence(candidate):
    message = fails_with(check_cached_attention, candidate, "still holds the previous sequence")
    assert "piece 0" in message


def test_cached_attention_wrong_output_shape_and_not_done(capsys):
    class AllTokens(reference.CachedAttention):
        """Returns every token's output, cached ones too."""

        def forward(self, query, key, value, attn_mask=None):
            out, _ = super().forward(query, key, value, attn_mask)
            earlier = out.new_zeros(out.size(0), self.k.size(2) - out.size(1), out.size(2))
            return torch.cat([earlier, out], dim=1), None

    fails_with(check_cached_attention, AllTokens, "the output of the new tokens only")

    class Skeleton(reference.CachedAttention):
        def forward(self, query, key, value, attn_mask=None):
            raise NotImplementedError

    not_done(check_cached_attention, Skeleton, capsys)


# The checker holds the outputs and weights to atol 1e-4 and rtol 1e-3 of its float64 reference
# (|got - expected| <= atol + rtol·|expected|): an answer off by twice that fails, by half passes.
ATOL, RTOL = 1e-4, 1e-3
WHERE = {  # which entries an answer is off at, by their size: where atol or rtol decides
    "everywhere": lambda size: torch.ones_like(size, dtype=torch.bool),
    "near 0": lambda size: size < 0.05,
    "large": lambda size: size >= 0.5,
}


def off_by(what: str, factor: float, where: str, cache=None):
    """The reference ``cache`` (CachedAttention by default) with its ``what`` (outputs or weights)
    moved away from 0 by factor · (atol + rtol·|x|) at the entries ``where`` picks (``picks``:
    where, call by call)."""

    class NearlyRight(cache or reference.CachedAttention):
        picks = []  # counted after the check: a count read in forward is a host read

        def forward(self, query, key, value, attn_mask=None):
            result = dict(
                zip(("outputs", "weights"), super().forward(query, key, value, attn_mask))
            )
            x = result[what]
            picked = WHERE[where](x.abs())
            step = factor * (ATOL + RTOL * x.abs()) * torch.where(x < 0, -1.0, 1.0)
            result[what] = torch.where(picked, x + step, x)
            NearlyRight.picks.append(picked)
            return result["outputs"], result["weights"]

    return NearlyRight


@pytest.mark.parametrize(
    "what, factor, where",
    [
        ("outputs", 0.5, "everywhere"),
        ("outputs", 2.0, "near 0"),
        ("outputs", 2.0, "large"),
        ("weights", 0.5, "everywhere"),
        ("weights", 2.0, "near 0"),
        ("weights", 2.0, "large"),
    ],
)
@pytest.mark.parametrize("exercise", ["CachedAttention", "StaticCachedAttention"])
def test_cached_attention_tolerance_is_pinned(exercise, what, factor, where, capsys):
    check = by_name(exercise).check
    candidate = off_by(what, factor, where, getattr(reference, exercise))
    if factor < 1:
        passes(check, candidate, capsys)
    else:
        fails_with(check, candidate, f"{what} differ from the reference")
    assert sum(int(p.sum()) for p in candidate.picks) > 0  # the cases have entries of that size
