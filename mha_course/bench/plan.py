"""Planning a sweep: what the device can run, what fits in its memory, what fits in the budget.

Every decision here is a plain function of a :class:`DeviceProfile` (measured by
:func:`describe_device` at the start of a sweep, or written by hand in a test) and of what the
sweep has measured so far, so that the logic can be checked without the device.

* **Support.** A forced SDPA kernel the device lacks (flash and cuDNN need an Ampere GPU, compute
  capability 8.0, or newer; a CPU has only math and flash) and bfloat16 on a GPU without native
  bfloat16 are "unsupported" and never run.
* **Memory.** A case's peak memory is predicted before it runs: its activations (a few copies of
  x, (B, L, E)) and, for an implementation that holds the scores, several (B, H, L, S) matrices
  (scores and weights; more with their gradients in a backward pass). Once an implementation has
  been measured at a shorter length, its measured peak, grown as it grew between its last two
  lengths, is the prediction. A case predicted to need more than the memory free now is skipped.
* **Time.** A call is predicted to take the measured overhead of a tiny call plus its FLOPs at a
  fraction (:data:`EFFICIENCY`) of the measured matmul rate; once the implementation has been
  measured at a shorter length, that time, grown like the FLOPs (or like the measured growth
  between its last two lengths, if faster). A measurement costs a fixed overhead, two untimed
  calls (the correctness gate, the memory pass) and its timed part. :func:`plan` takes the
  shortest length of every series (implementation, dtype, mode) first, cheapest first, then the
  next length of every series, and so on, while the budget lasts; a series whose next length does not
  fit ends there, and the others go on (so the fast implementations reach the longest lengths).
  What is left is spread over the chosen measurements as timed seconds each, between
  ``min_run_time`` and ``max_run_time``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import torch

from ..variants import MHAParams
from .case import Case
from .implementations import SDPA_BACKENDS, Implementation
from .measure import matmul_rate, peak_memory, time_call
from .records import BASELINE, mha_flops

__all__ = [
    "DeviceProfile",
    "Plan",
    "unsupported_reason",
    "predict_call_s",
    "predict_peak_bytes",
    "measurement_s",
    "plan",
    "available_memory",
    "describe_device",
    "native_bf16",
]

EFFICIENCY = 0.2
"""The fraction of the square-matmul rate an attention call is assumed to reach before it has been
measured (measured on a CPU: 10-20% for the unfused versions at long L, about 60% for SDPA)."""
MIN_BLOCKS = 3  # timed blocks every measurement gets, however slow one call is
UNTIMED_CALLS = 2  # the correctness gate and the memory pass
SCORE_COPIES = {"forward": 4, "forward+backward": 8}
"""(B, H, L, S) matrices an implementation that holds the scores is assumed to need at its peak:
scores, weights, temporaries, and with backward their gradients too. (On an H100 the unfused
versions peaked at 16 to 32 GiB at L = 8192, B = 4, H = 8 in float16: 4 to 8 score matrices.)"""
ACTIVATION_COPIES = {"forward": 8, "forward+backward": 24}  # (B, L, E) tensors: Q, K, V, ...
MEASUREMENT_OVERHEAD_S = 0.005
"""Seconds a measurement spends besides its calls and the memory probe: building the
implementation, comparing with the reference, recording."""
MEMORY_FRACTION = {"cuda": 0.9, "cpu": 0.5}
"""The share of the free memory a measurement may use: a GPU is the sweep's own; a CPU's RAM is
shared with everything else running."""


@dataclass(frozen=True)
class DeviceProfile:
    """What the planner knows about the device. Rates and overheads are measured at the start of
    a budgeted sweep; a test can write any profile by hand (a T4: ``type="cuda", capability=(7, 5),
    native_bf16=False``)."""

    type: str = "cpu"  # "cpu" or "cuda"
    capability: tuple[int, int] | None = None  # a GPU's compute capability
    native_bf16: bool = True
    flash_built: bool = True  # this torch was built with the flash kernel
    cudnn_built: bool = True  # ... with cuDNN
    available_bytes: float = math.inf  # memory one measurement may use
    matmul_rate: Mapping[str, float] = field(default_factory=dict)  # FLOP/s per dtype name
    matmul_n: int = 1024  # the square matmul those rates come from
    call_overhead_s: Mapping[tuple[str, str], float] = field(default_factory=dict)
    """Seconds of a call on 8 tokens, per (implementation, mode)."""
    measurement_overhead_s: float = 0.0  # per measurement, besides its calls
    slowdown: float = 1.0  # how much slower measured calls were than predicted (a busy machine)
    cost_factor: float = 1.0  # measurements' wall time over what measurement_s predicted


Seen = Mapping[tuple[str, str, str], Sequence[tuple[int, float | None, int | None]]]
"""What a sweep has measured so far: series -> [(length, seconds per call, peak bytes), ...]."""


def unsupported_reason(case: Case, profile: DeviceProfile) -> str | None:
    """Why this device cannot run the case, or None. A kernel that passes these checks may still
    refuse a call (head size, strides, ...): the sweep catches that and reports it the same way."""
    if profile.type == "cuda" and case.dtype == torch.bfloat16 and not profile.native_bf16:
        return (
            f"bfloat16: this GPU (compute capability {_sm(profile)}) has no native bfloat16; "
            "Ampere (8.0) and newer have"
        )
    kernel = getattr(case.implementation.kernel, "name", None)
    label = {name: label for label, name in SDPA_BACKENDS.items()}.get(kernel)
    if label in (None, "math"):
        return None
    if profile.type == "cpu":
        return None if label == "flash" else "this device has no such kernel"
    if profile.type != "cuda":
        return None  # the call itself will say
    half = case.dtype in (torch.float16, torch.bfloat16)
    needs = {"flash": (8, 0), "cuDNN": (8, 0), "mem-efficient": (5, 0)}[label]
    if label == "flash" and not profile.flash_built:
        return "this torch was built without the flash attention kernel"
    if label == "cuDNN" and not profile.cudnn_built:
        return "this torch was built without cuDNN"
    if profile.capability is not None and profile.capability < needs:
        return (
            f"the {label} kernel needs compute capability {needs[0]}.{needs[1]} or newer; "
            f"this GPU has {_sm(profile)}"
        )
    if label in ("flash", "cuDNN") and not half:
        return f"the {label} kernel runs float16 and bfloat16 only, not {case.dtype_name}"
    return None


def _sm(profile: DeviceProfile) -> str:
    return ".".join(map(str, profile.capability)) if profile.capability else "unknown"


def _overhead(profile: DeviceProfile, name: str, mode: str) -> float:
    """The implementation's measured overhead per call; for one not measured, the largest."""
    if (name, mode) in profile.call_overhead_s:
        return profile.call_overhead_s[name, mode]
    return max((s for (_, m), s in profile.call_overhead_s.items() if m == mode), default=0.0)


