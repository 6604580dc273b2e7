"""Checkers for lesson 06's counts: the cost model of attention (its FLOPs, one scores tensor, and
the bytes an unfused and a fused version move through main memory), and the two one-line counts
it grew from, the work of attention's two matmuls and the memory of one (B, H, L, S) tensor."""

from __future__ import annotations

import torch

from .. import reference
from ._core import Mistake, call_candidate, checker
from ._failure import ExerciseFailure
from ._steps import check_cases, require_count

__all__ = ["check_attention_cost", "check_attention_flops", "check_scores_memory"]


# ---------------------------------------------------------------- attention_flops

_FLOPS = "4 * B * H * L * S * D"

_FLOPS_MISTAKES = [
    Mistake(
        "2·B·H·L·S·D",
        lambda B, H, L, S, D: 2 * B * H * L * S * D,
        "you counted 2·B·H·L·S·D: that is one of the two matmuls (Q Kᵀ and weights @ V cost "
        "2·B·H·L·S·D each), or both of them counting a multiply-add as 1 FLOP instead of 2. "
        f"In all: {_FLOPS}.",
    ),
    Mistake(
        "B·H·L·S·D",
        lambda B, H, L, S, D: B * H * L * S * D,
        "you counted the multiply-adds of one matmul: a multiply-add is 2 FLOPs, and there are "
        f"two matmuls, Q Kᵀ and weights @ V: {_FLOPS}.",
    ),
    Mistake(
        "no H",
        lambda B, H, L, S, D: 4 * B * L * S * D,
        f"the heads are missing: each of the H heads does its own two matmuls: {_FLOPS}.",
    ),
    Mistake(
        "L·L",
        lambda B, H, L, S, D: 4 * B * H * L * L * D,
        "you used L·L: there is one score per query and key, L·S (in cross-attention S differs "
        f"from L): {_FLOPS}.",
    ),
    Mistake(
        "S·S",
        lambda B, H, L, S, D: 4 * B * H * S * S * D,
        f"you used S·S: there is one score per query and key, L·S: {_FLOPS}.",
    ),
]


def _flops_hint(got: int, B: int, H: int, L: int, S: int, D: int) -> str:
    extra = got - reference.attention_flops(B, H, L, S, D)
    if extra > 0 and extra % (B * H * L * S) == 0:
        return (
            f"you also counted {extra // (B * H * L * S)} operation(s) per score (the scale, the "
            f"softmax): those are O(B·H·L·S), small next to the matmuls, and left out: {_FLOPS}."
        )
    return f"each matmul is 2·B·H·L·S·D (a multiply and an add per term); both: {_FLOPS}."


_FLOPS_CASES = [  # (case, B, H, L, S, D)
    ("B=2, H=8, L=16, S=24, D=64", 2, 8, 16, 24, 64),
    ("cross-attention, L ≠ S: B=3, H=4, L=10, S=7, D=16", 3, 4, 10, 7, 16),
    ("a long sequence: B=1, H=12, L=S=4096, D=64", 1, 12, 4096, 4096, 64),
    ("one head: B=5, H=1, L=9, S=3, D=8", 5, 1, 9, 3, 8),
    ("everything 1: B=H=L=S=D=1", 1, 1, 1, 1, 1),
]


@checker(
    "attention_flops",
    "Replace `raise NotImplementedError` with the FLOPs of Q Kᵀ and weights @ V.",
)
def check_attention_flops(candidate) -> int:
    """Check ``candidate(B, H, L, S, D) -> int`` = 4·B·H·L·S·D."""
    return check_cases(
        candidate,
        _FLOPS_CASES,
        reference.attention_flops,
        _FLOPS_MISTAKES,
        what="the FLOPs",
        fallback_cause=_flops_hint,
    )


# ---------------------------------------------------------------- scores_memory

_BYTES = "B * H * L * S * dtype.itemsize"

