"""Checkers for lesson 08's positions: rotary embeddings (RoPE), RoPE inside causal attention
over a KV cache, and ALiBi's linear biases."""

from __future__ import annotations

import math

import torch

from .. import alibi, reference, rope
from ._core import Mistake, checker
from ._failure import ExerciseFailure
from ._steps import call_diagnosed, require_tensor, seeded_randn

__all__ = ["check_rotary", "check_rope_attention", "check_alibi_bias"]


# ---------------------------------------------------------------- rotary


def _rotated(x, cos, sin, interleaved=False, direction=1.0):
    """x (..., L, D) turned by the angles whose cos and sin are (L, D/2), pair by pair."""
    D = x.size(-1)
    if interleaved:  # GPT-J: features 2i and 2i + 1 form pair i
        x1, x2 = x[..., 0::2], x[..., 1::2]
    else:  # rotate half: features i and i + D/2
        x1, x2 = x[..., : D // 2], x[..., D // 2 :]
    sin = direction * sin
    y1, y2 = x1 * cos - x2 * sin, x2 * cos + x1 * sin
    if interleaved:
        return torch.stack((y1, y2), dim=-1).flatten(-2)
    return torch.cat((y1, y2), dim=-1)


def _rope(
    x,
    positions,
    base=10000.0,
    *,
    interleaved=False,
    direction=1.0,
    exponent=lambda i, D: 2 * i / D,
    swap=False,
    ignore_positions=False,
):
    """RoPE with switches that turn it into one of the classic mistakes."""
    D = x.size(-1)
    i = torch.arange(D // 2, dtype=torch.float64)
    theta = base ** -exponent(i, D)  # (D/2,)
    p = torch.arange(x.size(-2)) if ignore_positions else positions
    angles = p.to(torch.float64)[:, None] * theta  # (L, D/2)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    if swap:
        cos, sin = sin, cos
    return _rotated(x, cos, sin, interleaved, direction)


_LAYOUT = "feature i pairs with feature i + D/2: x1 = x[..., :D/2], x2 = x[..., D/2:]"

_ROTARY_MISTAKES = [
    Mistake(
        "interleaved (GPT-J)",
        lambda x, p, base=10000.0: _rope(x, p, base, interleaved=True),
        "you paired neighbouring features (2i, 2i + 1), the GPT-J layout. The exercise asks for "
        f"Llama's rotate-half layout: {_LAYOUT}. Both are RoPE, but weights trained in one "
        "layout need that layout.",
    ),
    Mistake(
        "positions ignored",
        lambda x, p, base=10000.0: _rope(x, p, base, ignore_positions=True),
        "your rotation ignores `positions` and numbers the tokens 0, 1, 2, ... With a KV cache the "
        "new tokens' positions continue where the cache stopped (here they do not start at 0): "
        "turn token t by positions[t] · θ_i.",
    ),
    Mistake(
        "exponent i/D",
        lambda x, p, base=10000.0: _rope(x, p, base, exponent=lambda i, D: i / D),
        "your frequencies are base^(-i/D); pair i turns by θ_i = base^(-2i/D), i = 0 .. D/2 - 1 "
        "(the exponents 0, 2/D, 4/D, ..., (D - 2)/D).",
    ),
    Mistake(
        "exponent 2i/D, positive",
        lambda x, p, base=10000.0: _rope(x, p, base, exponent=lambda i, D: -2 * i / D),
        "your frequencies grow with i (base^(+2i/D)); θ_i = base^(-2i/D) = 1 / base^(2i/D): the "
        "first pair turns fastest, by 1 radian per position, the last slowest.",
    ),
    Mistake(
        "rotated the other way",
        lambda x, p, base=10000.0: _rope(x, p, base, direction=-1.0),
        "you turned each pair by -p·θ_i. The convention turns by +p·θ_i: the first half "
        "becomes x1·cos - x2·sin, the second x2·cos + x1·sin.",
    ),
    Mistake(
        "cos and sin swapped",
        lambda x, p, base=10000.0: _rope(x, p, base, swap=True),
        "cos and sin are swapped: at position 0 (angle 0) the rotation must leave x unchanged, "
        "x·cos(0) = x.",
    ),
]


def _rotary_cases():
    randn = seeded_randn(8, dtype=torch.float64)
    yield "one token, D = 4, position 1", torch.tensor([[1.0, 2.0, 3.0, 4.0]]), torch.tensor([1])
    yield "(B, H, L, D) = (2, 3, 5, 8), positions 0..4", randn(2, 3, 5, 8), torch.arange(5)
    yield (
        "after 7 cached tokens: (1, 2, 4, 8), positions 7..10",
        randn(1, 2, 4, 8),
        torch.arange(7, 11),
    )
    yield (
        "positions 0, 3, 10, 100 and base 500000 (Llama 3's): (2, 4, 16)",
        randn(2, 4, 16),
        torch.tensor([0, 3, 10, 100]),
        500000.0,
    )
    yield "float32, D = 6: (3, 6), positions 2, 5, 9", randn(3, 6).float(), torch.tensor([2, 5, 9])


@checker(
    "rotary",
    "Replace `raise NotImplementedError` with the rotation of each pair of features.",
    own_work={
        "the course's RotaryEmbedding (mha_course)": rope.RotaryEmbedding,
        "the course's rotate_half (mha_course.rope)": rope.rotate_half,
        "the course's reference (mha_course.reference)": reference.rotary,
    },
)
def check_rotary(candidate) -> int:
    """Check ``candidate(x (..., L, D), positions (L,), base=10000.0)`` -> x rotated, rotate-half
    layout, x's shape and dtype."""
    n = 0
    for case, *args in _rotary_cases():
        got = call_diagnosed(
            candidate,
            case,
            args,
            _ROTARY_MISTAKES,
            "x is (..., L, D) and positions (L,): the angles are (L, D/2), one per token and pair; "
            "they broadcast against x1 and x2 (..., L, D/2).",
        )
        require_tensor(
            case,
            "the rotated features",
            got,
            reference.rotary(*args),
            _ROTARY_MISTAKES,
            args,
            shape_hint="the result has x's shape: each feature is replaced by its rotated value.",
            dtype_hint="return x's dtype: compute the angles in any precision, then convert cos "
            "and sin with .to(x.dtype).",
            fallback_cause=f"check the pairing ({_LAYOUT}) and the angle p·θ_i, θ_i = "
            "base^(-2i/D).",
            atol=1e-5,
            rtol=1e-4,
        )
        n += 1
    return n


# ---------------------------------------------------------------- rope_attention


def _causal(L, S, offset):
    return torch.ones(L, S, dtype=torch.bool).tril(offset)


def _attend(q, k, v, allowed):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))
    if allowed is not None:
        scores = scores.masked_fill(~allowed, float("-inf"))
    return scores.softmax(dim=-1) @ v


