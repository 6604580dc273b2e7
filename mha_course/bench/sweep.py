"""The sweep: every implementation at every length, dtype and mode, within a time budget.

For each case, in a fixed order (dtype, then length, then mode, then implementation: both modes of
a length come before the next length, so that a budget that runs short, or a machine that turns out
slower than planned, leaves the modes measured to the same lengths):

1. **Can it run?** A kernel or dtype the device lacks is "unsupported"; a case predicted to need
   more memory than is free, or (with a budget) more time than is left, is "skipped" with the
   reason (see :mod:`.plan`). Nothing is run that the sweep cannot afford.
2. **Correctness gate.** Its output (and, with backward, the gradient of the input) is compared
   with a float64 reference (``torch.nn.MultiheadAttention`` with the same weights). A wrong one is
   reported as "wrong" and never timed. Attention rows are independent, so the reference only
   computes the first ``check_queries`` queries against all keys: exact, and cheap at any length.
3. **Peak memory,** in a separate untimed call (:func:`.measure.peak_memory`); the analytic size of
   one (B, H, L, S) score matrix is recorded next to it.
4. **Time,** with :func:`.measure.time_call`: the median and IQR over blocks of calls. A result
   whose IQR is over 20% of its median is flagged "noisy". The thread count is set explicitly and
   recorded.

Out of memory is recorded as "oom" (longer lengths of the same implementation are skipped) and the
sweep goes on. The machine's square-matmul rate is measured before each length, so each result
says how close to the limit it gets (and a rate that moves during a sweep shows that something
else was using the machine).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import statistics
import sys
import time
from collections.abc import Callable, Sequence

import torch
from tqdm import tqdm

from .._validate import require_divisible
from ..variants import MHAParams
from .case import Case, make_inputs, measure
from .device_profile import (
    DeviceProfile,
    available_memory,
    describe_device,
    native_bf16,
    profile_dtypes,
    unsupported_reason,
)
from .implementations import Implementation, standard_implementations
from .measure import environment, matmul_rate
from .plan import measurement_s, plan, predict_call_s, predict_peak_bytes
from .records import (
    BACKWARD,
    BASELINE,
    FORWARD,
    TOO_BIG,
    TOO_SLOW,
    Result,
    Sweep,
    format_bytes,
    format_time,
)

__all__ = ["run_sweep", "quick_sweep", "standard_sweep", "default_budget", "default_dtypes"]

BUDGET_S = {"cpu": 25.0, "cuda": 100.0}
"""Default seconds for the standard sweep: about 25 s on a laptop CPU, under 2 minutes on a GPU."""
QUICK_BUDGET_S = {"cpu": 4.0, "cuda": 10.0}
BUDGETED_RUN_TIME = (0.02, 0.5)
"""With a budget: the least and most timed seconds per measurement (``min_run_time`` and
``max_run_time`` by default); the budget left after choosing the cases decides where in between."""
PLANNED_SHARE = 0.9  # the plan fills this share of the time left; the rest absorbs its errors


def _device(device) -> torch.device:
    device = (
        torch.device(device)
        if device is not None
        else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for, but this torch sees no CUDA GPU")
    return device


def default_dtypes(device=None) -> tuple[torch.dtype, ...]:
    """float32 on a CPU; on a GPU float16, and bfloat16 where the GPU has it natively."""
    device = _device(device)
    return profile_dtypes(DeviceProfile(type=device.type, native_bf16=native_bf16(device)))


def default_budget(device=None, quick: bool = False) -> float:
    """Seconds the command line's sweep gets on ``device`` (``quick``: its ``--quick`` sweep)."""
    budgets = QUICK_BUDGET_S if quick else BUDGET_S
    return budgets.get(_device(device).type, budgets["cpu"])


class _Sweeper:
    """A sweep as it runs: its clock, what it has measured so far, and what it gave up on."""

    def __init__(
        self,
        profile: DeviceProfile,
        deadline: float,
        run_times: tuple[float, float | None],
        *,
        device: torch.device,
        threads: int,
        params64: MHAParams,
        matmul_n: int,
        seed: int,
    ):
        self.profile, self.deadline = profile, deadline
        self.budgeted = deadline < math.inf
        self.min_run_time, self.max_run_time = run_times
        self.device, self.threads, self.matmul_n, self.seed = device, threads, matmul_n, seed
        self.params64 = params64
        self.params = {}  # dtype -> the shared weights in that dtype, on the device
        self.seen: dict[tuple, list] = {}  # series -> [(length, seconds per call, peak bytes)]
        self.slowdowns: list[float] = []  # measured over predicted seconds per call
        self.cost_ratios: list[float] = []  # measured over predicted seconds per measurement
        self.given_up: dict[tuple, int] = {}  # series -> the length it ran out of memory at

    def left(self) -> float:
        return self.deadline - time.perf_counter()

    def cannot_run(self, case: Case) -> tuple[str, str] | None:
        """(status, message) when the device lacks what the case needs or memory would not hold it."""
        if reason := unsupported_reason(case, self.profile):
            return "unsupported", reason
        if case.series in self.given_up:
            return "oom", f"skipped: out of memory at L={self.given_up[case.series]}"
        peak = predict_peak_bytes(case, self.seen)
        if peak > self.profile.available_bytes:
            free = format_bytes(self.profile.available_bytes)
            return "skipped", f"{TOO_BIG} (predicted peak {format_bytes(peak)}, {free} free)"
        return None

    def verdicts(self, remaining: Sequence[Case]) -> tuple[dict[int, tuple[str, str]], float]:
        """Why each case from this group on will not run (index -> (status, message)), and the
        timed seconds per measurement, planned again with everything measured so far."""
        available = available_memory(self.device)
        self.profile = dataclasses.replace(self.profile, available_bytes=available)
        verdicts = {i: v for i, case in enumerate(remaining) if (v := self.cannot_run(case))}
        if not self.budgeted:
            return verdicts, self.min_run_time
        candidates = [i for i in range(len(remaining)) if i not in verdicts]
        chosen = plan(
            [remaining[i] for i in candidates],
            PLANNED_SHARE * self.left(),
            self.profile,
            self.seen,
            min_run_time=self.min_run_time,
            max_run_time=self.max_run_time,
        )
        for j, i in enumerate(candidates):
            if j not in chosen.run:
                per_call = f"predicted {format_time(chosen.call_s[j])} per call"
                verdicts[i] = ("skipped", f"{TOO_SLOW} ({per_call})")
        return verdicts, chosen.run_time

    def too_slow(self, call_s: float, run_time: float, measured: bool = False) -> str | None:
        """Why the budget cannot pay now for a measurement whose calls take ``call_s`` (or None):
        predicted, before the measurement, or ``measured`` by its first call."""
        cost = measurement_s(call_s, run_time, self.profile)
        if measured:  # that call is paid for
            cost -= self.profile.cost_factor * call_s
        left = self.left()
        if cost <= left:
            return None
        how = "measured" if measured else "predicted"
        return (
            f"{TOO_SLOW} ({how} {format_time(call_s)} per call, {format_time(max(left, 0))} left)"
        )

    def record(self, case: Case, result: Result, call_s: float | None) -> None:
        if result.status == "oom":
            self.given_up[case.series] = case.length
        if call_s is None:
            return
        self.seen.setdefault(case.series, []).append((case.length, call_s, result.peak_bytes))
        predicted = predict_call_s(case, dataclasses.replace(self.profile, slowdown=1.0))
        if predicted > 0:  # a budgeted sweep: the prediction before any measurement
            self.slowdowns.append(call_s / predicted)
            slowdown = max(1.0, statistics.median(self.slowdowns))
            self.profile = dataclasses.replace(self.profile, slowdown=slowdown)

    def record_cost(self, call_s: float, run_time: float, seconds: float) -> None:
        """Learn how long measurements really take (a busy machine, a slow profiler)."""
        predicted = measurement_s(
            call_s, run_time, dataclasses.replace(self.profile, cost_factor=1)
        )
        self.cost_ratios.append(seconds / predicted)
        factor = max(0.5, statistics.median(self.cost_ratios))
        self.profile = dataclasses.replace(self.profile, cost_factor=factor)

    def run_group(self, group: Sequence[Case], remaining: Sequence[Case], bar, emit) -> None:
        """Every case of one (dtype, mode, length), measured or with why it was not, to
        ``emit(index in the group, result)``."""
        verdicts, run_time = self.verdicts(remaining)
        first, ceiling, inputs = group[0], None, None
        if any(i not in verdicts for i in range(len(group))):
            ceiling = matmul_rate(
                self.device,
                first.dtype,
                n=self.matmul_n,
                threads=self.threads,
                min_run_time=self.min_run_time,
                max_run_time=self.min_run_time if self.budgeted else self.max_run_time,
                warmup=1 if self.budgeted else 2,
            )
            inputs = make_inputs(self.params64, first, self.device, self.seed)
        if first.dtype not in self.params:
            self.params[first.dtype] = self.params64.to(dtype=first.dtype, device=self.device)
        timing = dict(threads=self.threads, min_run_time=run_time)
        timing["max_run_time"] = run_time if self.budgeted else self.max_run_time
        # the baseline first: if the budget runs out within this length, the ratios keep it
        for i in sorted(range(len(group)), key=lambda i: group[i].implementation.name != BASELINE):
            case = group[i]
            bar.set_description(f"{case.dtype_name} {case.mode} L={case.length}", False)
            bar.set_postfix_str(case.implementation.name)
            base = _base(case, self.device, ceiling)
            verdict = verdicts.get(i)
            if verdict is None and self.budgeted:  # the plan may be stale: check the clock
                predicted = predict_call_s(case, self.profile, self.seen)
                if reason := self.too_slow(predicted, run_time):
                    verdict = ("skipped", reason)
            if verdict is not None:
                result = dataclasses.replace(base, status=verdict[0], message=verdict[1])
            else:
                start = time.perf_counter()
                result, call_s = measure(
                    case.implementation,
                    self.params[case.dtype],
                    inputs,
                    base,
                    self.device,
                    afford=lambda s: self.too_slow(s, run_time, measured=True),
                    deadline=self.deadline,
                    **timing,
                )
                self.record(case, result, call_s)
                if result.status == "ok":
                    self.record_cost(result.median_s, run_time, time.perf_counter() - start)
            emit(i, result)


def _base(case: Case, device: torch.device, ceiling: float | None) -> Result:
    return Result(
        implementation=case.implementation.name,
        device=device.type,
        dtype=case.dtype_name,
        mode=case.mode,
        batch=case.batch,
        length=case.length,
        embed_dim=case.embed_dim,
        heads=case.heads,
        status="",
        score_bytes=case.score_bytes,
        flops=case.flops(),
        matmul_flop_rate=ceiling,
    )


def _check_arguments(modes, embed_dim: int, heads: int, budget_s) -> None:
    for mode in modes:
        if mode not in (FORWARD, BACKWARD):
            raise ValueError(f"modes must be {FORWARD!r} or {BACKWARD!r}, got {mode!r}")
    require_divisible("embed_dim", embed_dim, "heads", heads)
    if budget_s is not None and not budget_s > 0:
        raise ValueError(f"budget_s must be a positive number of seconds (or None), got {budget_s}")


def run_sweep(
    lengths: Sequence[int] = (128, 256, 512, 1024, 2048),
    *,
    batch: int = 1,
    embed_dim: int = 512,
    heads: int = 8,
    device: str | torch.device | None = None,
    dtypes: Sequence[torch.dtype] | None = None,
    modes: Sequence[str] = (FORWARD, BACKWARD),
    threads: int | None = None,
    implementations: Sequence[Implementation] | None = None,
    min_run_time: float | None = None,
    max_run_time: float | None = None,
    check_queries: int = 128,
    matmul_n: int | None = None,
    seed: int = 0,
    progress: Callable[[Result], None] | None = None,
    budget_s: float | None = None,
    progress_bar: bool = True,
) -> Sweep:
    """Benchmark ``implementations`` (default: :func:`standard_implementations`) on self-attention
    of x (batch, L, embed_dim) for every L in ``lengths``, dtype and mode. All share one set of
    weights. Returns a :class:`Sweep` (a list of :class:`Result`, one per case, the ones not run
    included) carrying its :class:`Environment`.

    ``budget_s``: the seconds the whole sweep may take. The sweep then measures the device first
    (matmul rates, the overhead of a call), predicts what each case costs, runs the cases that fit
    (the short lengths of every implementation first; the long ones where they are fast enough)
    and gives each one between ``min_run_time`` and ``max_run_time`` (default 0.02 and 0.5) timed
    seconds; what does not fit is recorded as skipped, "too slow for the budget". It plans again
    after each length with what it measured, and checks the clock before each measurement. ``None``: every case is run, each
    timed for ``min_run_time`` (default 0.2) to ``max_run_time`` seconds (see :func:`time_call`).
    Either way, cases predicted not to fit in free memory and kernels or dtypes the device lacks
    are recorded and not run.

    ``dtypes`` defaults to :func:`default_dtypes`. ``threads`` defaults to the current
    ``torch.get_num_threads()``; it is set for the sweep, recorded, and restored after. The float64
    reference checks the first ``check_queries`` queries; ``matmul_n`` sizes the matmul whose rate
    is the ceiling (default 4096 on a GPU; on a CPU 1024, or 512 with a budget). ``progress`` is
    called with each result as it comes; ``progress_bar`` shows a plain-text bar on stdout.
    """
    deadline = time.perf_counter() + budget_s if budget_s else math.inf
    device = _device(device)
    dtypes = default_dtypes(device) if dtypes is None else tuple(dtypes)
    _check_arguments(modes, embed_dim, heads, budget_s)
    implementations = (
        standard_implementations() if implementations is None else list(implementations)
    )
    floor, cap = BUDGETED_RUN_TIME if budget_s is not None else (0.2, None)
    run_times = (
        floor if min_run_time is None else min_run_time,
        cap if max_run_time is None else max_run_time,
    )
    matmul_n = matmul_n or (4096 if device.type == "cuda" else 512 if budget_s else 1024)
    cases = [
        Case(impl, dtype, mode, L, batch, embed_dim, heads, check_queries)
        for dtype in dtypes
        for L in sorted(set(lengths))
        for mode in modes
        for impl in implementations
    ]
    threads_before = torch.get_num_threads()
    threads = threads or threads_before
    torch.set_num_threads(threads)
    bar = tqdm(total=len(cases), file=sys.stdout, disable=not progress_bar, ncols=100, unit="case")
    try:
        profile = describe_device(
            device,
            implementations=implementations,
            dtypes=dtypes if budget_s is not None else (),
            modes=modes if budget_s is not None else (),
            embed_dim=embed_dim,
            heads=heads,
            matmul_n=matmul_n,
            run_time=run_times[0],
            threads=threads,
            deadline=deadline,
        )
        params64 = MHAParams.random(embed_dim, heads, seed=seed, dtype=torch.float64)
        sweeper = _Sweeper(
            profile,
            deadline,
            run_times,
            device=device,
            threads=threads,
            seed=seed,
            matmul_n=matmul_n,
            params64=params64,
        )
        measured_in = environment(device, threads)
        results: dict[int, Result] = {}  # by the case's index: the sweep keeps the cases' order
        done = 0

        def emit(i: int, result: Result) -> None:
            results[done + i] = result
            bar.update()
            if progress is not None:
                progress(result)

        for _, group in itertools.groupby(cases, key=lambda c: c.group):
            group = list(group)
            sweeper.run_group(group, cases[done:], bar, emit)
            done += len(group)
        sweep = Sweep([results[i] for i in sorted(results)], measured_in)
    finally:
        bar.close()
        torch.set_num_threads(threads_before)
    return sweep


def quick_sweep(device=None, threads: int | None = None, **overrides) -> Sweep:
    """A small sweep, forward only, two lengths: a few seconds on two CPU cores (a budget of
    :func:`default_budget` with ``quick=True``)."""
    settings = dict(
        lengths=(64, 256),
        batch=1,
        embed_dim=128,
        heads=4,
        modes=(FORWARD,),
        check_queries=32,
        matmul_n=512,
        budget_s=default_budget(device, quick=True),
    )
    return run_sweep(device=device, threads=threads, **{**settings, **overrides})


def standard_sweep(device=None, threads: int | None = None, **overrides) -> Sweep:
    """The lesson's sweep: d_model = 512, h = 8; L up to 2048 on a CPU (float32), up to 8192 on a
    GPU (float16, and bfloat16 where native; batch 4); forward and forward+backward; within
    :func:`default_budget` seconds, the lengths and repetitions chosen to fit."""
    if _device(device).type == "cuda":
        settings = dict(lengths=(256, 512, 1024, 2048, 4096, 8192), batch=4)
    else:
        settings = dict(lengths=(128, 256, 512, 1024, 2048), batch=1)
    settings["budget_s"] = default_budget(device)
    return run_sweep(device=device, threads=threads, **{**settings, **overrides})
