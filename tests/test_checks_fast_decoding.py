"""The lesson-07 checkers of decode_roofline (the bytes a decode step reads, and its roofline time)
and StaticCachedAttention (the static KV cache a compiled step needs) accept correct answers and
name each classic mistake."""

import pytest
import torch
from einops import rearrange
from torch import nn

from mha_course import reference
from mha_course.checks import check_decode_roofline, check_static_cached_attention

from checker_helpers import fails_with, not_done, passes

# ---------------------------------------------------------------- decode_roofline


def roofline(flaw=""):
    def decode_roofline(params, layers, width, length, batch, size, bandwidth):
        return reference.decode_roofline(
            params, layers, width, length, batch, size, bandwidth, flaw=flaw
        )

    return decode_roofline


def written_out(params, layers, width, length, batch, size, bandwidth):
    """Another correct style: per token, the weights shared out over the batch."""
    per_sequence_cache = layers * 2 * length * width * size
    read = params * size + batch * per_sequence_cache
    return read, (params * size / batch + per_sequence_cache) / bandwidth


@pytest.mark.parametrize("candidate", [reference.decode_roofline, written_out])
def test_decode_roofline_accepts_correct_answers(candidate, capsys):
    passes(check_decode_roofline, candidate, capsys)


@pytest.mark.parametrize(
    "flaw, phrase",
    [
        ("weights per sequence", "counted once per sequence"),
        ("one sequence's cache", "the cache is counted for one sequence"),
        ("keys only", "keys and values: two numbers"),
        ("one layer's cache", "counted for one layer"),
        ("numbers, not bytes", "you counted numbers, not bytes"),
        ("time per step", "that is the time of one step"),
        ("a rate, not a time", "that is tokens per second"),
    ],
)
def test_decode_roofline_names_each_mistake(flaw, phrase):
    fails_with(check_decode_roofline, roofline(flaw), phrase)


def test_decode_roofline_types_and_not_done(capsys):
    def floats(*args):
        read, seconds = reference.decode_roofline(*args)
        return float(read), seconds

    fails_with(check_decode_roofline, floats, "should be an int, got the float")
    fails_with(check_decode_roofline, lambda *args: reference.decode_roofline(*args)[0], "pair")

    def skeleton(*args):
        raise NotImplementedError

    not_done(check_decode_roofline, skeleton, capsys)


@pytest.mark.parametrize("factor, holds", [(0.4, True), (3.0, False)])
def test_decode_roofline_tolerance_is_pinned(factor, holds, capsys):
    """The time is held in microseconds to atol 1e-5, rtol 1e-4: just inside passes, just
    outside fails (a tolerance loosened or tightened by mistake fails this test)."""

    def nudged(*args):
        read, seconds = reference.decode_roofline(*args)
        micro = seconds * 1e6
        return read, (micro + factor * (1e-5 + 1e-4 * abs(micro))) / 1e6

    if holds:
        passes(check_decode_roofline, nudged, capsys)
    else:
        fails_with(check_decode_roofline, nudged, "differ from the reference")


# ---------------------------------------------------------------- StaticCachedAttention


def static(
    advance="T",
    in_place=True,
    tensor_position=True,
    late=0,
    slots=0,
    mask="positions",
    prompt="cached",
    buffers_in_place=True,
    host=False,
    filled_only=False,
):
    """A StaticCachedAttention written as the skeleton asks; each keyword makes one mistake."""

    class StaticCachedAttention(nn.Module):
        def __init__(self, attn, num_heads, batch_size, max_len):
            super().__init__()
            self.attn, self.num_heads, self.max_len = attn, num_heads, max_len
            D = attn.q_proj.out_features // num_heads
            self.k = torch.zeros(batch_size, num_heads, max_len + slots, D)
            self.v = torch.zeros(batch_size, num_heads, max_len + slots, D)
            self.position = torch.zeros((), dtype=torch.long) if tensor_position else 0
            self.filled = 0

        def forward(self, query, key, value, attn_mask=None):
            a, H = self.attn, self.num_heads
            q, k, v = (
                rearrange(p(x), "b l (h d) -> b h l d", h=H)
                for p, x in ((a.q_proj, query), (a.k_proj, key), (a.v_proj, value))
            )
            T = q.size(2)
            start = int(self.position) if host else self.position
            positions = start + torch.arange(T)
            if prompt == "one slot":
                positions = self.position.view(1)
            if buffers_in_place:
                self.k.index_copy_(2, positions + late, k)
                self.v.index_copy_(2, positions + late, v)
            else:
                self.k = self.k.index_copy(2, positions + late, k)
                self.v = self.v.index_copy(2, positions + late, v)
            slots_ = torch.arange(self.k.size(2))
            allowed = {
                "positions": slots_ <= positions[:, None],
                "top-left": slots_ <= torch.arange(T)[:, None],
                "after": slots_ <= positions[:, None] + T,
                "one further": slots_ <= positions[:, None] + 1,
                "no diagonal": slots_ < positions[:, None],
                "whole prompt": (slots_ < start + T).expand(T, -1),
                "none": torch.ones(T, slots_.size(0), dtype=torch.bool),
            }[mask]
            keys, values = self.k, self.v
            self.filled += T
            if filled_only:
                keys, values = keys[:, :, : self.filled], values[:, :, : self.filled]
                allowed = allowed[:, : self.filled]
            heads, weights = reference.scaled_dot_product_attention(
                q, keys, values, attn_mask=allowed
            )
            step = T if advance == "T" else advance
            if in_place and tensor_position:
                self.position += step
            else:
                self.position = self.position + step
            return a.out_proj(rearrange(heads, "b h l d -> b l (h d)")), weights

    return StaticCachedAttention


class SharedPosition(reference.StaticCachedAttention):
    """Keeps its position on the class: every StaticCachedAttention advances the same tensor."""

    shared = torch.zeros((), dtype=torch.long)

    def __init__(self, attn, num_heads, batch_size, max_len):
        super().__init__(attn, num_heads, batch_size, max_len)
        self.position = SharedPosition.shared


def test_static_cached_attention_accepts_correct_answers(capsys):
    passes(check_static_cached_attention, reference.StaticCachedAttention, capsys)
    passes(check_static_cached_attention, static(), capsys)


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (static(advance=0), "is never advanced"),
        (static(advance=1), "advanced by one per call"),
        (static(in_place=False), "self.position is a new tensor after the call"),
        (static(buffers_in_place=False), "self.k is a new tensor after the call"),
        (static(tensor_position=False), "it is a 0-d integer tensor"),
        (SharedPosition, "still there"),
        (static(slots=-1), "writes past max_len"),
        (static(late=1), "one slot after its position"),
        (static(mask="top-left"), "aligned top-left"),
        (static(mask="after"), "after the advance"),
        (static(mask="none"), "the slots not written yet"),
        (static(mask="one further"), "one place too far right"),
        (static(mask="no diagonal"), "leaves out the diagonal"),
        (static(mask="whole prompt"), "within the prompt each query sees"),
        (static(prompt="one slot"), "the prompt's T tokens go to T slots"),
        (static(host=True), "read an integer tensor's value on the host"),
        (static(filled_only=True), "every call attends over all max_len slots"),
    ],
)
def test_static_cached_attention_names_each_mistake(candidate, phrase):
    fails_with(check_static_cached_attention, candidate, phrase)


def test_static_cached_attention_not_done(capsys):
    class Skeleton(reference.StaticCachedAttention):
        def forward(self, query, key, value, attn_mask=None):
            raise NotImplementedError

    not_done(check_static_cached_attention, Skeleton, capsys)