_MEMORY_MISTAKES = [
    Mistake(
        "bits",
        lambda B, H, L, S, dtype: B * H * L * S * torch.finfo(dtype).bits,
        "you counted bits; a byte is 8 bits. The bytes per number: dtype.itemsize (or "
        f"torch.finfo(dtype).bits // 8): {_BYTES}.",
    ),
    Mistake(
        "4 bytes whatever the dtype",
        lambda B, H, L, S, dtype: B * H * L * S * 4,
        "you used 4 bytes per number whatever the dtype; float16 and bfloat16 take 2, float64 "
        f"takes 8: {_BYTES}.",
    ),
    Mistake(
        "elements, not bytes",
        lambda B, H, L, S, dtype: B * H * L * S,
        f"that is the number of elements; multiply by the bytes of each, dtype.itemsize: {_BYTES}.",
    ),
    Mistake(
        "no H",
        lambda B, H, L, S, dtype: B * L * S * dtype.itemsize,
        f"the heads are missing: every head has its own (L, S) scores: {_BYTES}.",
    ),
    Mistake(
        "L·L",
        lambda B, H, L, S, dtype: B * H * L * L * dtype.itemsize,
        f"you used L·L: the scores are (L, S), one per query and key: {_BYTES}.",
    ),
    Mistake(
        "S·S",
        lambda B, H, L, S, dtype: B * H * S * S * dtype.itemsize,
        f"you used S·S: the scores are (L, S), one per query and key: {_BYTES}.",
    ),
]

_MEMORY_CASES = [  # (case, B, H, L, S, dtype)
    ("float32: B=2, H=8, L=128, S=64", 2, 8, 128, 64, torch.float32),
    ("float16: B=1, H=12, L=256, S=100", 1, 12, 256, 100, torch.float16),
    ("bfloat16: B=3, H=4, L=10, S=20", 3, 4, 10, 20, torch.bfloat16),
    ("float64: B=2, H=2, L=7, S=5", 2, 2, 7, 5, torch.float64),
    ("float32, everything 1: one score", 1, 1, 1, 1, torch.float32),
]


@checker(
    "scores_memory",
    "Replace `raise NotImplementedError` with the bytes of a (B, H, L, S) tensor of dtype.",
)
def check_scores_memory(candidate) -> int:
    """Check ``candidate(B, H, L, S, dtype) -> int`` = B·H·L·S·(bytes per element)."""
    return check_cases(
        candidate,
        _MEMORY_CASES,
        reference.scores_memory,
        _MEMORY_MISTAKES,
        what="the bytes",
        crash_hint="dtype is a torch.dtype such as torch.float16; its bytes per number are "
        "dtype.itemsize.",
        fallback_cause=f"one number per score, each dtype.itemsize bytes: {_BYTES}.",
    )


# ---------------------------------------------------------------- attention_cost
# The lesson's cost model: ``candidate(B, H, L, S, D, dtype)`` -> {"flops", "score_bytes",
# "unfused_bytes", "fused_bytes"}. Each classic mistake below gives one entry wrong (its ``run``
# takes the candidate's arguments and returns that entry); the messages say what the count
# missed, not the finished formula.

COST_KEYS = ("flops", "score_bytes", "unfused_bytes", "fused_bytes")
_CHECK_ORDER = ("flops", "score_bytes", "fused_bytes", "unfused_bytes")  # the parts first


def _moved(score_passes: int, *, output=True, kv_length=None, bytes_per_number=True):
    """A count of the numbers (or bytes) moved: q, k, v and the output once each (k and v of
    ``kv_length`` "L" if given, else S), plus ``score_passes`` passes over a (B, H, L, S) tensor."""

    def count(B, H, L, S, D, dtype):
        keys = L if kv_length == "L" else S
        numbers = B * H * ((1 + output) * L * D + 2 * keys * D + score_passes * L * S)
        return numbers * (dtype.itemsize if bytes_per_number else 1)

    return count


