"""What a sweep produces: one :class:`Result` per (implementation, dtype, mode, length), a
:class:`Sweep` that holds them with the :class:`Environment` they were measured in, and the
constants every part of the harness shares."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import torch

__all__ = [
    "FORWARD",
    "BACKWARD",
    "BASELINE",
    "TOLERANCE",
    "NOISY",
    "TOO_SLOW",
    "TOO_BIG",
    "Environment",
    "Result",
    "Sweep",
    "mha_flops",
]

FORWARD, BACKWARD = "forward", "forward+backward"
BASELINE = "torch MHA"  # the "× torch" column divides by this implementation's time
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 5e-2}
"""Largest relative error (max |got - ref| / max |ref|) the correctness gate accepts, per dtype."""
NOISY = 0.2
"""A timing whose IQR exceeds this fraction of its median is flagged: something else was running."""

TOO_SLOW = "too slow for the budget"
TOO_BIG = "would not fit in memory"
"""The two reasons a sweep skips a case without running it (status "skipped"); a kernel or dtype
the device lacks is status "unsupported", and memory that ran out when tried is "oom"."""


@dataclass
class Environment:
    """Where the numbers come from; every table, CSV row and JSON file carries it."""

    torch_version: str
    python_version: str
    platform: str
    device: str
    device_name: str
    threads: int
    cuda_version: str
    memory_method: str
    timestamp: str


@dataclass
class Result:
    """One implementation at one (dtype, mode, length). ``status`` is "ok" (timed), "wrong" (failed
    the correctness gate, not timed), "oom" (ran out of memory, or a longer length after that),
    "unsupported" (a kernel or dtype this device lacks), "skipped" (not run: ``message`` starts with
    "too slow for the budget" or "would not fit in memory"), "unavailable" (not installed) or
    "error" (``message`` says what)."""

    implementation: str
    device: str
    dtype: str
    mode: str
    batch: int
    length: int
    embed_dim: int
    heads: int
    status: str
    message: str = ""
    max_error: float | None = None  # relative to the float64 reference
    median_s: float | None = None
    iqr_s: float | None = None
    runs: int | None = None  # timed blocks behind the median
    peak_bytes: int | None = None  # measured, untimed pass
    score_bytes: int = 0  # analytic: one (B, H, L, S) matrix in this dtype
    flops: float = 0.0  # analytic matmul FLOPs per call
    flop_rate: float | None = None  # flops / median_s
    matmul_flop_rate: float | None = None  # this machine's square matmul, same run and dtype
    matmul_fraction: float | None = None  # flop_rate / matmul_flop_rate


class Sweep(list):
    """A ``list[Result]`` that also carries the :class:`Environment` it was measured in."""

    def __init__(self, results: Iterable[Result] = (), environment: Environment | None = None):
        super().__init__(results)
        self.environment = environment


def format_time(seconds: float | None) -> str:
    """``0.0123`` -> ``"12.3 ms"``; None -> ``"-"``."""
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def format_bytes(n: float | None) -> str:
    """``3 * 2**20`` -> ``"3 MiB"``; None -> ``"-"``."""
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def mha_flops(
    batch: int, length: int, embed_dim: int, mode: str = FORWARD, kv_length: int | None = None
) -> float:
    """Matmul FLOPs (a multiply-add counts 2) of one multi-head attention call.

    Projections Q, K, V and the output: 4 · 2·B·L·E² (with S keys, K and V cost 2·B·S·E² each);
    scores Q Kᵀ and weights·V over all heads: 2 · 2·B·L·S·E. Softmax and masking are not matmuls
    and are left out. A backward pass costs two matmuls per forward one, so forward+backward is
    3× the forward (a kernel that recomputes the scores does more work than this counts).
    """
    S = length if kv_length is None else kv_length
    forward = 2 * batch * embed_dim * (2 * length * embed_dim + 2 * S * embed_dim + 2 * length * S)
    return float(forward * (3 if mode == BACKWARD else 1))