def predict_call_s(case: Case, profile: DeviceProfile, seen: Seen = {}) -> float:  # noqa: B006
    """Seconds one call of the case is predicted to take (see the module's docstring)."""
    history = [(L, s) for L, s, _ in seen.get(case.series, ()) if L < case.length and s]
    if history:
        L0, s0 = history[-1]  # the longest length measured
        growth = case.flops() / case.flops(L0)
        if len(history) >= 2 and s0 > history[-2][1]:  # as fast as it grew last time, if faster
            L1, s1 = history[-2]
            slope = min(math.log(s0 / s1) / math.log(L0 / L1), 2.5)
            growth = max(growth, (case.length / L0) ** slope)
        return s0 * growth
    rate = profile.matmul_rate.get(case.dtype_name)
    overhead = _overhead(profile, case.implementation.name, case.mode)
    return profile.slowdown * (overhead + (case.flops() / (rate * EFFICIENCY) if rate else 0.0))


def predict_peak_bytes(case: Case, seen: Seen = {}) -> float:  # noqa: B006
    """Extra bytes one call of the case is predicted to allocate at its peak (see the module's
    docstring): from the model before the implementation has been measured; after, its longest
    measured peak grown as L^q, q measured between its last two lengths (between 1 and 2), or
    2 for an implementation that holds the scores and 1 for one that does not."""
    history = [(L, peak) for L, _, peak in seen.get(case.series, ()) if L < case.length and peak]
    if history:
        L0, peak0 = history[-1]
        q = 2.0 if case.implementation.holds_scores else 1.0
        if len(history) >= 2:
            L1, peak1 = history[-2]
            q = min(max(math.log(peak0 / peak1) / math.log(L0 / L1), 1.0), 2.0)
        return peak0 * (case.length / L0) ** q
    x_bytes = case.batch * case.length * case.embed_dim * case.dtype.itemsize
    scores = SCORE_COPIES[case.mode] * case.score_bytes if case.implementation.holds_scores else 0
    return ACTIVATION_COPIES[case.mode] * x_bytes + scores


