"""Lesson 08's attention of today's models: RoPE (``rotary``, and inside causal attention over a
cache, ``rope_attention``), ALiBi's bias, grouped-query and sliding-window attention."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .. import alibi, attention, masks, modern
from ..rope import RotaryEmbedding, rotate_half
from . import families
from ._core import exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, builds, call_diagnosed, pair, seeded_randn

# ---------------------------------------------------------------- rotary


def rotary(x, positions, base=10000.0, interleaved=False):
    """RoPE: pair i of token t turned by positions[t] · base^(-2i/D); pair i is features i and
    i + D/2, or 2i and 2i + 1 if ``interleaved`` (rotate half on features 0, 2, .., 1, 3, ..)."""
    rope = RotaryEmbedding(x.size(-1), base).to(x.device)
    if not interleaved:
        return rope(x, positions)
    order = torch.arange(x.size(-1), device=x.device).view(-1, 2).T.flatten()  # 0, 2, .., 1, 3, ..
    return rope(x[..., order], positions)[..., order.argsort()]


def _rope(x, positions, base=10000.0, interleaved=False, flaw=""):
    D, i = x.size(-1), torch.arange(x.size(-1) // 2, dtype=torch.float64)
    exponent = {"exponent i/D": -i / D, "exponent 2i/D, positive": 2 * i / D}.get(flaw, -2 * i / D)
    p = torch.arange(x.size(-2)) if flaw == "positions ignored" else positions
    angles = p.double()[:, None] * base**exponent * (-1 if flaw == "rotated the other way" else 1)
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    cos, sin = (sin, cos) if flaw == "cos and sin swapped" else (cos, sin)
    pairs = {"neighbours": True, "halves": False}.get(flaw, interleaved)
    x1, x2 = (x[..., 0::2], x[..., 1::2]) if pairs else x.chunk(2, dim=-1)
    y = (x1 * cos - x2 * sin, x2 * cos + x1 * sin)
    in_place = pairs and flaw != "put back"
    return torch.stack(y, dim=-1).flatten(-2) if in_place else torch.cat(y, dim=-1)


_ROTARY_TEXTS = {
    "neighbours": "you paired neighbouring features (2i, 2i + 1); by default i pairs with i + D/2.",
    "halves": "your rotation ignores `interleaved`: if true, pair i is features 2i and 2i + 1.",
    "put back": "the pairs are right, but their rotated values are written back as two halves.",
    "positions ignored": "your rotation ignores `positions` and numbers the tokens 0, 1, 2, ...",
    "exponent i/D": "your frequencies are base^(-i/D); pair i turns by θ_i = base^(-2i/D).",
    "exponent 2i/D, positive": "your frequencies grow with i (base^(+2i/D)); θ_i = base^(-2i/D).",
    "rotated the other way": "you turned each pair by -p·θ_i (clockwise), not +p·θ_i.",
    "cos and sin swapped": "cos and sin are swapped: at position 0 the rotation leaves x as it is.",
}
_SIGNATURE = "the skeleton's rotary takes an `interleaved` argument (false by default): keep it."
_SHAPES = "x is (..., L, D): the angles are (L, D/2), one per token and pair, like x's pairs."
_X_SHAPE = "the result has x's shape: each feature is replaced by its rotated one."
_ROTATED = "check the pairs (i and i + D/2; 2i and 2i + 1 when interleaved) and the angle p·θ_i."


def _rotary_cases():
    randn, p = seeded_randn(8, dtype=torch.float64), torch.tensor
    for flag in ({}, {"interleaved": True}):
        for name, *args in [
            ("one token, D = 4, position 1", p([[1.0, 2.0, 3.0, 4.0]]), p([1])),
            ("7 cached: (2, 3, 5, 8), positions 7..11", randn(2, 3, 5, 8), torch.arange(7, 12)),
            ("float32, D = 6: (3, 6), positions 2, 5, 9", randn(3, 6).float(), p([2, 5, 9])),
        ]:
            yield Case("interleaved, " * bool(flag) + name, tuple(args), flag)
    llama = (randn(2, 4, 16), p([0, 3, 10, 100]), 5e5)
    yield Case("positions 0, 3, 10, 100 and Llama 3's base 500000: (2, 4, 16)", llama)


def _same_dtype(case: Case, got, expected) -> None:
    x = case.args[0]
    if isinstance(got, torch.Tensor) and got.shape == expected.shape and got.dtype != x.dtype:
        raise ExerciseFailure(
            f"Case {case.name!r}: your result is {got.dtype}, expected {x.dtype}, the dtype of x."
            "\nLikely cause: cos and sin are brought back to x's dtype before they meet x."
        )


check_rotary = exercise(
    "rotary",
    "08",
    reference=rotary,
    todo="Replace `raise NotImplementedError` with the rotation of each pair of features.",
    own_work={
        "the course's RotaryEmbedding (mha_course)": RotaryEmbedding,
        "the course's rotate_half (mha_course.rope)": rotate_half,
        "the course's reference (mha_course.reference)": rotary,
    },
    table=Table(
        cases=_rotary_cases,
        reference=rotary,
        double=False,
        mistakes=families.flawed(_rope, _ROTARY_TEXTS, **_ROTARY_TEXTS),
        shape_checks=[_same_dtype],
        outputs=[Out("the rotated features", shape_hint=_X_SHAPE, fallback=_ROTATED)],
        crash=lambda error, case: _SIGNATURE if "interleaved" in str(error) else _SHAPES,
    ),
)

# ---------------------------------------------------------------- rope_attention


def rope_attention(q, k, v, positions, rotate):
    """Causal attention, q (B, H, L, D) the last L of the S tokens of k, v (B, H, S, D), q and k
    turned by ``rotate(x, positions)`` (positions (S,)): the output (B, H, L, D)."""
    L, S = q.size(-2), k.size(-2)
    q, k = rotate(q, positions[S - L :]), rotate(k, positions)
    mask = masks.causal_mask(L, S, q.device, offset=S - L)
    return attention.scaled_dot_product_attention(q, k, v, attn_mask=mask)[0]


def _rope_attention(q, k, v, positions, rotate, flaw=""):
    L, S = q.size(-2), k.size(-2)
    at = positions[:L] if flaw == "queries at the first positions" else positions[S - L :]
    q = q if flaw == "queries not rotated" else rotate(q, at)
    k = k if flaw == "keys not rotated" else rotate(k, positions)
    v = rotate(v, positions) if flaw == "values rotated" else v
    return families.attention(q, k, v, families.causal(L, S, flaw, offset=S - L), flaw)[0]


_ROPE_TEXTS = {
    "values rotated": "you rotated the values too; RoPE turns only queries and keys.",
    "queries at the first positions": "the queries are rotated as the first tokens, not the last.",
    "keys not rotated": "only the queries are rotated; the keys turn too, each by its position.",
    "queries not rotated": "only the keys are rotated; the queries turn too, by their positions.",
    "causal top-left": families.CAUSAL["causal top-left"],
    "mask ignored": "there is no causal mask: a query must not see the keys after its own token.",
    "off-by-one diagonal": families.CAUSAL["off-by-one diagonal"],
}
_LIKE_Q = "the output has one row per query, like q: (B, H, L, D)."
_ROPE = "q and k (not v) turn by their own positions, then causal attention with the scale 1/√D."


def _rope_attention_cases():
    randn = seeded_randn(18, dtype=torch.float64)
    for name, (B, H, L, S), first in [
        ("no cache: q, k, v (2, 2, 6, 8), positions 0..5", (2, 2, 6, 6), 0),
        ("3 new tokens after 6 cached: q (1, 2, 3, 8), k, v (1, 2, 9, 8)", (1, 2, 3, 9), 0),
        ("one new token after 6 cached: q (2, 3, 1, 8), k, v (2, 3, 7, 8)", (2, 3, 1, 7), 0),
        ("positions 20..27 (begun earlier): q (1, 1, 4, 8), k, v (1, 1, 8, 8)", (1, 1, 4, 8), 20),
    ]:
        qkv = randn(B, H, L, 8), randn(B, H, S, 8), randn(B, H, S, 8)
        yield Case(name, (*qkv, torch.arange(first, first + S), rotary))


check_rope_attention = exercise(
    "rope_attention",
    "08",
    reference=rope_attention,
    todo="Replace `raise NotImplementedError` with causal attention over rotated queries and keys.",
    table=Table(
        cases=_rope_attention_cases,
        reference=rope_attention,
        mistakes=families.flawed(_rope_attention, _ROPE_TEXTS, **_ROPE_TEXTS),
        outputs=[Out("the outputs", shape_hint=_LIKE_Q, fallback=_ROPE)],
        crash="q is (B, H, L, D) and k, v (B, H, S, D): q turns by the positions of its L "
        "tokens and k by all S; the causal mask is (L, S).",
    ),
)

# ---------------------------------------------------------------- alibi_bias


def alibi_bias(num_heads, L, S):
    """ALiBi's bias (num_heads, L, S) for the last L of S tokens; the paper's slopes, any H."""
    return alibi.alibi_bias(num_heads, L, S, offset=S - L)


def _geometric(n, flaw=""):
    h = torch.arange(n, dtype=torch.float64)
    exponent = {"exponent h instead of h + 1": 8 * h / n, "the 8 missing": (h + 1) / n}
    return 2.0 ** -exponent.get(flaw, 8 * (h + 1) / n)


def _alibi(H, L, S, flaw=""):
    P = H if flaw == "one sequence for any H" else 1 << (H.bit_length() - 1)
    extra = {"in a row": slice(None), "repeated": slice(1, None, 2)}
    between = _geometric(2 * P, flaw)[extra.get(flaw, slice(0, None, 2))]  # 2P's, between P's
    m = torch.cat((_geometric(P, flaw), between))
    m = 2.0 ** -torch.arange(1.0, H + 1) if flaw == "eight heads' slopes" else m[:H]
    m = m.flip(0) if flaw == "slopes reversed" else m
    i = torch.arange(L)[:, None] + (0 if flaw == "queries first" else S - L)
    j = torch.arange(S)
    distance = {"wrong sign": i - j, "BLOOM's form m·j": j.expand(L, S)}.get(flaw, j - i)
    return m[:, None, None] * distance


def _causal_part(bias):
    """The entries a causal mask keeps (key j at or before query i, the last L of S); others 0."""
    if not (isinstance(bias, torch.Tensor) and bias.is_floating_point() and bias.dim() == 3):
        return bias
    L, S = bias.shape[-2:]
    return bias.masked_fill(~families.causal(L, S, device=bias.device, offset=S - L), 0.0)


def _float(case: Case, got, expected) -> None:
    if isinstance(got, torch.Tensor) and not got.is_floating_point():
        raise ExerciseFailure(
            f"Case {case.name!r}: your bias has dtype {got.dtype}; it is added to float scores "
            "and holds fractions (the slopes): make it float."
        )


_RULE = "the slopes of the largest power of two P <= H, then every other slope of 2P's"
_SLOPES = f"H a power of two: 2^(-8/H), its square, its cube, ...; any other H: {_RULE}"
_ALIBI_TEXTS = {
    "slopes reversed": f"your slopes are in reverse order: head 0 has the steepest ({_SLOPES}).",
    "wrong sign": "the bias has the wrong sign: a key further back gets a *lower* score.",
    "exponent h instead of h + 1": "your first slope is 1 (2^0); the sequence starts at 2^(-8/H).",
    "the 8 missing": "your slopes are 2^(-(h+1)/H): the exponent lacks a factor 8 (1/2 .. 1/256).",
    "eight heads' slopes": f"your slopes 1/2, 1/4, 1/8, ... are right for 8 heads only; {_SLOPES}.",
    "one sequence for any H": "your slopes are 2^(-8(h+1)/H) for an H that is not a power of "
    f"two; the paper's rule for such an H: {_RULE}.",
    "in a row": "the heads after the first P take 2P's slopes in a row, not every other one.",
    "repeated": "the heads after the first P repeat slopes that P's heads already have.",
    "queries first": "your queries sit at positions 0 .. L - 1, not the last L of the S tokens.",
    "BLOOM's form m·j": "yours is m_h · j (BLOOM's form), off from -m_h · (i - j) by m_h · i in "
    "each row; the exercise asks for the bias itself.",
}
_BIASES = {
    "shape_hint": "one bias per head, query and key: (num_heads, L, S).",
    "fallback": f"bias[h, i, j] = -m_h · (how far key j is behind query i); {_SLOPES}.",
}
_ALIBI_CASES = [(8, 5, 5), (4, 6, 6), (16, 3, 3), (1, 4, 4), (2, 3, 7), (8, 1, 9), (12, 4, 4)]
_ALIBI_CASES += [(6, 5, 5), (3, 2, 6)]  # H, L, S


def _alibi_cases():
    for H, L, S in _ALIBI_CASES:
        tokens = f"L = S = {L}" if L == S else f"the last {L} of {S} tokens"
        yield Case(f"H = {H}, {tokens}", (H, L, S))


check_alibi_bias = exercise(
    "alibi_bias",
    "08",
    reference=alibi_bias,
    todo="Replace `raise NotImplementedError` with the slopes and the bias -m_h · (i - j).",
    own_work={
        "the course's alibi_bias (mha_course)": alibi.alibi_bias,
        "the course's alibi_slopes (mha_course)": alibi.alibi_slopes,
    },
    table=Table(
        cases=_alibi_cases,
        reference=alibi_bias,
        mistakes=families.flawed(_alibi, _ALIBI_TEXTS, **_ALIBI_TEXTS),
        shape_checks=[_float],
        outputs=[Out("the biases (where key j is not after query i)", _causal_part, **_BIASES)],
        crash="the slopes are (H,) and the distances (L, S): a slope per head times a distance "
        "per query and key broadcasts to (H, L, S).",
    ),
)

# ---------------------------------------------------------------- grouped_query_attention


def grouped_query_attention(query, key, value, attn_mask=None):
    """query (B, H, L, D), key and value (B, H_kv, S, D|Dv): query head h reads key/value head
    h // (H / H_kv). ``(output (B, H, L, Dv), weights (B, H, L, S))``, mask True = may attend."""
    return attention.scaled_dot_product_attention(query, key, value, attn_mask, enable_gqa=True)


def _gqa(q, k, v, attn_mask=None, flaw=""):
    H, H_kv = q.size(-3), k.size(-3)
    index = {
        "repeat instead of repeat_interleave": torch.arange(H) % H_kv,
        "h // H_kv": (torch.arange(H) // H_kv).clamp(max=H_kv - 1),
    }.get(flaw, torch.arange(H) // (H // H_kv))
    k, v = k.index_select(-3, index), v.index_select(-3, index)
    return families.attention(q, k, v, attn_mask, flaw)


_INTERLEAVE = "query head h reads key/value head h // G, G = H / H_kv (as torch's enable_gqa)"
_EVERY_HEAD = "a row per query of every query head."
_READS = f"check which key/value head each query head reads: {_INTERLEAVE}."
_GQA_TEXTS = {
    "repeat instead of repeat_interleave": "your query heads read the key/value heads in turn, h "
    f"% H_kv; {_INTERLEAVE}.",
    "h // H_kv": f"your query head h reads key/value head h // H_kv; {_INTERLEAVE}.",
}
_GQA_FLAWS = [*_GQA_TEXTS, *families.ATTENTION, "mask ignored", "mask inverted"]
_GQA_FLAWS += ["mask filled with 0", "mask after the softmax"]


def _gqa_crash(got, case: Case) -> str:
    mask = case.kwargs.get("attn_mask")
    if mask is not None:
        mask = f" (the mask {tuple(mask.shape)} broadcast as it is against the scores (B, H, L, S))"
    return (
        "a shape mix-up. query is (B, H, L, D), key and value (B, H_kv, S, ·): each query head "
        f"gets its key/value head first, then attention{mask or ''}."
    )


def _gqa_cases():
    randn = seeded_randn(28)
    padding = torch.tensor([[True] * 6, [True] * 4 + [False] * 2]).view(2, 1, 1, 6)
    causal = families.causal(5, 5)
    for name, q, kv, Dv, mask in [
        ("GQA: query (2, 4, 5, 8), key and value (2, 2, 5, 8)", (2, 4, 5, 8), (2, 2, 5), 8, None),
        ("MQA: one key/value head for all, query (1, 4, 3, 8)", (1, 4, 3, 8), (1, 1, 6), 8, None),
        ("MHA: query, key and value (2, 3, 4, 8): H_kv = H", (2, 3, 4, 8), (2, 3, 4), 8, None),
        ("G = 2 with H_kv = 3, values of size 5", (1, 6, 4, 8), (1, 3, 7), 5, None),
        ("causal mask (5, 5): query (2, 8, 5, 4)", (2, 8, 5, 4), (2, 2, 5), 4, causal),
        ("padding mask (2, 1, 1, 6): sequence 2 padded", (2, 4, 3, 8), (2, 2, 6), 8, padding),
    ]:
        mask = {} if mask is None else {"attn_mask": mask}
        yield Case(name, (randn(*q), randn(*kv, q[-1]), randn(*kv, Dv)), mask)
    bad = (randn(1, 6, 3, 8), randn(1, 4, 3, 8), randn(1, 4, 3, 8))
    name = "6 query heads, 4 key/value heads: 6 is not a multiple of 4"
    why = "6 query heads cannot share 4 key/value heads equally: H must be a multiple of H_kv"
    yield Case(name, bad, raises=("multiple",), why=why)


check_grouped_query_attention = exercise(
    "grouped_query_attention",
    "08",
    reference=grouped_query_attention,
    todo="Replace `raise NotImplementedError` with attention over shared key/value heads.",
    own_work={
        "torch's scaled_dot_product_attention": F.scaled_dot_product_attention,
        "the course's scaled_dot_product_attention (mha_course)": attention.scaled_dot_product_attention,
    },
    table=Table(
        cases=_gqa_cases,
        reference=grouped_query_attention,
        mistakes=families.flawed(_gqa, _GQA_FLAWS, **_GQA_TEXTS),
        shape_checks=[pair("output", "weights")],
        outputs=[
            Out("the weights", 1, shape_hint="(B, H, L, S): " + _EVERY_HEAD),
            Out("the outputs", 0, shape_hint="(B, H, L, Dv): " + _EVERY_HEAD, fallback=_READS),
        ],
        crash=_gqa_crash,
    ),
)

# ---------------------------------------------------------------- sliding_window_attention


def _window(q, k, v, window, flaw=""):
    i, j = torch.arange(q.size(-2))[:, None], torch.arange(q.size(-2))
    reach = {"one key too many": window + 1, "one key too few": window - 1}.get(flaw, window)
    block = i // window
    allowed = {
        "not causal": (i - j).abs() < window,
        "window ignored": j <= i,
        "own block": (j <= i) & (block == j // window),
        "one key too many, in blocks": (j <= i) & (i - j <= window) & (j > (block - 1) * window),
        "no causal part inside the window": (i - j < window) & (j < (block + 1) * window),
    }.get(flaw, (j <= i) & (i - j < reach))
    return families.attention(q, k, v, allowed, flaw)[0]


_WINDOW = "query i sees keys i - window + 1 .. i: `window` keys, itself included"
_WINDOW_SCALE = f"check the window ({_WINDOW}) and the scale 1/√D."
_WINDOW_TEXTS = {
    "one key too many": f"your window holds window + 1 keys: {_WINDOW}.",
    "one key too many, in blocks": f"your mask lets a query see window + 1 keys: {_WINDOW}.",
    "one key too few": f"your window holds window - 1 keys: {_WINDOW}.",
    "not causal": f"your window looks ahead too; a decoder's is causal: {_WINDOW}.",
    "no causal part inside the window": "inside the window a query also sees the keys after it, "
    f"to the end of its block: {_WINDOW}.",
    "window ignored": f"your result is plain causal attention; the window limits it: {_WINDOW}.",
    "own block": "each block of queries attends only to the keys of its own block.",
    "no scale": families.ATTENTION["no scale"],
}


def _call_window(candidate, case: Case, table: Table):
    """The answer's output; in the memory case, first: does it build an (L, L) tensor?"""
    got, L = call_diagnosed(candidate, case, table.mistakes, table.crash), case.args[0].size(-2)
    if case.name.startswith("memory") and builds(candidate, case.name, case.args, (L, L), ""):
        raise ExerciseFailure(
            f"Case {case.name!r}: your function builds an (L, L) = ({L}, {L}) tensor.\nLikely "
            "cause: all the queries at once; the window needs only a block of them at a time."
        )
    return got


def _window_cases():
    randn = seeded_randn(38, dtype=torch.float64)
    for name, shape, Dv, window in [
        ("q, k, v (12, 8), window 4", (12, 8), 8, 4),
        ("batch and heads (2, 3, 16, 8), window 5 (16 is no multiple of 5)", (2, 3, 16, 8), 8, 5),
        ("window 1: each query sees only itself", (7, 4), 4, 1),
        ("window 20 >= L = 9: plain causal attention", (2, 9, 4), 4, 20),
        ("values of another size: v (10, 3), window 3", (10, 6), 3, 3),
        ("memory: q, k, v (2, 24, 8), window 4; no (24, 24) tensor", (2, 24, 8), 8, 4),
    ]:
        yield Case(name, (randn(*shape), randn(*shape), randn(*shape[:-1], Dv), window))


check_sliding_window_attention = exercise(
    "sliding_window_attention",
    "08",
    reference=modern.sliding_window_attention,
    todo="Replace `raise NotImplementedError` with attention over a window, a block at a time.",
    points=3,
    own_work={
        "the course's sliding_window_attention (mha_course.modern)": modern.sliding_window_attention,
        "the course's sliding_window_mask (mha_course.masks)": masks.sliding_window_mask,
    },
    table=Table(
        cases=_window_cases,
        reference=modern.sliding_window_attention,
        mistakes=families.flawed(_window, _WINDOW_TEXTS, **_WINDOW_TEXTS),
        call=_call_window,
        outputs=[Out("outputs", shape_hint="the output is (..., L, Dv).", fallback=_WINDOW_SCALE)],
        crash="a shape mix-up: a block's scores and mask are (..., its queries, the keys they "
        "reach). The last block may be shorter.",
        atol=1e-6,
        rtol=1e-6,
    ),
)