def _rope_attention(q, k, v, positions, rotate, *, q_pos="last", rot_q=True, rot_k=True,
                    rot_v=False, mask="bottom-right"):  # fmt: skip
    """RoPE attention with switches that turn it into one of the classic mistakes."""
    L, S = q.size(-2), k.size(-2)
    query_positions = {
        "last": positions[S - L :],
        "first": positions[:L],
        "from 0": torch.arange(L),
    }[q_pos]
    q = rotate(q, query_positions) if rot_q else q
    k = rotate(k, positions) if rot_k else k
    v = rotate(v, positions) if rot_v else v
    allowed = {"bottom-right": _causal(L, S, S - L), "top-left": _causal(L, S, 0), None: None}
    return _attend(q, k, v, allowed[mask])


_RESTART = (
    "the queries are rotated as if they were the first tokens. They are the last L of the S "
    "tokens (the first S - L came from the cache): their positions are the last L of "
    "`positions`, which continue where the cache stopped."
)

_ROPE_ATTENTION_MISTAKES = [
    Mistake(
        "v rotated",
        lambda *a: _rope_attention(*a, rot_v=True),
        "you rotated the values too. RoPE turns only queries and keys, so that their dot product "
        "(the score) depends on the offset; the values are what is averaged, and stay as they are.",
    ),
    Mistake(
        "queries at the first positions", lambda *a: _rope_attention(*a, q_pos="first"), _RESTART
    ),
    Mistake("queries from 0", lambda *a: _rope_attention(*a, q_pos="from 0"), _RESTART),
    Mistake(
        "keys not rotated",
        lambda *a: _rope_attention(*a, rot_k=False),
        "only the queries are rotated; rotate the keys too, each by its own position, so that "
        "q_m · k_n depends on m - n.",
    ),
    Mistake(
        "queries not rotated",
        lambda *a: _rope_attention(*a, rot_q=False),
        "only the keys are rotated; rotate the queries too, by their own positions.",
    ),
    Mistake(
        "causal mask top-left",
        lambda *a: _rope_attention(*a, mask="top-left"),
        "your causal mask is aligned top-left: query i sees keys 0..i. The queries are the last L "
        "of S tokens, so query i sees keys 0 .. S - L + i (every cached key, and the new ones up "
        "to itself): a lower-triangular (L, S) mask shifted right by S - L.",
    ),
    Mistake(
        "no mask",
        lambda *a: _rope_attention(*a, mask=None),
        "there is no causal mask: a query must not see the keys after its own token.",
    ),
]