def measurement_s(call_s: float, run_time: float, profile: DeviceProfile) -> float:
    """Seconds one measurement takes: its overhead, the untimed calls, then ``run_time`` seconds of
    timed blocks (at least :data:`MIN_BLOCKS` calls; the last block may run a little over)."""
    timed = max(run_time + min(call_s, run_time / 10), MIN_BLOCKS * call_s)
    return profile.cost_factor * (profile.measurement_overhead_s + UNTIMED_CALLS * call_s + timed)


def group_s(case: Case, profile: DeviceProfile, run_time: float) -> float:
    """Seconds a (dtype, mode, length) costs once, whatever runs in it: the float64 reference
    (the first ``check_queries`` queries against every key) and the matmul rate measured next to it."""
    reference = mha_flops(
        case.batch, min(case.check_queries, case.length), case.embed_dim, case.mode, case.length
    )
    rate64 = profile.matmul_rate.get("float64")
    seconds = _overhead(profile, BASELINE, case.mode)
    seconds += reference / (rate64 * EFFICIENCY) if rate64 else 0.0
    rate = profile.matmul_rate.get(case.dtype_name)
    matmul = 2 * profile.matmul_n**3 / rate if rate else 0.0
    return profile.cost_factor * (seconds + max(run_time, (1 + MIN_BLOCKS) * matmul))


@dataclass(frozen=True)
class Plan:
    """Which cases to run (indices into the cases planned over) and each one's timed seconds."""

    run: frozenset[int]
    run_time: float
    predicted_s: float  # the whole plan, as predicted
    call_s: tuple[float, ...]  # the predicted seconds per call of every case


def plan(
    cases: Sequence[Case],
    seconds: float,
    profile: DeviceProfile,
    seen: Seen = {},  # noqa: B006
    *,
    min_run_time: float,
    max_run_time: float,
) -> Plan:
    """Choose the cases that fit in ``seconds`` and the timed seconds each one gets (see the
    module's docstring). Once a case does not fit, the longer lengths of its series are left out.
    The baseline (``torch MHA``) is taken with the cheapest case of each length: every time
    ratio needs it."""
    call_s = tuple(predict_call_s(c, profile, seen) for c in cases)
    cheapest = [measurement_s(s, min_run_time, profile) for s in call_s]
    least = {}  # group -> its cheapest measurement
    for case, cost in zip(cases, cheapest):
        least[case.group] = min(least.get(case.group, math.inf), cost)
    lengths = sorted({case.length for case in cases})  # of every series: ranks compare across

    def priority(i: int) -> tuple[int, float, int]:
        """The shortest length of every series first, cheapest first (the baseline with the
        cheapest of its length: every ratio needs it); then the next length, and so on."""
        case = cases[i]
        rank = lengths.index(case.length)
        baseline = case.implementation.name == BASELINE
        return rank, least[case.group] if baseline else cheapest[i], case.length

    chosen, total, paid, blocked = set(), 0.0, set(), set()
    for i in sorted(range(len(cases)), key=priority):
        case = cases[i]
        if case.series in blocked:
            continue
        cost = cheapest[i] + (0.0 if case.group in paid else group_s(case, profile, min_run_time))
        if total + cost <= seconds:
            chosen.add(i)
            paid.add(case.group)
            total += cost
        else:
            blocked.add(case.series)

    def extra(run_time: float) -> float:  # what longer timing adds to the chosen cases
        return sum(measurement_s(call_s[i], run_time, profile) - cheapest[i] for i in chosen)

    low, high = min_run_time, max(min_run_time, max_run_time)
    if extra(high) <= seconds - total:
        low = high
    else:
        for _ in range(40):  # bisect: extra() only grows with the run time
            middle = (low + high) / 2
            low, high = (middle, high) if extra(middle) <= seconds - total else (low, middle)
    return Plan(frozenset(chosen), low, total + extra(low), call_s)


