"""Measuring: the one timer of the course (:func:`time_call`, and :func:`time_alternating` for
comparisons), peak memory, the matmul rate that is each result's ceiling, and the environment.

Every timing in the package, the lesson and the benchmarks/ scripts goes through :func:`time_call`,
so they all mean the same thing: the median time of one call over blocks of calls timed with
``torch.utils.benchmark`` (which sets the thread count and synchronises a GPU before reading the
clock), and the interquartile range (IQR) of those blocks.
"""

from __future__ import annotations

import contextlib
import datetime
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from typing import NamedTuple

import torch

from ..utils import machine
from .records import Environment


def _import_benchmark():
    """``torch.utils.benchmark``, whose import loads ``torch.utils.cpp_extension``: where a CUDA
    build of torch meets CUDA's toolkit but no GPU (a Colab CPU runtime) that says "No CUDA runtime
    is found" on stderr (newer torch logs it, older prints it): a line in a notebook about
    compiling C++, which nothing here does."""
    import io
    import logging

    log = logging.getLogger("torch.utils.cpp_extension")
    level = log.level
    log.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            from torch.utils import benchmark
    finally:
        log.setLevel(level)
    return benchmark


benchmark = _import_benchmark()

__all__ = [
    "Timing",
    "time_call",
    "time_alternating",
    "peak_memory",
    "memory_method",
    "matmul_rate",
    "environment",
]

CLOCKS = ("wall", "cpu")
"""``"wall"``: elapsed time. ``"cpu"``: the process's CPU time (``time.process_time``), which another
program on the machine barely moves: with one thread, a robust measurement on a busy machine."""


class Timing(NamedTuple):
    """Seconds per call: the median and interquartile range over timed blocks; ``runs`` blocks."""

    median: float
    iqr: float
    runs: int


def _spread(times: list[float]) -> tuple[float, float]:
    """(median, IQR), with the same percentiles as torch's ``Measurement`` (NumPy's default)."""
    if len(times) < 2:
        return times[0], 0.0
    q1, median, q3 = statistics.quantiles(times, n=4, method="inclusive")
    return median, q3 - q1


def time_call(
    fn: Callable,
    *,
    threads: int | None = None,
    min_run_time: float = 0.2,
    max_run_time: float | None = None,
    warmup: int = 2,
    min_blocks: int = 3,
    clock: str = "wall",
    call_s: float | None = None,
    deadline: float | None = None,
) -> Timing:
    """``(median, iqr, runs)`` in seconds of one ``fn()`` call, with ``torch.utils.benchmark``.

    ``warmup`` calls first (lazy initialisation, caches, compilation). Then blocks of calls, each
    about a tenth of ``min_run_time`` long (at least a millisecond, so the clock's own overhead is
    negligible), until there are ``min_blocks`` of them, ``min_run_time`` seconds are spent, and
    either the IQR is within 10% of the median (over at least 4 blocks) or ``max_run_time``
    seconds (default 10 × ``min_run_time``, at least 1 s) are spent (or twice that on the wall
    clock, when timing CPU time). A call slower than ``max_run_time`` still gets ``min_blocks``
    blocks, so that the IQR means something; but no block starts after ``deadline`` (a
    ``time.perf_counter()`` value), so that a budget is never overrun by more than one block.

    The block size comes from ``call_s``, the caller's estimate of one call (when not given, the
    last warm-up call is timed for it, or one extra call without warm-up). ``threads`` (default:
    torch's current count) is set while timing; ``clock`` is ``"wall"`` or ``"cpu"`` (see
    :data:`CLOCKS`; a GPU needs the wall clock, which torch synchronises with the GPU).
    """
    if clock not in CLOCKS:
        raise ValueError(f"clock must be one of {CLOCKS}, got {clock!r}")
    max_run_time = max(10 * min_run_time, 1.0) if max_run_time is None else max_run_time
    timer = benchmark.Timer(
        stmt="fn()",
        globals={"fn": fn},
        **({"timer": time.process_time} if clock == "cpu" else {}),
    )
    with _threads(threads or torch.get_num_threads()):
        for i in range(warmup):
            if i == warmup - 1 and call_s is None:  # the last warm-up call, timed
                call_s = _block(timer, 1)
            else:
                fn()
        if call_s is None:
            call_s = _block(timer, 1)
        number = max(1, math.ceil(max(min_run_time / 10, 1e-3) / max(call_s, 1e-9)))
        times: list[float] = []  # seconds per block of `number` calls
        start = time.perf_counter()
        while True:
            times.append(_block(timer, number))
            spent, now = sum(times), time.perf_counter()
            if deadline is not None and now > deadline:
                break
            if len(times) < min_blocks:
                continue
            if spent >= max_run_time or now - start >= 2 * max_run_time:  # (the CPU clock lags)
                break
            if spent >= min_run_time and len(times) >= 4:
                median, iqr = _spread(times)
                if iqr <= 0.1 * median:
                    break
    median, iqr = _spread([t / number for t in times])
    return Timing(median, iqr, len(times))