_COST_MISTAKES = {
    "flops": [
        Mistake(
            "one matmul, or a multiply-add as 1 FLOP",
            lambda B, H, L, S, D, dtype: 2 * B * H * L * S * D,
            "you counted half: either one of the two matmuls (Q Kᵀ and weights @ V do the same "
            "work), or a multiply-add as 1 FLOP instead of 2.",
        ),
        Mistake(
            "multiply-adds of one matmul",
            lambda B, H, L, S, D, dtype: B * H * L * S * D,
            "you counted the multiply-adds of one matmul: a multiply-add is 2 FLOPs, and there are "
            "two matmuls, Q Kᵀ and weights @ V.",
        ),
        Mistake(
            "no H",
            lambda B, H, L, S, D, dtype: 4 * B * L * S * D,
            "the heads are missing: each of the H heads does its own two matmuls.",
        ),
        Mistake(
            "L·L",
            lambda B, H, L, S, D, dtype: 4 * B * H * L * L * D,
            "you used L·L: there is one score per query and key, L·S (in cross-attention S "
            "differs from L).",
        ),
        Mistake(
            "S·S",
            lambda B, H, L, S, D, dtype: 4 * B * H * S * S * D,
            "you used S·S: there is one score per query and key, L·S.",
        ),
    ],
    "score_bytes": [
        Mistake(
            "bits",
            lambda B, H, L, S, D, dtype: B * H * L * S * torch.finfo(dtype).bits,
            "you counted bits; a byte is 8 bits.",
        ),
        Mistake(
            "4 bytes whatever the dtype",
            lambda B, H, L, S, D, dtype: B * H * L * S * 4,
            "you used 4 bytes per number whatever the dtype; float16 and bfloat16 take 2, float64 "
            "takes 8 (dtype.itemsize).",
        ),
        Mistake(
            "elements, not bytes",
            lambda B, H, L, S, D, dtype: B * H * L * S,
            "that is the number of elements; each takes dtype.itemsize bytes.",
        ),
        Mistake(
            "no H",
            lambda B, H, L, S, D, dtype: B * L * S * dtype.itemsize,
            "the heads are missing: every head has its own (L, S) scores.",
        ),
        Mistake(
            "L·L",
            lambda B, H, L, S, D, dtype: B * H * L * L * dtype.itemsize,
            "you used L·L: the scores are (L, S), one per query and key.",
        ),
    ],
    "fused_bytes": [
        Mistake(
            "no output",
            _moved(0, output=False),
            "you counted what the fused kernel reads (q, k, v) but not what it writes: the output, "
            "(B, H, L, D), goes to main memory too.",
        ),
        Mistake(
            "k and v of length L",
            _moved(0, kv_length="L"),
            "k and v hold S keys, (B, H, S, D), not L: in cross-attention S differs from L.",
        ),
        Mistake(
            "elements, not bytes",
            _moved(0, bytes_per_number=False),
            "that is the number of elements moved; each takes dtype.itemsize bytes.",
        ),
        Mistake(
            "the scores counted",
            _moved(1),
            "you counted a (B, H, L, S) tensor in the fused kernel's traffic. Its tiles of scores "
            "stay in fast memory and are thrown away: it reads q, k and v, and writes the output.",
        ),
        Mistake(
            "every score tensor counted",
            _moved(4),
            "your fused count includes the passes over the (B, H, L, S) scores and weights: that "
            "is the unfused version. A fused kernel's tiles stay in fast memory; it reads q, k "
            "and v, and writes the output.",
        ),
        Mistake(
            "no H",
            lambda B, H, L, S, D, dtype: _moved(0)(B, 1, L, S, D, dtype),
            "the heads are missing: q, k, v and the output are (B, H, ·, D).",
        ),
    ],
    "unfused_bytes": [
        Mistake(
            "the score tensors only",
            lambda B, H, L, S, D, dtype: 4 * B * H * L * S * dtype.itemsize,
            "you counted the passes over the (B, H, L, S) tensors only. The three operations also "
            "read q, k and v and write the output, as the fused kernel does.",
        ),
        Mistake(
            "scores and weights written, never read",
            _moved(2),
            "you counted the scores and the weights once each. Each is written by one operation "
            "and read back by the next: the softmax reads the scores, weights @ V reads the "
            "weights.",
        ),
        Mistake(
            "one score tensor",
            _moved(1),
            "you counted one pass over a (B, H, L, S) tensor. The scores are written, then read by "
            "the softmax; the weights are written, then read by weights @ V.",
        ),
        Mistake(
            "three passes",
            _moved(3),
            "you counted three passes over a (B, H, L, S) tensor; there are four: the scores "
            "written and read back by the softmax, the weights written and read back by "
            "weights @ V.",
        ),
        Mistake(
            "the scale as an operation",
            _moved(6),
            "you counted six passes over a (B, H, L, S) tensor, the scale as an operation of its "
            "own. The model has three operations: the scaled scores, the softmax, weights @ V.",
        ),
        Mistake(
            "the same as fused",
            _moved(0),
            "your unfused count is the fused one: the unfused version also writes the scores and "
            "the weights to main memory and reads them back.",
        ),
        Mistake(
            "elements, not bytes",
            _moved(4, bytes_per_number=False),
            "that is the number of elements moved; each takes dtype.itemsize bytes.",
        ),
        Mistake(
            "k and v of length L",
            _moved(4, kv_length="L"),
            "k and v hold S keys, (B, H, S, D), not L: in cross-attention S differs from L.",
        ),
    ],
}