def available_memory(device: torch.device) -> float:
    """Bytes a measurement may allocate now: on a GPU, the free memory plus what torch's caching
    allocator holds unused; on the CPU, the available RAM; each times :data:`MEMORY_FRACTION`."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        cached = torch.cuda.memory_reserved(device) - torch.cuda.memory_allocated(device)
        return MEMORY_FRACTION["cuda"] * (free + cached)
    if device.type == "cpu":
        try:
            import psutil

            free = psutil.virtual_memory().available
        except ImportError:  # psutil comes with Jupyter; without it, ask the OS
            try:
                free = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
            except (ValueError, OSError, AttributeError):  # not a system that says
                return math.inf
        return MEMORY_FRACTION["cpu"] * free
    return math.inf


def _flash_built() -> bool:
    available = getattr(torch.backends.cuda, "is_flash_attention_available", None)
    return available() if available is not None else True  # an older torch: the call will say


def native_bf16(device: torch.device) -> bool:
    """Whether ``device`` computes in bfloat16 natively (a CPU does; a GPU from Ampere, 8.0, on)."""
    if device.type != "cuda":
        return True
    try:
        return torch.cuda.is_bf16_supported(including_emulation=False)
    except TypeError:  # a torch without the argument answers for native support
        return torch.cuda.is_bf16_supported()


def _tiny_call_s(
    impl: Implementation, device, dtype, mode: str, embed_dim: int, heads: int, **timing
):
    """Seconds of the implementation's call on 8 tokens: what each of its calls costs besides its
    FLOPs. Its first call pays, before anything is timed, what only a first call pays (imports,
    kernel set-up). None if it cannot run here (its measurement will say why)."""
    backward = mode != "forward"
    params = MHAParams.random(embed_dim, heads, dtype=dtype, device=device)
    x = torch.randn(1, 8, embed_dim, dtype=dtype, device=device, requires_grad=backward)
    kernel = contextlib.nullcontext()
    if impl.kernel is not None:
        from torch.nn.attention import sdpa_kernel

        kernel = sdpa_kernel(impl.kernel)
    try:
        with kernel, warnings.catch_warnings():
            warnings.simplefilter("ignore")
            run, leaves = impl.build(params.requires_grad_(backward))

            def call():
                with torch.set_grad_enabled(backward):
                    out = run(x)
                    if backward:
                        torch.autograd.grad(out.sum(), [x, *leaves])

            return time_call(call, warmup=1, min_blocks=1, **timing).median
    except Exception:  # noqa: BLE001
        return None


def describe_device(
    device: torch.device,
    *,
    implementations: Sequence[Implementation] = (),
    dtypes: Sequence[torch.dtype] = (),
    modes: Sequence[str] = (),
    embed_dim: int = 64,
    heads: int = 4,
    matmul_n: int = 1024,
    run_time: float = 0.02,
    threads: int | None = None,
    deadline: float = math.inf,
) -> DeviceProfile:
    """The :class:`DeviceProfile` of ``device``: its kernels and memory; the matmul rate of each of
    ``dtypes`` and float64 (timed for about ``run_time`` seconds each); and the overhead of a tiny
    call of each of ``implementations`` in each of ``modes`` (in the first dtype; this also pays,
    before any timing, what their first calls cost; none after ``deadline``, a
    ``time.perf_counter()`` value). With no dtypes nothing is timed."""
    cuda = device.type == "cuda"
    profile = DeviceProfile(
        type=device.type,
        capability=torch.cuda.get_device_capability(device) if cuda else None,
        native_bf16=native_bf16(device),
        flash_built=not cuda or _flash_built(),
        cudnn_built=not cuda or torch.backends.cudnn.is_available(),
        available_bytes=available_memory(device),
        matmul_n=matmul_n,
    )
    if not dtypes:
        return profile
    timing = dict(threads=threads, min_run_time=run_time, max_run_time=run_time)
    rates = {}
    for dtype in (*dtypes, torch.float64):
        n = matmul_n if dtype != torch.float64 else max(matmul_n // 2, 64)
        name = str(dtype).removeprefix("torch.")
        rates[name] = matmul_rate(device, dtype, n=n, warmup=1, **timing)
    tiny = dict(threads=threads, min_run_time=run_time / 10, max_run_time=run_time / 10)
    overheads = {}
    for impl, mode in itertools.product(implementations, modes):
        case = Case(impl, dtypes[0], mode, 8, 1, embed_dim, heads)
        if time.perf_counter() < deadline and not unsupported_reason(case, profile):
            seconds = _tiny_call_s(impl, device, dtypes[0], mode, embed_dim, heads, **tiny)
            overheads.update({(impl.name, mode): seconds} if seconds else {})
    peak_memory(lambda: None, device)  # the profiler starts slower the first time
    start = time.perf_counter()
    peak_memory(lambda: None, device)
    probe = time.perf_counter() - start
    return dataclasses.replace(
        profile,
        matmul_rate=rates,
        call_overhead_s=overheads,
        measurement_overhead_s=probe + MEASUREMENT_OVERHEAD_S,
    )
