"""Lesson 06's exercises: what attention costs (FLOPs, bytes moved, unfused and fused), and
attention one block of keys at a time with the online softmax. Both references are written here."""

from __future__ import annotations

import math
from dataclasses import replace
from functools import partial
from operator import itemgetter

import torch

from . import families
from ._core import Mistake, exercise
from ._failure import ExerciseFailure
from ._table import Case, Out, Table, builds, call_diagnosed, pair, run, seeded_randn
from .l01_attention import ATTENTION_ROUTINES, accepts


def _bytes(B, H, L, S, D, dtype, passes=0, *, out=1, keys=None):
    """Bytes moved: q, k, v (``keys`` of them), ``out`` outputs, ``passes`` over (B, H, L, S)."""
    return B * H * ((1 + out) * L * D + 2 * (keys or S) * D + passes * L * S) * dtype.itemsize


def attention_cost(B: int, H: int, L: int, S: int, D: int, dtype: torch.dtype) -> dict[str, int]:
    """The reference: what softmax(Q Kᵀ/√d_k) V costs. ``flops``: two matmuls of 2·B·H·L·S·D;
    ``score_bytes``: one (B, H, L, S) tensor; ``fused_bytes``: q, k, v read, the output written;
    ``unfused_bytes``: that, plus the scores and weights each written and read back."""
    return {
        "flops": 4 * B * H * L * S * D,
        "score_bytes": B * H * L * S * dtype.itemsize,
        "unfused_bytes": _bytes(B, H, L, S, D, dtype, 4),
        "fused_bytes": _bytes(B, H, L, S, D, dtype),
    }


# "entry: mistake" -> the entry counted on other sizes ({"S": "L"}: L in S's place), or count(c, s)
_COUNTED_WRONG = {
    "flops: half": lambda c, s: c["flops"] // 2,
    "flops: one matmul's multiply-adds": lambda c, s: c["flops"] // 4,
    "flops: no H": {"H": 1},
    "flops: L·L": {"S": "L"},
    "flops: S·S": {"L": "S"},
    "score_bytes: bits": lambda c, s: 8 * c["score_bytes"],
    "score_bytes: 4 bytes": {"dtype": torch.float32},
    "score_bytes: elements": {"dtype": torch.uint8},
    "score_bytes: no H": {"H": 1},
    "score_bytes: L·L": {"S": "L"},
    "score_bytes: S·S": {"L": "S"},
    "fused_bytes: no output": lambda c, s: _bytes(**s, out=0),
    "fused_bytes: k and v of length L": {"S": "L"},
    "fused_bytes: elements": {"dtype": torch.uint8},
    "fused_bytes: the scores counted": lambda c, s: _bytes(**s, passes=1),
    "fused_bytes: every score tensor counted": lambda c, s: c["unfused_bytes"],
    "fused_bytes: no H": {"H": 1},
    "unfused_bytes: the score tensors only": lambda c, s: 4 * c["score_bytes"],
    "unfused_bytes: scores and weights never read": lambda c, s: _bytes(**s, passes=2),
    "unfused_bytes: one score tensor": lambda c, s: _bytes(**s, passes=1),
    "unfused_bytes: three passes": lambda c, s: _bytes(**s, passes=3),
    "unfused_bytes: six passes": lambda c, s: _bytes(**s, passes=6),
    "unfused_bytes: the same as fused": lambda c, s: c["fused_bytes"],
    "unfused_bytes: elements": {"dtype": torch.uint8},
    "unfused_bytes: k and v of length L": lambda c, s: _bytes(**s, passes=4, keys=s["L"]),
}
_PASSES = "the scores and the weights are each written by one operation and read back by the next."
_WHY = {
    "half": "you counted half: one of the two matmuls, or a multiply-add as 1 FLOP, not 2.",
    "one matmul's multiply-adds": "you counted one matmul's multiply-adds: a multiply-add is 2 "
    "FLOPs, and there are two matmuls.",
    "no H": "the heads are missing: each of the H heads has its own scores, q, k, v and output.",
    "L·L": "you used L·L: there is one score per query and key, L·S (in cross-attention S "
    "differs from L).",
    "S·S": "you used S·S: there is one score per query and key, L·S.",
    "bits": "you counted bits; a byte is 8 bits.",
    "4 bytes": "you used 4 bytes per number whatever the dtype: it is dtype.itemsize.",
    "elements": "you counted numbers, not bytes: each number takes dtype.itemsize bytes.",
    "no output": "you counted what the fused kernel reads but not what it writes, the output.",
    "k and v of length L": "k and v hold S keys, (B, H, S, D), not L: in cross-attention S "
    "differs from L.",
    "the scores counted": "you counted a (B, H, L, S) tensor in the fused kernel's traffic. Its "
    "tiles of scores stay in fast memory.",
    "every score tensor counted": "your fused count has the passes over the scores and weights: "
    "that is the unfused version.",
    "the score tensors only": "you counted the passes over the (B, H, L, S) tensors only, not q, "
    "k, v and the output.",
    "scores and weights never read": f"you counted the scores and weights once each; {_PASSES}",
    "one score tensor": f"you counted one pass over a (B, H, L, S) tensor; {_PASSES}",
    "three passes": f"you counted three passes; there are four: {_PASSES}",
    "six passes": "you counted the scale as an operation of its own: six passes, not four.",
    "the same as fused": "your unfused count is the fused one; the unfused version also writes "
    "the scores and the weights to main memory and reads them back.",
}