@contextlib.contextmanager
def _threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


def _block(timer: benchmark.Timer, number: int) -> float:
    """Seconds of ``number`` calls in a row, on the timer's clock. (The autorange methods of
    torch's Timer time their blocks this way; its public ``timeit`` first makes two or more
    untimed calls each time, which would triple the cost of a block of one slow call.)"""
    return timer._timeit(number)


def time_alternating(
    calls: Mapping[str, Callable],
    *,
    rounds: int = 5,
    min_run_time: float = 0.5,
    threads: int | None = None,
    clock: str = "wall",
) -> dict[str, Timing]:
    """Time several calls in alternating rounds (a, b, a, b, ...), so that a machine that slows
    down mid-run slows them all alike. In each round each call gets one warm-up call, then
    ``min_run_time`` seconds of timed blocks (:func:`time_call`; at least one block). Each call's
    :class:`Timing` is the median over rounds of its per-round medians, the IQR of those, and
    ``runs=rounds``."""
    medians: dict[str, list[float]] = {name: [] for name in calls}
    timing = dict(min_run_time=min_run_time, max_run_time=min_run_time, warmup=1, min_blocks=1)
    for _ in range(rounds):
        for name, fn in calls.items():
            medians[name].append(time_call(fn, threads=threads, clock=clock, **timing).median)
    return {name: Timing(*_spread(m), rounds) for name, m in medians.items()}


@contextlib.contextmanager
def _native_stderr_silenced():
    """Hide what C++ code writes to file descriptor 2 (the profiler prints a line each time it
    starts and stops). Python exceptions are unaffected."""
    try:
        sys.stderr.flush()
        saved, devnull = os.dup(2), os.open(os.devnull, os.O_WRONLY)
    except (OSError, ValueError, AttributeError):  # no real stderr to silence
        yield
        return
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


def _cpu_peak_bytes(fn: Callable) -> int | None:
    # torch.autograd.profiler.profile, not torch.profiler.profile: the latter imports
    # torch._inductor the first time it starts, which takes seconds
    from torch.autograd.profiler import profile

    with _native_stderr_silenced(), profile(use_cpu=True, profile_memory=True) as prof:
        fn()
    try:
        events = prof.kineto_results.events()
    except AttributeError:  # a torch whose profiler keeps its events elsewhere
        return None
    changes = sorted(
        (e.start_ns() if hasattr(e, "start_ns") else 1000 * e.start_us(), e.nbytes())
        for e in events
        if e.name() == "[memory]" and e.device_type().name == "CPU"
    )
    peak = running = 0
    for _, nbytes in changes:
        running += nbytes
        peak = max(peak, running)
    return peak


def memory_method(device: torch.device) -> str:
    """How :func:`peak_memory` measures on this device (recorded in the environment)."""
    if device.type == "cuda":
        return "torch.cuda.max_memory_allocated minus the allocation before the call"
    if device.type == "cpu":
        return (
            "torch.profiler(profile_memory=True): peak of the running sum of CPU allocator events"
        )
    return "not measured on this device"


def peak_memory(fn: Callable, device: torch.device) -> int | None:
    """Extra bytes allocated at the peak of one ``fn()`` call (untimed; see :func:`memory_method`).

    On a GPU: ``torch.cuda.max_memory_allocated`` above what was allocated before the call. On the
    CPU: ``torch.profiler`` with ``profile_memory=True`` records every allocation and free made
    through PyTorch's CPU allocator during the call; the peak of their running sum is the extra
    memory the call needed (memory from outside PyTorch's allocator, e.g. a BLAS library's own
    buffers, is not seen).
    """
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
        fn()
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - before
    if device.type == "cpu":
        return _cpu_peak_bytes(fn)
    return None


def matmul_rate(
    device: torch.device,
    dtype: torch.dtype,
    *,
    n: int = 1024,
    threads: int | None = None,
    min_run_time: float = 0.2,
    max_run_time: float | None = None,
    warmup: int = 2,
) -> float:
    """FLOP/s of an (n, n) @ (n, n) matmul here: the practical ceiling attention is compared with."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    median, _, _ = time_call(
        lambda: a @ b,
        threads=threads,
        min_run_time=min_run_time,
        max_run_time=max_run_time,
        warmup=warmup,
    )
    return 2 * n**3 / median


def environment(device: torch.device, threads: int) -> Environment:
    """The facts a reader needs to compare these numbers with theirs (from :func:`utils.machine`)."""
    m = machine(device)
    return Environment(
        torch_version=m.torch_version,
        python_version=m.python_version,
        platform=m.platform,
        device=m.device,
        device_name=m.device_name,
        threads=threads,
        cuda_version=m.cuda_version,
        memory_method=memory_method(device),
        timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )
