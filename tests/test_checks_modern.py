"""Lesson 08's checkers accept every correct style and name each classic mistake: RoPE (the
rotation, and inside causal attention over a cache), ALiBi's bias, grouped-query attention and
sliding-window attention."""

import math

import pytest
import torch
import torch.nn.functional as F

from mha_course import reference
from mha_course.checks import (
    check_alibi_bias,
    check_grouped_query_attention,
    check_rope_attention,
    check_rotary,
    check_sliding_window_attention,
)
from mha_course.exercises import by_name, yours_or_reference

from checker_helpers import fails_with, not_done, passes, skeleton

# ---------------------------------------------------------------- rotary: correct styles


def rotary_lesson(x, positions, base=10000.0, interleaved=False):
    """The lesson's answer: both layouts, the pairs sliced out and put back."""
    D = x.size(-1)
    theta = base ** (-torch.arange(0, D, 2, dtype=torch.float64) / D)
    angles = positions.to(torch.float64)[:, None] * theta
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if interleaved else (x[..., : D // 2], x[..., D // 2 :])
    y1, y2 = x1 * cos - x2 * sin, x1 * sin + x2 * cos
    return torch.stack((y1, y2), dim=-1).flatten(-2) if interleaved else torch.cat((y1, y2), -1)


def rotary_hugging_face(x, positions, base=10000.0, interleaved=False):
    """Hugging Face's rotate_half (GPT-NeoX, Llama) and GPT-J's rotate_every_two."""
    D = x.size(-1)
    inv_freq = 1.0 / (base ** (torch.arange(0, D, 2).double() / D))
    freqs = torch.outer(positions.double(), inv_freq)
    if interleaved:
        emb = freqs.repeat_interleave(2, dim=-1)
        turned = torch.stack((-x[..., 1::2], x[..., 0::2]), dim=-1).flatten(-2)
    else:
        emb = torch.cat((freqs, freqs), dim=-1)
        turned = torch.cat((-x[..., D // 2 :], x[..., : D // 2]), dim=-1)
    return x * emb.cos().to(x.dtype) + turned * emb.sin().to(x.dtype)


def rotary_complex(x, positions, base=10000.0, interleaved=False):
    """Complex numbers, as Meta's Llama (view_as_complex on neighbours when interleaved)."""
    D = x.size(-1)
    theta = base ** (-2 * torch.arange(D // 2, dtype=torch.float64) / D)
    turn = torch.polar(
        torch.ones(len(positions), D // 2, dtype=torch.float64), positions[:, None] * theta
    )
    if interleaved:
        z = torch.view_as_complex(x.double().reshape(*x.shape[:-1], -1, 2).contiguous()) * turn
        return torch.view_as_real(z).flatten(-2).to(x.dtype)
    z = torch.complex(x[..., : D // 2].double(), x[..., D // 2 :].double()) * turn
    return torch.cat((z.real, z.imag), dim=-1).to(x.dtype)


@pytest.mark.parametrize(
    "candidate", [rotary_lesson, rotary_hugging_face, rotary_complex, reference.rotary]
)
def test_rotary_accepts_correct_answers(candidate, capsys):
    passes(check_rotary, candidate, capsys)


def test_the_layouts_differ_by_the_converters_permutation():
    """Meta's layout with W^Q, W^K equals rotate-half with their rows permuted per head, as
    Hugging Face's converter does: the scores are the same."""
    g = torch.Generator().manual_seed(0)
    D, d, L = 8, 12, 5
    W_q, W_k = (torch.randn(D, d, generator=g, dtype=torch.float64) for _ in range(2))
    x, positions = torch.randn(L, d, generator=g, dtype=torch.float64), torch.arange(3, 3 + L)
    order = torch.cat((torch.arange(0, D, 2), torch.arange(1, D, 2)))

    def scores(wq, wk, interleaved):
        q = reference.rotary(x @ wq.T, positions, interleaved=interleaved)
        return q @ reference.rotary(x @ wk.T, positions, interleaved=interleaved).T

    torch.testing.assert_close(scores(W_q, W_k, True), scores(W_q[order], W_k[order], False))
    assert not torch.allclose(scores(W_q, W_k, True), scores(W_q, W_k, False))


# ---------------------------------------------------------------- rotary: mistakes


def rotary_mistaken(*, layout="right", ignore_positions=False, exponent="2i/D", sign=1.0,
                    swap=False, float64_out=False):  # fmt: skip
    def rotary(x, positions, base=10000.0, interleaved=False):
        D = x.size(-1)
        i = torch.arange(D // 2, dtype=torch.float64)
        power = {"2i/D": -2 * i / D, "i/D": -i / D, "+2i/D": 2 * i / D}[exponent]
        p = torch.arange(x.size(-2)) if ignore_positions else positions
        angles = p.double()[:, None] * base**power
        cos, sin = angles.cos(), sign * angles.sin()
        if swap:
            cos, sin = sin, cos
        if not float64_out:
            cos, sin = cos.to(x.dtype), sin.to(x.dtype)
        pairs = {"neighbours": True, "halves": False}.get(layout, interleaved)
        if pairs:
            x1, x2 = x[..., 0::2], x[..., 1::2]
            y = (x1 * cos - x2 * sin, x2 * cos + x1 * sin)
            return (
                torch.cat(y, -1) if layout == "back as halves" else torch.stack(y, -1).flatten(-2)
            )
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
        return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)

    return rotary


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (rotary_mistaken(layout="neighbours"), "you paired neighbouring features"),
        (rotary_mistaken(layout="halves"), "your rotation ignores `interleaved`"),
        (rotary_mistaken(layout="back as halves"), "written back as two halves"),
        (rotary_mistaken(ignore_positions=True), "ignores `positions`"),
        (rotary_mistaken(exponent="i/D"), "your frequencies are base^(-i/D)"),
        (rotary_mistaken(exponent="+2i/D"), "your frequencies grow with i"),
        (rotary_mistaken(sign=-1.0), "you turned each pair by -p·θ_i"),
        (rotary_mistaken(swap=True), "cos and sin are swapped"),
    ],
    ids=[
        "neighbours always",
        "interleaved ignored",
        "back as halves",
        "positions ignored",
        "i/D",
        "positive exponent",
        "other way",
        "swapped",
    ],
)
def test_rotary_names_each_classic_mistake(candidate, phrase):
    fails_with(check_rotary, candidate, "Likely cause", phrase)


def test_rotary_positions_ignored_fails_only_once_positions_do_not_start_at_zero():
    message = fails_with(check_rotary, rotary_mistaken(ignore_positions=True), "Case '")
    assert "Case 'one token, D = 4, position 1'" in message


def test_rotary_interleaved_ignored_fails_on_the_first_interleaved_case():
    message = fails_with(check_rotary, rotary_mistaken(layout="halves"), "Case '")
    assert "Case 'interleaved, one token, D = 4, position 1'" in message


def test_rotary_without_the_interleaved_argument_is_told_where_it_crashed():
    def rotary(x, positions, base=10000.0):
        return rotary_lesson(x, positions, base)

    fails_with(check_rotary, rotary, "Case 'interleaved, one token", "interleaved")


def test_rotary_wants_the_inputs_dtype():
    fails_with(check_rotary, rotary_mistaken(float64_out=True), "float32", "back to x's dtype")


def test_rotary_calling_the_package_is_told_to_write_it():
    from mha_course import RotaryEmbedding

    def borrowed(x, positions, base=10000.0, interleaved=False):
        return RotaryEmbedding(x.size(-1), base)(x, positions)

    fails_with(check_rotary, borrowed, "Your rotary calls the course's RotaryEmbedding")


def test_rotary_not_done_yet(capsys):
    not_done(check_rotary, skeleton, capsys)


# ---------------------------------------------------------------- rope_attention


def rope_attention_lesson(q, k, v, positions, rotate):
    L, S = q.size(-2), k.size(-2)
    q, k = rotate(q, positions[S - L :]), rotate(k, positions)
    allowed = torch.ones(L, S, dtype=torch.bool).tril(S - L)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)


def rope_attention_written_out(q, k, v, positions, rotate):
    """Scores by hand, the mask as -inf in a float bias, positions[-L:]."""
    L, S = q.size(-2), k.size(-2)
    q, k = rotate(q, positions[-L:]), rotate(k, positions)
    i = torch.arange(S - L, S)[:, None]
    j = torch.arange(S)[None, :]
    bias = torch.zeros(L, S, dtype=q.dtype).masked_fill(j > i, float("-inf"))
    scores = torch.einsum("bhld,bhsd->bhls", q, k) / math.sqrt(q.size(-1)) + bias
    return scores.softmax(-1) @ v


@pytest.mark.parametrize(
    "candidate", [rope_attention_lesson, rope_attention_written_out, reference.rope_attention]
)
def test_rope_attention_accepts_correct_answers(candidate, capsys):
    passes(check_rope_attention, candidate, capsys)


def rope_attention_mistaken(*, rotate_v=False, q_positions="last", rotate_k=True, mask="bottom-right"):  # fmt: skip
    def rope_attention(q, k, v, positions, rotate):
        L, S = q.size(-2), k.size(-2)
        pos = {"last": positions[S - L :], "first": positions[:L], "zero": torch.arange(L)}
        q = rotate(q, pos[q_positions])
        k = rotate(k, positions) if rotate_k else k
        v = rotate(v, positions) if rotate_v else v
        offset = {"bottom-right": S - L, "top-left": 0, "one too far": S - L + 1}.get(mask)
        allowed = None if offset is None else torch.ones(L, S, dtype=torch.bool).tril(offset)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=allowed)

    return rope_attention


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (rope_attention_mistaken(rotate_v=True), "you rotated the values too"),
        (
            rope_attention_mistaken(q_positions="first"),
            "the queries are rotated as the first tokens",
        ),
        (
            rope_attention_mistaken(q_positions="zero"),
            "the queries are rotated as the first tokens",
        ),
        (rope_attention_mistaken(rotate_k=False), "only the queries are rotated"),
        (rope_attention_mistaken(mask="top-left"), "aligned top-left"),
        (rope_attention_mistaken(mask=None), "there is no causal mask"),
        (rope_attention_mistaken(mask="one too far"), "one place too far right"),
    ],
    ids=[
        "v rotated",
        "first positions",
        "positions from 0",
        "k not rotated",
        "top-left",
        "no mask",
        "off-by-one diagonal",
    ],
)
def test_rope_attention_names_each_classic_mistake(candidate, phrase):
    fails_with(check_rope_attention, candidate, "Likely cause", phrase)


def test_rope_attention_not_done_yet(capsys):
    not_done(check_rope_attention, skeleton, capsys)


# ---------------------------------------------------------------- alibi_bias


def _paper_slopes(n):
    """The ALiBi paper's get_slopes, as its code writes it."""

    def power_of_2(n):
        start = 2 ** (-(2 ** -(math.log2(n) - 3)))
        return [start * start**i for i in range(n)]

    if math.log2(n).is_integer():
        return power_of_2(n)
    closest = 2 ** math.floor(math.log2(n))
    return power_of_2(closest) + _paper_slopes(2 * closest)[0::2][: n - closest]


def alibi_lesson(num_heads, L, S):
    P = 2 ** int(math.log2(num_heads))  # the largest power of two <= num_heads

    def geometric(n):
        return 2.0 ** (-8 * torch.arange(1, n + 1) / n)

    slopes = torch.cat((geometric(P), geometric(2 * P)[0::2]))[:num_heads]
    distance = torch.arange(S - L, S)[:, None] - torch.arange(S)[None, :]
    return -slopes[:, None, None] * distance


def alibi_loops(num_heads, L, S):
    """Loops, float64, the paper's slopes, and -m·|i - j| (the entries after the query are
    masked anyway)."""
    bias = torch.zeros(num_heads, L, S, dtype=torch.float64)
    for h, m in enumerate(_paper_slopes(num_heads)):
        for i in range(L):
            for j in range(S):
                bias[h, i, j] = -m * abs(S - L + i - j)
    return bias


def alibi_from_the_full_square(num_heads, L, S):
    """The (S, S) bias of every token, and its last L rows."""
    slopes = torch.tensor(_paper_slopes(num_heads))
    i, j = torch.meshgrid(torch.arange(S), torch.arange(S), indexing="ij")
    return torch.einsum("h,ls->hls", slopes, (j - i).double())[:, S - L :].float()


@pytest.mark.parametrize(
    "candidate", [alibi_lesson, alibi_loops, alibi_from_the_full_square, reference.alibi_bias]
)
def test_alibi_accepts_correct_answers(candidate, capsys):
    passes(check_alibi_bias, candidate, capsys)


def alibi_mistaken(*, reverse=False, sign=-1.0, exponent="8(h+1)/H", bloom=False, extra="odd",
                   top_left=False, power_of_two_only=False):  # fmt: skip
    def alibi_bias(num_heads, L, S):
        def geometric(n):
            h = torch.arange(n)
            power = {
                "8(h+1)/H": 8 * (h + 1) / n,
                "8h/H": 8 * h / n,
                "(h+1)/H": (h + 1) / n,
                "h+1": (h + 1).float(),
            }[exponent]
            return 2.0**-power

        P = num_heads if power_of_two_only else 2 ** int(math.log2(num_heads))
        more = {"odd": slice(0, None, 2), "in a row": slice(None), "even": slice(1, None, 2)}
        slopes = torch.cat((geometric(P), geometric(2 * P)[more[extra]]))[:num_heads]
        if exponent == "h+1":  # lesson 02's slopes, for every head
            slopes = geometric(num_heads)
        if reverse:
            slopes = slopes.flip(0)
        if bloom:
            return slopes[:, None, None] * torch.arange(S).float().expand(L, S)
        first = 0 if top_left else S - L
        distance = torch.arange(first, first + L)[:, None] - torch.arange(S)[None, :]
        return sign * slopes[:, None, None] * distance

    return alibi_bias


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (alibi_mistaken(reverse=True), "your slopes are in reverse order"),
        (alibi_mistaken(sign=1.0), "the bias has the wrong sign"),
        (alibi_mistaken(exponent="8h/H"), "your first slope is 1"),
        (alibi_mistaken(exponent="(h+1)/H"), "the exponent lacks a factor 8"),
        (alibi_mistaken(exponent="h+1"), "right for 8 heads only"),
        (alibi_mistaken(bloom=True), "BLOOM's form"),
        (alibi_mistaken(top_left=True), "your queries sit at positions 0 .. L - 1"),
        (alibi_mistaken(power_of_two_only=True), "for an H that is not a power of two"),
        (alibi_mistaken(extra="in a row"), "take 2P's slopes in a row"),
        (alibi_mistaken(extra="even"), "repeat slopes that P's heads already have"),
    ],
    ids=[
        "reversed",
        "sign",
        "h instead of h + 1",
        "no 8",
        "eight heads' slopes",
        "BLOOM",
        "queries first",
        "one sequence for any H",
        "extra in a row",
        "extra repeated",
    ],
)
def test_alibi_names_each_classic_mistake(candidate, phrase):
    fails_with(check_alibi_bias, candidate, "Likely cause", phrase)


def test_alibi_integer_bias_is_told_to_be_float():
    fails_with(
        check_alibi_bias, lambda H, L, S: torch.zeros(H, L, S, dtype=torch.long), "make it float"
    )


def test_alibi_not_done_yet(capsys):
    not_done(check_alibi_bias, skeleton, capsys)


# ---------------------------------------------------------------- grouped_query_attention


def _require_heads(query, key):
    if query.size(-3) % key.size(-3):
        raise ValueError(
            f"query heads ({query.size(-3)}) must be a multiple of key heads ({key.size(-3)})"
        )


def gqa_lesson(query, key, value, attn_mask=None):
    _require_heads(query, key)
    group = query.size(-3) // key.size(-3)
    key, value = key.repeat_interleave(group, dim=-3), value.repeat_interleave(group, dim=-3)
    scores = query @ key.transpose(-2, -1) / math.sqrt(query.size(-1))
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)
    return weights @ value, weights


def gqa_grouped_queries(query, key, value, attn_mask=None):
    """No copies: the query heads reshaped into (H_kv, G) and an einsum over the group."""
    _require_heads(query, key)
    B, H, L, D = query.shape
    H_kv = key.size(-3)
    q = query.view(B, H_kv, H // H_kv, L, D)
    scores = torch.einsum("bkgld,bksd->bkgls", q, key) / math.sqrt(D)
    scores = scores.reshape(B, H, L, -1)
    if attn_mask is not None:
        scores = scores.masked_fill(~attn_mask, float("-inf"))
    weights = scores.softmax(-1)
    out = torch.einsum("bkgls,bksd->bkgld", weights.view(B, H_kv, H // H_kv, L, -1), value)
    return out.reshape(B, H, L, -1), weights


def gqa_loop(query, key, value, attn_mask=None):
    """A loop over the query heads, each picking its key/value head."""
    _require_heads(query, key)
    H, H_kv = query.size(-3), key.size(-3)
    outs, ws = [], []
    for h in range(H):
        kv = h * H_kv // H
        s = query[:, h] @ key[:, kv].transpose(-2, -1) / query.size(-1) ** 0.5
        if attn_mask is not None:
            m = attn_mask if attn_mask.dim() < 4 else attn_mask[:, min(h, attn_mask.size(1) - 1)]
            s = s.masked_fill(~m, -math.inf)
        w = s.softmax(-1)
        outs.append(w @ value[:, kv])
        ws.append(w)
    return torch.stack(outs, 1), torch.stack(ws, 1)


@pytest.mark.parametrize(
    "candidate", [gqa_lesson, gqa_grouped_queries, gqa_loop, reference.grouped_query_attention]
)
def test_gqa_accepts_correct_answers(candidate, capsys):
    passes(check_grouped_query_attention, candidate, capsys)


def gqa_mistaken(*, share="interleave", scale=True, mask="right", dim=-1, check_heads=True):
    def grouped_query_attention(query, key, value, attn_mask=None):
        if check_heads:
            _require_heads(query, key)
        H, H_kv = query.size(-3), key.size(-3)
        G = H // H_kv
        if share == "interleave":
            key, value = key.repeat_interleave(G, dim=-3), value.repeat_interleave(G, dim=-3)
        elif share == "repeat":
            key, value = key.repeat(1, G, 1, 1), value.repeat(1, G, 1, 1)
        else:  # h // H_kv
            index = (torch.arange(H) // H_kv).clamp(max=H_kv - 1)
            key, value = key[:, index], value[:, index]
        scores = query @ key.transpose(-2, -1)
        if scale:
            scores = scores / math.sqrt(query.size(-1))
        if attn_mask is not None and mask not in ("ignored", "after"):
            scores = scores.masked_fill(
                attn_mask if mask == "inverted" else ~attn_mask, float("-inf")
            )
        weights = torch.softmax(scores, dim=dim)
        if attn_mask is not None and mask == "after":
            weights = weights * attn_mask
        return weights @ value, weights

    return grouped_query_attention


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (gqa_mistaken(share="repeat"), "read the key/value heads in turn, h % H_kv"),
        (gqa_mistaken(share="h // H_kv"), "reads key/value head h // H_kv"),
        (gqa_mistaken(scale=False), "not scaled"),
        (gqa_mistaken(mask="ignored"), "the mask has no effect"),
        (gqa_mistaken(mask="inverted"), "the mask is inverted"),
        (gqa_mistaken(mask="after"), "the mask was applied after the softmax"),
        (gqa_mistaken(dim=-2), "the weights sum to 1 down each column, over the queries"),
    ],
    ids=[
        "repeat",
        "h // H_kv",
        "no scale",
        "mask ignored",
        "mask inverted",
        "mask after the softmax",
        "softmax axis",
    ],
)
def test_gqa_names_each_classic_mistake(candidate, phrase):
    fails_with(check_grouped_query_attention, candidate, "Likely cause", phrase)


def test_gqa_without_the_heads_check_is_asked_for_a_value_error():
    fails_with(
        check_grouped_query_attention,
        gqa_mistaken(check_heads=False),
        "Case '6 query heads, 4 key/value heads",
        "raise a ValueError",
    )


def test_gqa_calling_torchs_sdpa_is_told_to_write_it():
    def borrowed(query, key, value, attn_mask=None):
        out = F.scaled_dot_product_attention(
            query, key, value, attn_mask=attn_mask, enable_gqa=True
        )
        return out, None

    fails_with(
        check_grouped_query_attention, borrowed, "calls torch's scaled_dot_product_attention"
    )


def test_gqa_not_done_yet(capsys):
    not_done(check_grouped_query_attention, skeleton, capsys)


# ---------------------------------------------------------------- sliding_window_attention


def window_lesson(q, k, v, window):
    L = q.size(-2)
    out = q.new_empty(*q.shape[:-1], v.size(-1))
    for s in range(0, L, window):
        e, first = min(s + window, L), max(0, s - window + 1)
        scores = q[..., s:e, :] @ k[..., first:e, :].transpose(-2, -1) / math.sqrt(q.size(-1))
        i, j = torch.arange(s, e)[:, None], torch.arange(first, e)[None, :]
        scores = scores.masked_fill((j > i) | (i - j >= window), float("-inf"))
        out[..., s:e, :] = torch.softmax(scores, dim=-1) @ v[..., first:e, :]
    return out


def window_one_query_at_a_time(q, k, v, window):
    """A loop over the queries, each with its own slice of keys (no mask at all)."""
    rows = []
    for i in range(q.size(-2)):
        first = max(0, i - window + 1)
        s = q[..., i : i + 1, :] @ k[..., first : i + 1, :].mT / q.size(-1) ** 0.5
        rows.append(s.softmax(-1) @ v[..., first : i + 1, :])
    return torch.cat(rows, dim=-2)


def window_sdpa_blocks(q, k, v, window):
    """Blocks of 3 queries, SDPA with a bool mask per block."""
    L, outs = q.size(-2), []
    for s in range(0, L, 3):
        e, first = min(s + 3, L), max(0, s - window + 1)
        i, j = torch.arange(s, e)[:, None], torch.arange(first, e)[None, :]
        allowed = (j <= i) & (i - j < window)
        outs.append(
            F.scaled_dot_product_attention(
                q[..., s:e, :], k[..., first:e, :], v[..., first:e, :], attn_mask=allowed
            )
        )
    return torch.cat(outs, dim=-2)


@pytest.mark.parametrize(
    "candidate",
    [
        window_lesson,
        window_one_query_at_a_time,
        window_sdpa_blocks,
        reference.sliding_window_attention,
    ],
)
def test_window_accepts_correct_answers(candidate, capsys):
    passes(check_sliding_window_attention, candidate, capsys)


def window_mistaken(
    *, too_many=False, too_few=False, causal=True, scale=True, look_back=True, in_block=True
):
    def sliding_window_attention(q, k, v, window):
        L = q.size(-2)
        out = q.new_empty(*q.shape[:-1], v.size(-1))
        for s in range(0, L, window):
            e = min(s + window, L)
            first = max(0, s - window + 1) if look_back else s
            last = min(L, e + window - 1) if not causal else e
            scores = q[..., s:e, :] @ k[..., first:last, :].transpose(-2, -1)
            if scale:
                scores = scores / math.sqrt(q.size(-1))
            i, j = torch.arange(s, e)[:, None], torch.arange(first, last)[None, :]
            reach = window + 1 if too_many else window - 1 if too_few else window
            blocked = ((i - j).abs() >= reach) if not causal else (j > i) | (i - j >= reach)
            if not in_block:  # the window's far edge only: the keys after a query stay
                blocked = i - j >= reach
            scores = scores.masked_fill(blocked, float("-inf"))
            out[..., s:e, :] = torch.softmax(scores, dim=-1) @ v[..., first:last, :]
        return out

    return sliding_window_attention


def window_dense(q, k, v, window):
    """The right numbers, from the whole (L, L) mask at once."""
    L = q.size(-2)
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    scores = q @ k.mT / math.sqrt(q.size(-1))
    return scores.masked_fill((j > i) | (i - j >= window), -math.inf).softmax(-1) @ v


@pytest.mark.parametrize(
    "candidate, phrase",
    [
        (window_mistaken(too_many=True), "your mask lets a query see window + 1 keys"),
        (window_mistaken(too_few=True), "your window holds window - 1 keys"),
        (window_mistaken(causal=False), "your window looks ahead too"),
        (window_mistaken(in_block=False), "inside the window a query also sees the keys after it"),
        (window_mistaken(scale=False), "not scaled"),
        (
            window_mistaken(look_back=False),
            "each block of queries attends only to the keys of its own block",
        ),
        (window_dense, "builds an (L, L) = (24, 24) tensor"),
    ],
    ids=[
        "one too many",
        "one too few",
        "not causal",
        "no causal part in the block",
        "no scale",
        "own block only",
        "dense",
    ],
)
def test_window_names_each_classic_mistake(candidate, phrase):
    fails_with(check_sliding_window_attention, candidate, phrase)


def test_window_ignored_is_named():
    def causal_only(q, k, v, window):
        return window_one_query_at_a_time(q, k, v, 10**6)

    fails_with(
        check_sliding_window_attention, causal_only, "Likely cause", "plain causal attention"
    )


def test_window_not_done_yet(capsys):
    not_done(check_sliding_window_attention, skeleton, capsys)


# ---------------------------------------------------------------- the registry


@pytest.mark.parametrize(
    "name, check",
    [
        ("rotary", check_rotary),
        ("rope_attention", check_rope_attention),
        ("alibi_bias", check_alibi_bias),
        ("grouped_query_attention", check_grouped_query_attention),
        ("sliding_window_attention", check_sliding_window_attention),
    ],
)
def test_registered_for_lesson_08_and_used_until_the_learner_passes(name, check, capsys):
    exercise = by_name(name)
    assert exercise.lesson == "08" and exercise.check is check
    assert exercise.reference is getattr(reference, name)
    assert yours_or_reference(check, skeleton, exercise.reference) is exercise.reference
    assert "is not done yet" in capsys.readouterr().out


def test_gqa_a_crash_with_the_mask_names_the_mask():
    def squeezed(query, key, value, attn_mask=None):
        if attn_mask is not None:
            attn_mask = attn_mask.squeeze()  # (2, 1, 1, 6) -> (2, 6): against (L, S), a crash
        return gqa_lesson(query, key, value, attn_mask)

    fails_with(
        check_grouped_query_attention,
        squeezed,
        "Case 'padding mask",
        "the mask (2, 1, 1, 6) broadcast as it is",
    )