def _counted_wrong(flaw: str, B, H, L, S, D, dtype):
    """``attention_cost`` with one entry counted wrong (a key of :data:`_COUNTED_WRONG`)."""
    s = dict(B=B, H=H, L=L, S=S, D=D, dtype=dtype)
    key, change, c = flaw.split(": ")[0], _COUNTED_WRONG[flaw], attention_cost(**s)
    if callable(change):
        return {**c, key: change(c, s)}
    return {**c, key: attention_cost(**{**s, **{k: s.get(v, v) for k, v in change.items()}})[key]}


def _extra_work(got, case: Case) -> str | None:
    """FLOPs over the matmuls' by a whole number of operations per score: the scale, the softmax."""
    B, H, L, S, D, _ = case.args
    extra = got - 4 * B * H * L * S * D if type(got) is int else 0
    if extra <= 0 or extra % (B * H * L * S):
        return None
    return (
        f"you also counted {extra // (B * H * L * S)} operation(s) per score (the scale, the "
        "softmax): those are O(B·H·L·S), small next to the matmuls, and left out."
    )


def _a_dict(case: Case, got, expected) -> None:
    keys = ", ".join(map(repr, expected))
    if not isinstance(got, dict):
        raise ExerciseFailure(
            f"Case {case.name!r}: your result should be a dict with the keys {keys}; got "
            f"{type(got).__name__}."
        )
    if missing := [key for key in expected if key not in got]:
        raise ExerciseFailure(
            f"Case {case.name!r}: your dict has no {', '.join(map(repr, missing))} (it has "
            f"{', '.join(map(repr, got)) or 'nothing'}).\nLikely cause: the keys are exactly {keys}."
        )


_FLOPS = "each matmul is 2·B·H·L·S·D: B·H·L·S·D multiply-adds, of 2 FLOPs each."
_BYTES = {
    "score_bytes": "one number per sequence, head, query and key, each dtype.itemsize bytes.",
    "fused_bytes": "a fused kernel reads q (B, H, L, D), k and v (B, H, S, D), and writes the "
    "output (B, H, L, D), each number dtype.itemsize bytes.",
    "unfused_bytes": "the unfused version moves what the fused kernel moves, plus the scores and "
    "the weights, each written and read back.",
}
_COST_CASES = [  # the first has sizes no two mistakes confuse
    ("float16, cross-attention: B=2, H=3, L=5, S=7, D=11", 2, 3, 5, 7, 11, torch.float16),
    ("float32, self-attention: B=1, H=8, L=S=128, D=16", 1, 8, 128, 128, 16, torch.float32),
    ("bfloat16: B=3, H=4, L=10, S=20, D=8", 3, 4, 10, 20, 8, torch.bfloat16),
    ("float64: B=2, H=2, L=7, S=5, D=3", 2, 2, 7, 5, 3, torch.float64),
    ("the docstring's example: B=H=1, L=S=4, D=2, float32", 1, 1, 4, 4, 2, torch.float32),
]
COST = Table(
    cases=lambda: (Case(name, tuple(sizes)) for name, *sizes in _COST_CASES),
    reference=attention_cost,
    mistakes=[
        Mistake(f, partial(_counted_wrong, f), _WHY[f.split(": ")[1]]) for f in _COUNTED_WRONG
    ],
    shape_checks=[_a_dict],
    outputs=[
        Out('the FLOPs ("flops")', itemgetter("flops"), cause=_extra_work, fallback=_FLOPS),
        *(Out(f'the bytes ("{k}")', itemgetter(k), fallback=why) for k, why in _BYTES.items()),
    ],
    crash="the sizes are ints and dtype a torch.dtype such as torch.float16; its bytes per number "
    "are dtype.itemsize.",
)
todo = "Replace `raise NotImplementedError` with the four counts of attention's cost."
check_attention_cost = exercise(
    "attention_cost", "06", reference=attention_cost, todo=todo, table=COST
)


def _blocked(flaw: str, j: int, width: int, L: int, device) -> torch.Tensor:
    """(L, width): the keys of the block from key j on that the causal mask blocks."""
    key = torch.arange(width, device=device) + (0 if flaw == "causal block positions" else j)
    query = torch.arange(L, device=device)[:, None]
    future = {"causal upper triangle": key < query, "causal strict future": key <= query}
    return {**future, "causal without the diagonal": key >= query}.get(flaw, key > query)


_NO_DIVISION = ("each block normalised", "blocks averaged", "not divided", "divided early")


def _blocks(q, k, v, block_size, is_causal=False, return_lse=False, flaw=""):
    """The online softmax, with one classic ``flaw`` switched on: a running max m, a running sum
    ℓ of e^(s − m) and output o, both rescaled by e^(m − m_new) when the max rises."""
    m = q.new_full((*q.shape[:-1], 1), -math.inf)
    total = torch.zeros_like(m)
    o = q.new_zeros((*q.shape[:-1], v.size(-1)))
    scale = 1.0 if flaw == "no scale" else q.size(-1) ** -0.5
    n_blocks = math.ceil(k.size(-2) / block_size)
    for j in range(0, k.size(-2), block_size):
        s = q @ k[..., j : j + block_size, :].transpose(-2, -1) * scale
        v_j = v[..., j : j + block_size, :]
        if flaw in ("each block normalised", "blocks averaged"):
            o = o + torch.softmax(s, dim=-1) @ v_j / (n_blocks if flaw == "blocks averaged" else 1)
            continue
        causal = is_causal and flaw != "causal ignored"
        blocked = _blocked(flaw, j, s.size(-1), s.size(-2), q.device) if causal else None
        if causal and flaw != "causal after exp":
            s = s.masked_fill(blocked, 0.0 if flaw == "mask filled with 0" else -math.inf)
        m_new = s.amax(dim=-1, keepdim=True)
        m_new = m_new if flaw == "block max" else torch.maximum(m, m_new)
        m_new = torch.zeros_like(m_new) if flaw == "max not subtracted" else m_new
        rescale, p = torch.exp(m - m_new), torch.exp(s - m_new)
        if flaw == "causal after exp":
            p = p.masked_fill(blocked, 0.0)
        kept = 0.0 if flaw == "last block only" else rescale
        total = total * (1.0 if flaw in ("sum not rescaled", "nothing rescaled") else kept)
        o = o * (1.0 if flaw in ("output not rescaled", "nothing rescaled") else kept)
        total, o, m = total + p.sum(dim=-1, keepdim=True), o + p @ v_j, m_new
        o = o / total if flaw == "divided early" else o
    out = o if flaw in _NO_DIVISION else o / total
    if not return_lse:
        return out
    lse = {"lse: log of the sum": total.log(), "lse: the max": m, "lse: no log": m + total}
    return out, lse.get(flaw, m + total.log()).squeeze(-1)


def attention_in_blocks(q, k, v, block_size, is_causal=False, return_lse=False):
    """The reference: softmax(q kᵀ/√d_k) v, the keys read ``block_size`` at a time: q (..., L, D),
    k (..., S, D), v (..., S, Dv) -> (..., L, Dv). ``is_causal``: query i sees keys 0..i, each
    block masked from positions. ``return_lse``: also each query's log-sum-exp (..., L)."""
    return _blocks(q, k, v, block_size, is_causal, return_lse)


_RESCALE = "the running {} must be rescaled too, by e^(m − m_new) when the max rises, before "
_EACH_BLOCK = "you normalised each block on its own; the sum to divide by covers *all* keys."
_BLOCK_FLAWS = {  # the causal ones first: on a case without the flag they change nothing
    "causal ignored": "the causal flag is ignored: every query attended to every key.",
    "causal block positions": "the mask is right in the first block only: a key's position is "
    "the block's start j plus its index inside the block.",
    "causal upper triangle": families.CAUSAL["causal upper triangle"],
    "causal strict future": "the causal mask is inverted: query i attended to the keys after it.",
    "causal without the diagonal": families.CAUSAL["causal without the diagonal"],
    "mask filled with 0": families.MASK["mask filled with 0"],
    "causal after exp": "NaN: the mask was applied after the exp, so the running max includes "
    "scores of keys the query may not see: its own exponentials underflow to 0, and ℓ = 0.",
    "sum not rescaled": _RESCALE.format("sum ℓ") + "the new block's sum is added.",
    "output not rescaled": _RESCALE.format("output o") + "the new block's values are added.",
    "nothing rescaled": "nothing is rescaled: when the max rises, ℓ and o both take e^(m − m_new).",
    "block max": "m must be the running max over all the blocks so far, not this block's own.",
    "max not subtracted": "exp overflowed: the running max is not subtracted before each exp.",
    "divided early": "you divided by the running sum inside the loop, before every block is in.",
    "each block normalised": _EACH_BLOCK,
    "blocks averaged": _EACH_BLOCK,
    "last block only": "the result covers the last block of keys only: ℓ and o are overwritten.",
    "not divided": "o is the unnormalised sum Σ e^(s − m) v; the softmax needs one division by "
    "the running sum ℓ, after the loop.",
    "lse: log of the sum": "your log-sum-exp is log ℓ alone; log Σ e^s is m + log ℓ.",
    "lse: the max": "your log-sum-exp is the running max m alone; log Σ e^s = m + log ℓ.",
    "lse: no log": "your log-sum-exp is m + ℓ; it is m + log ℓ (ℓ sums e^(s − m)).",
    "no scale": families.ATTENTION["no scale"],
}


def _block_cases():
    randn = seeded_randn(6, dtype=torch.float64)
    for name, batch, (L, S, Dv, b) in [
        ("one head: q (5, 8), k (12, 8), v (12, 6), block_size 4", (), (5, 12, 6, 4)),
        ("batch and heads (2, 3): L 5, S 12, block_size 5", (2, 3), (5, 12, 8, 5)),
        ("block_size 1: one key at a time", (2,), (4, 7, 3, 1)),
        ("block_size 16 >= S = 12: a single block", (), (5, 12, 6, 16)),
    ]:
        yield Case(name, (randn(*batch, L, 8), randn(*batch, S, 8), randn(*batch, S, Dv), b))
    w = randn(8)  # every query points along w, the keys ever more: the max rises at every block
    q = 3 * w / w.norm() + 0.3 * randn(4, 8)
    k = torch.linspace(0.2, 3.0, 12, dtype=torch.float64)[:, None] * w + 0.3 * randn(12, 8)
    yield Case("the max rises at every block: L 4, S 12, block_size 3", (q, k, randn(12, 6), 3))
    name = "huge scores (about ±1000; exp overflows above ~710 in float64): q × 300, block_size 4"
    yield Case(name, (300 * randn(2, 5, 8), randn(2, 12, 8), randn(2, 12, 6), 4))
    # keys along w: the scores fall from about 1000 in the first block to 0..200 in the second
    c = torch.cat([torch.linspace(1200, 1000, 4), torch.linspace(200, 0, 4)]).double()
    k = c[:, None] * w * math.sqrt(8) / (q @ w).mean() + 0.3 * randn(8, 8)
    yield Case("huge scores that fall: 1000..1200, then 0..200", (q, k, randn(8, 6), 4))
    g = torch.Generator().manual_seed(7)
    q, k, v = (torch.randn(2, L, 8, generator=g, dtype=torch.float64) for L in (5, 12, 12))
    yield Case("memory: q (2, 5, 8), k and v (2, 12, 8), block_size 4", (q, k, v, 4))
    causal, randn = {"is_causal": True}, seeded_randn(16, dtype=torch.float64)
    for name, batch, (L, D, Dv, b) in [
        ("is_causal on: q, k, v (10, 8), block_size 4", (), (10, 8, 8, 4)),
        ("is_causal on, batch and heads (2, 3): L 9, block_size 3", (2, 3), (9, 8, 8, 3)),
        ("is_causal on, block_size 1: q, k (2, 6, 4), v (2, 6, 3)", (2,), (6, 4, 3, 1)),
    ]:
        args = (randn(*batch, L, D), randn(*batch, L, D), randn(*batch, L, Dv), b)
        yield Case(name, args, causal)
    w = randn(8)  # the scores rise along the keys, to about 1000: the later keys score far higher
    q = w / w.norm() + 0.01 * randn(8, 8)
    k = torch.linspace(0, 1000, 8, dtype=torch.float64)[:, None] * (w / w.norm()) * math.sqrt(8)
    args = (q, k + 0.01 * randn(8, 8), randn(8, 5), 4)
    yield Case("is_causal on, the later keys score up to 1000: block_size 4", args, causal)
    q, k, v = (torch.randn(2, 12, 8, generator=g, dtype=torch.float64) for _ in range(3))
    yield Case("is_causal on, memory: q, k, v (2, 12, 8), block_size 4", (q, k, v, 4), causal)
    randn = seeded_randn(26, dtype=torch.float64)
    for name, (L, S, b), times, flags in [
        ("return_lse on: q (2, 5, 8), k, v (2, 12, 8), block_size 4", (5, 12, 4), 1, {}),
        ("return_lse on, huge scores (q × 300), block_size 5", (5, 12, 5), 300, {}),
        ("return_lse on, is_causal on: L = S = 10, block_size 3", (10, 10, 3), 1, causal),
    ]:
        args = (randn(2, L, 8) * times, randn(2, S, 8), randn(2, S, 8), b)
        yield Case(name, args, {"return_lse": True, **flags})