_COST_FALLBACK = {
    "flops": "each matmul is B·H·L·S·D multiply-adds, and a multiply-add is 2 FLOPs.",
    "score_bytes": "one number per sequence, head, query and key, each dtype.itemsize bytes.",
    "fused_bytes": "a fused kernel reads q (B, H, L, D), k and v (B, H, S, D), and writes the "
    "output (B, H, L, D), each number dtype.itemsize bytes.",
    "unfused_bytes": "the unfused version moves what the fused kernel moves, plus the scores "
    "and the weights: each written by one operation and read by the next.",
}

_WHAT = {key: "the FLOPs" if key == "flops" else "the bytes" for key in COST_KEYS}

_COST_CASES = [  # (case, B, H, L, S, D, dtype): the first has sizes no two mistakes confuse
    ("float16, cross-attention: B=2, H=3, L=5, S=7, D=11", 2, 3, 5, 7, 11, torch.float16),
    ("float32, self-attention: B=1, H=8, L=S=128, D=16", 1, 8, 128, 128, 16, torch.float32),
    ("bfloat16: B=3, H=4, L=10, S=20, D=8", 3, 4, 10, 20, 8, torch.bfloat16),
    ("float64: B=2, H=2, L=7, S=5, D=3", 2, 2, 7, 5, 3, torch.float64),
    ("the docstring's example: B=H=1, L=S=4, D=2, float32", 1, 1, 4, 4, 2, torch.float32),
]


def _require_dict(case: str, got) -> None:
    if not isinstance(got, dict):
        raise ExerciseFailure(
            f"Case {case!r}: your result should be a dict with the keys "
            f"{', '.join(map(repr, COST_KEYS))}; got {type(got).__name__}."
        )
    missing = [key for key in COST_KEYS if key not in got]
    if missing:
        raise ExerciseFailure(
            f"Case {case!r}: your dict has no {', '.join(map(repr, missing))} "
            f"(it has {', '.join(map(repr, got)) or 'nothing'}).\n"
            f"Likely cause: the keys are exactly {', '.join(map(repr, COST_KEYS))}."
        )


@checker(
    "attention_cost",
    "Replace `raise NotImplementedError` with the four counts of attention's cost.",
)
def check_attention_cost(candidate) -> int:
    """Check ``candidate(B, H, L, S, D, dtype) -> dict`` against the lesson's cost model:
    "flops" (the two matmuls), "score_bytes" (one (B, H, L, S) tensor), "fused_bytes" (q, k, v
    read, the output written) and "unfused_bytes" (that, plus four passes over a (B, H, L, S)
    tensor); every entry an int."""
    for case, *args in _COST_CASES:
        got = call_candidate(
            candidate,
            case,
            *args,
            crash_hint="the sizes are ints and dtype a torch.dtype such as torch.float16; its "
            "bytes per number are dtype.itemsize.",
        )
        _require_dict(case, got)
        expected = reference.attention_cost(*args)
        for key in _CHECK_ORDER:
            require_count(
                f'{case}, "{key}"',  # a wrong type is then named with its entry too
                _WHAT[key],
                got[key],
                expected[key],
                _COST_MISTAKES[key],
                args,
                _COST_FALLBACK[key],
            )
    return len(_COST_CASES)