def _rope_attention_cases():
    randn = seeded_randn(18, dtype=torch.float64)
    yield (
        "no cache: q, k, v (2, 2, 6, 8), positions 0..5",
        randn(2, 2, 6, 8),
        randn(2, 2, 6, 8),
        randn(2, 2, 6, 8),
        torch.arange(6),
    )
    yield (
        "3 new tokens after 6 cached: q (1, 2, 3, 8), k and v (1, 2, 9, 8), positions 0..8",
        randn(1, 2, 3, 8),
        randn(1, 2, 9, 8),
        randn(1, 2, 9, 8),
        torch.arange(9),
    )
    yield (
        "one new token after 6 cached: q (2, 3, 1, 8), k and v (2, 3, 7, 8)",
        randn(2, 3, 1, 8),
        randn(2, 3, 7, 8),
        randn(2, 3, 7, 8),
        torch.arange(7),
    )
    yield (
        "positions 20..27 (a text that started earlier), 4 new tokens: q (1, 1, 4, 8), k and v "
        "(1, 1, 8, 8)",
        randn(1, 1, 4, 8),
        randn(1, 1, 8, 8),
        randn(1, 1, 8, 8),
        torch.arange(20, 28),
    )


def _reference_rotate(x, positions):
    return reference.rotary(x, positions)


@checker(
    "rope_attention",
    "Replace `raise NotImplementedError` with causal attention over rotated queries and keys.",
)
def check_rope_attention(candidate) -> int:
    """Check ``candidate(q (B, H, L, D), k, v (B, H, S, D), positions (S,), rotate)`` -> the
    output (B, H, L, D) of causal attention with RoPE, the queries being the last L tokens."""
    n = 0
    for case, q, k, v, positions in _rope_attention_cases():
        args = (q, k, v, positions, _reference_rotate)
        got = call_diagnosed(
            candidate,
            case,
            args,
            _ROPE_ATTENTION_MISTAKES,
            "q is (B, H, L, D) and k, v (B, H, S, D): rotate q by the positions of its L tokens "
            "(L of them) and k by all S positions; the causal mask is (L, S).",
        )
        expected = reference.rope_attention(*args)
        require_tensor(
            case,
            "the outputs",
            got,
            expected,
            _ROPE_ATTENTION_MISTAKES,
            args,
            shape_hint="the output has one row per query, like q: (B, H, L, D).",
            dtype_hint="keep q's dtype (here float64).",
            fallback_cause="rotate q and k (not v) by their own positions, then causal attention "
            "with the scale 1/√D.",
        )
        n += 1
    return n


# ---------------------------------------------------------------- alibi_bias


def _slopes(H, exponent=lambda h, H: 8 * (h + 1) / H, reverse=False):
    m = torch.tensor([2.0 ** -exponent(h, H) for h in range(H)])
    return m.flip(0) if reverse else m


def _alibi(H, L, S, *, sign=-1.0, bloom=False, **slopes):
    m = _slopes(H, **slopes)[:, None, None]
    i, j = torch.arange(L)[:, None], torch.arange(S)[None, :]
    if bloom:
        return m * j.float().expand(L, S)
    return sign * m * (i - j).float()


_SLOPES = "m_h = 2^(-8(h+1)/H), h = 0 .. H - 1"