_FULL_SCORES = "the scores of all the keys at once; a block of keys at a time needs its own only."
_FULL_MASK = "the whole (L, S) causal mask is built; each block's comes from its positions."
_OVERFLOW = "inf or NaN in the output: an exp overflowed, the running max not subtracted first."
_CRASH = (
    "a shape mix-up. m and ℓ are (..., L, 1), o (..., L, Dv); a block is block_size keys and "
    "values from position j on, its scores are (..., L, block). The last block may be shorter."
)


def _call(candidate, case: Case, table: Table):
    """The answer on the case; in a memory case, first: does it build the (L, S) tensor?"""
    L, S = case.args[0].size(-2), case.args[1].size(-2)
    memory = "memory" in case.name
    if memory and builds(candidate, case.name, case.args, (L, S), table.crash, **case.kwargs):
        why = _FULL_MASK if case.kwargs.get("is_causal") else _FULL_SCORES
        raise ExerciseFailure(
            f"Case {case.name!r}: your function builds a tensor of shape (..., L, S) = "
            f"(..., {L}, {S}).\nLikely cause: {why}"
        )
    return call_diagnosed(candidate, case, table.mistakes_for(case), table.crash)


def _pair_when_asked(case: Case, got, expected) -> None:
    if case.kwargs.get("return_lse"):
        pair("output", "lse")(case, got, expected)
    elif isinstance(got, (tuple, list)):
        raise ExerciseFailure(
            f"Case {case.name!r}: your result is a {type(got).__name__}, expected the output "
            "tensor.\nLikely cause: the pair (output, lse) comes only when return_lse is True."
        )


def _lse_shape(got, case: Case) -> str:
    if tuple(got.shape) == (*case.args[0].shape[:-1], 1):
        return "one lse per query, (..., L), without the trailing axis of size 1 of m and ℓ."
    return "one number per query: (..., L)."


BLOCKS = Table(
    cases=_block_cases,
    reference=attention_in_blocks,
    mistakes=families.flawed(_blocks, _BLOCK_FLAWS, **_BLOCK_FLAWS),
    call=_call,
    crash=_CRASH,
    shape_checks=[_pair_when_asked],
    outputs=[
        Out(
            "the outputs",
            lambda r: r[0] if isinstance(r, tuple) else r,
            shape_hint="the output is (..., L, Dv): one row per query, the size of the values.",
            cause=lambda got, case: None if torch.isfinite(got).all() else _OVERFLOW,
        ),
        Out("the log-sum-exps", lambda r: r[1] if isinstance(r, tuple) else None, _lse_shape),
    ],
    atol=1e-6,
    rtol=1e-6,
)


_REFERENCE = "the course's reference (mha_course.reference)"


@exercise(
    "attention_in_blocks",
    "06",
    reference=attention_in_blocks,
    todo="Replace `raise NotImplementedError` with the online softmax over blocks of keys.",
    points=3,
    own_work={**ATTENTION_ROUTINES, _REFERENCE: attention_in_blocks},
)
def check_attention_in_blocks(candidate) -> int:
    """Check ``candidate(q, k, v, block_size) -> (..., L, Dv)`` on the cases of :data:`BLOCKS`,
    with ``is_causal=True`` and ``return_lse=True`` too where its signature takes them."""
    flags = {name for name in ("is_causal", "return_lse") if accepts(candidate, name)}
    cases = [case for case in _block_cases() if set(case.kwargs) <= flags]
    return run(candidate, replace(BLOCKS, cases=lambda: cases), "attention_in_blocks")


check_attention_in_blocks.table = BLOCKS