_ALIBI_MISTAKES = [
    Mistake(
        "slopes reversed",
        lambda H, L, S: _alibi(H, L, S, reverse=True),
        f"your slopes are in reverse order: head 0 has the steepest, {_SLOPES} (1/2, 1/4, ... for "
        "8 heads), so that head 0 looks nearest and the last head farthest.",
    ),
    Mistake(
        "wrong sign",
        lambda H, L, S: _alibi(H, L, S, sign=1.0),
        "the bias has the wrong sign: a key further back must get a *lower* score, "
        "bias = -m_h · (i - j), negative below the diagonal. With +, far keys win.",
    ),
    Mistake(
        "exponent h instead of h + 1",
        lambda H, L, S: _alibi(H, L, S, exponent=lambda h, H: 8 * h / H),
        f"your first slope is 1 (2^0): the exponents start at h + 1, {_SLOPES}.",
    ),
    Mistake(
        "the 8 missing",
        lambda H, L, S: _alibi(H, L, S, exponent=lambda h, H: (h + 1) / H),
        f"your slopes are 2^(-(h+1)/H): the exponent has a factor 8, {_SLOPES}, so that the last "
        "slope is 2^-8 = 1/256 whatever the number of heads.",
    ),
    Mistake(
        "eight heads' slopes",
        lambda H, L, S: _alibi(H, L, S, exponent=lambda h, H: h + 1.0),
        f"your slopes are 1/2, 1/4, 1/8, ...: right for 8 heads only. They depend on H: {_SLOPES}.",
    ),
    Mistake(
        "BLOOM's form m·j",
        lambda H, L, S: _alibi(H, L, S, bloom=True),
        "yours is m_h · j (BLOOM's form). It differs from -m_h · (i - j) by m_h · i, the same for "
        "every key of a row, which the softmax ignores; but the exercise asks for the bias itself, "
        "0 on the diagonal: -m_h · (i - j).",
    ),
]


def _alibi_cases():
    yield "8 heads, L = S = 5", 8, 5, 5
    yield "4 heads, L = S = 6", 4, 6, 6
    yield "16 heads, L = S = 3", 16, 3, 3
    yield "2 heads, 3 queries and 7 keys (query i at position i)", 2, 3, 7
    yield "1 head, L = S = 4", 1, 4, 4


def _causal_part(bias: torch.Tensor) -> torch.Tensor:
    """The entries a causal mask keeps (key j <= query i); the others set to 0."""
    L, S = bias.shape[-2:]
    return bias.masked_fill(~torch.ones(L, S, dtype=torch.bool).tril(), 0.0)


@checker(
    "alibi_bias",
    "Replace `raise NotImplementedError` with the slopes and the bias -m_h · (i - j).",
    own_work={
        "the course's alibi_bias (mha_course)": alibi.alibi_bias,
        "the course's alibi_slopes (mha_course)": alibi.alibi_slopes,
        "the course's reference (mha_course.reference)": reference.alibi_bias,
    },
)
def check_alibi_bias(candidate) -> int:
    """Check ``candidate(num_heads, L, S)`` -> float (num_heads, L, S) = -m_h · (i - j) where the
    causal mask keeps it (key j <= query i; the other entries may hold anything)."""
    mistakes = [
        Mistake(m.name, lambda *a, run=m.run: _causal_part(run(*a)), m.explanation)
        for m in _ALIBI_MISTAKES
    ]
    n = 0
    for case, *args in _alibi_cases():
        got = call_diagnosed(
            candidate,
            case,
            args,
            _ALIBI_MISTAKES,
            "the slopes are (H,) and the distances i - j (L, S); (H, 1, 1) times (L, S) "
            "broadcasts to (H, L, S).",
        )
        H, L, S = args
        if isinstance(got, torch.Tensor) and not got.is_floating_point():
            raise ExerciseFailure(
                f"Case {case!r}: your bias has dtype {got.dtype}; it is added to float scores and "
                "holds fractions (the slopes): make it float."
            )
        expected = reference.alibi_bias(*args)
        if isinstance(got, torch.Tensor) and got.shape == expected.shape:
            got = _causal_part(got.detach().to(expected.dtype))
        require_tensor(
            case,
            "the biases (where key j <= query i)",
            got,
            _causal_part(expected),
            mistakes,
            args,
            shape_hint="one bias per head, query and key: (num_heads, L, S).",
            fallback_cause=f"bias[h, i, j] = -m_h · (i - j), {_SLOPES}.",
        )
        n += 1
    return n
