"""An honest benchmark of multi-head attention: correctness first, then time, memory and FLOP/s.

For every implementation, sequence length, dtype and mode ("forward" or "forward+backward"):

1. **Correctness gate.** Its output (and, with backward, the gradient of the input) is compared with
   a float64 reference (``torch.nn.MultiheadAttention`` with the same weights). A wrong one is
   reported as ``"wrong"`` and never timed. Attention rows are independent, so the reference only
   computes the first ``check_queries`` queries against all keys: exact, and cheap at any length.
2. **Peak memory,** in a separate untimed call. On a GPU: ``torch.cuda.max_memory_allocated`` above
   what was allocated before the call. On the CPU: ``torch.profiler`` with ``profile_memory=True``
   records every allocation and free made through PyTorch's CPU allocator during the call; the peak
   of their running sum is the extra memory the call needed (memory from outside PyTorch's
   allocator, e.g. a BLAS library's own buffers, is not seen). The analytic size of one
   (B, H, L, S) score matrix is recorded next to it.
3. **Time,** with ``torch.utils.benchmark``: warm-up calls, then blocks of calls until there are
   at least four and ``min_run_time`` has passed, and until the spread settles (or
   ``max_run_time``); the median and the interquartile range over blocks. A result whose IQR is
   over 20% of its median is flagged "noisy". The thread count is set explicitly and recorded;
   the timer synchronises CUDA before reading the clock.

Out of memory is recorded as ``"oom"`` (longer lengths of the same implementation are skipped) and
the sweep goes on. FLOPs are counted analytically (the matmuls of one MHA call; backward costs twice
the forward), and the machine's square-matmul rate is measured in the same run, before each length,
so each result says how close to the limit it gets (and a rate that moves during a sweep shows that
something else was using the machine).

Run ``python -m mha_course.bench`` for the standard sweep, ``--quick`` for a small one, ``--help``
for the options. From Python: :func:`run_sweep`, :func:`to_table`, :func:`to_csv`/:func:`to_json`,
:func:`load`, :func:`plot_sweep`, :func:`ratio`, :func:`growth_exponent`, :func:`summary`.
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import dataclasses
import datetime
import json
import math
import os
import platform
import re
import sys
import warnings
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch.utils import benchmark

from .variants import MHAParams, mha_einops, mha_einsum, mha_loop, mha_sdpa

__all__ = [
    "Environment",
    "Result",
    "Sweep",
    "Implementation",
    "standard_implementations",
    "run_sweep",
    "quick_sweep",
    "standard_sweep",
    "time_call",
    "peak_memory",
    "memory_method",
    "matmul_rate",
    "mha_flops",
    "environment",
    "to_table",
    "to_csv",
    "to_json",
    "load",
    "plot_sweep",
    "line_styles",
    "ratio",
    "growth_exponent",
    "summary",
    "main",
]

FORWARD, BACKWARD = "forward", "forward+backward"
BASELINE = "torch MHA"  # the "× torch" column divides by this implementation's time
TOLERANCE = {torch.float64: 1e-9, torch.float32: 1e-3, torch.float16: 2e-2, torch.bfloat16: 5e-2}
"""Largest relative error (max |got - ref| / max |ref|) the correctness gate accepts, per dtype."""
NOISY = 0.2
"""A timing whose IQR exceeds this fraction of its median is flagged: something else was running."""


# --- records -----------------------------------------------------------------------------------------


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
    the correctness gate, not timed), "oom", "unsupported" (e.g. a kernel this device lacks),
    "unavailable" (not installed) or "error" (``message`` says what)."""

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


@dataclass(frozen=True)
class Implementation:
    """A named way to compute self-attention on x (B, L, E).

    ``build(params)`` gets the shared weights (already in the sweep's dtype and device) and returns
    ``(run, leaves)``: ``run(x)`` returns the (B, L, E) output; ``leaves`` are the parameter
    tensors a training step differentiates. ``kernel`` optionally forces an SDPA backend.
    """

    name: str
    build: Callable[[MHAParams], tuple[Callable, list[torch.Tensor]]]
    kernel: object = None


# --- the implementations -----------------------------------------------------------------------------


def _functional(variant: Callable) -> Callable:
    def build(params: MHAParams):
        return (lambda x: variant(x, x, x, params)[0]), params.tensors()

    return build


def _torch_module(need_weights: bool) -> Callable:
    def build(params: MHAParams):
        module = params.to_torch().eval()
        return (lambda x: module(x, x, x, need_weights=need_weights)[0]), list(module.parameters())

    return build


def _package_module(need_weights: bool) -> Callable:
    def build(params: MHAParams):
        from .multihead import MultiHeadAttention  # imported when used: the harness stands alone

        module = MultiHeadAttention.from_torch(params.to_torch()).eval()
        return (lambda x: module(x, x, x, need_weights=need_weights)[0]), list(module.parameters())

    return build


def _compiled(build: Callable) -> Callable:
    def build_compiled(params: MHAParams):
        run, leaves = build(params)
        return torch.compile(run), leaves

    return build_compiled


def _sdpa_backends() -> dict[str, object]:
    """SDPA's kernels by name, those this torch knows (forced one at a time with ``sdpa_kernel``)."""
    from torch.nn.attention import SDPBackend

    names = {
        "math": "MATH",
        "flash": "FLASH_ATTENTION",
        "mem-efficient": "EFFICIENT_ATTENTION",
        "cuDNN": "CUDNN_ATTENTION",
    }
    return {
        label: getattr(SDPBackend, name)
        for label, name in names.items()
        if hasattr(SDPBackend, name)
    }


def standard_implementations(compile: bool = False) -> list[Implementation]:
    """Everything lesson 06 compares. Forced SDPA kernels the device lacks come out "unsupported"
    (on a CPU only math and flash exist). ``compile=True`` adds ``torch.compile`` versions (meant
    for a GPU; on a CPU it needs a C++ compiler and takes a while to compile)."""
    impls = [
        Implementation("loop over heads", _functional(mha_loop)),
        Implementation("einsum", _functional(mha_einsum)),
        Implementation("batched matmul (einops)", _functional(mha_einops)),
        Implementation("SDPA", _functional(mha_sdpa)),
        *(
            Implementation(f"SDPA {label}", _functional(mha_sdpa), kernel)
            for label, kernel in _sdpa_backends().items()
        ),
        Implementation("package MHA", _package_module(need_weights=False)),
        Implementation("package MHA, need_weights", _package_module(need_weights=True)),
        Implementation(BASELINE, _torch_module(need_weights=False)),
        Implementation(f"{BASELINE}, need_weights", _torch_module(need_weights=True)),
    ]
    if compile:
        impls += [
            Implementation("batched matmul, compiled", _compiled(_functional(mha_einops))),
            Implementation("SDPA, compiled", _compiled(_functional(mha_sdpa))),
        ]
    return impls


# --- measuring ---------------------------------------------------------------------------------------


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


def time_call(
    fn: Callable,
    *,
    threads: int,
    min_run_time: float = 0.2,
    max_run_time: float | None = None,
    warmup: int = 2,
    min_blocks: int = 3,
) -> tuple[float, float, int]:
    """``(median, iqr, runs)`` in seconds of ``fn()``, with ``torch.utils.benchmark``.

    ``warmup`` calls first (lazy initialisation, caches, compilation), then torch's
    ``adaptive_autorange``: blocks of calls (enough per block that the timer's own overhead is
    negligible) until at least four blocks and ``min_run_time`` seconds, and until the IQR is
    within 10% of the median or ``max_run_time`` (default 10 × ``min_run_time``, at least 1 s)
    is spent. A call slower than ``max_run_time`` still gets ``min_blocks`` blocks, so that the
    IQR means something. ``runs`` is the number of blocks behind the median.
    """
    for _ in range(warmup):
        fn()
    timer = benchmark.Timer(stmt="fn()", globals={"fn": fn}, num_threads=threads)
    max_run_time = max(10 * min_run_time, 1.0) if max_run_time is None else max_run_time
    measurement = timer.adaptive_autorange(
        threshold=0.1, min_run_time=min_run_time, max_run_time=max_run_time
    )
    if len(measurement.times) < min_blocks:  # the time budget ran out first: add blocks
        number = measurement.number_per_run
        raw = [t * number for t in measurement.times]
        raw += [timer.timeit(number).raw_times[0] for _ in range(min_blocks - len(raw))]
        measurement = benchmark.Measurement(number, raw, measurement.task_spec)
    return measurement.median, measurement.iqr, len(measurement.times)


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
    from torch.profiler import ProfilerActivity, profile

    with (
        _native_stderr_silenced(),
        profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof,
    ):
        fn()
    try:
        events = prof.profiler.kineto_results.events()
    except AttributeError:  # a torch whose profiler keeps its events elsewhere
        return None
    changes = sorted(
        (e.start_ns(), e.nbytes())
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
    """Extra bytes allocated at the peak of one ``fn()`` call (untimed; see :func:`memory_method`)."""
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
    threads: int,
    min_run_time: float = 0.2,
    max_run_time: float | None = None,
) -> float:
    """FLOP/s of an (n, n) @ (n, n) matmul here: the practical ceiling attention is compared with."""
    a, b = (torch.randn(n, n, device=device, dtype=dtype) for _ in range(2))
    median, _, _ = time_call(
        lambda: a @ b, threads=threads, min_run_time=min_run_time, max_run_time=max_run_time
    )
    return 2 * n**3 / median


def _is_oom(error: BaseException) -> bool:
    """A GPU raises torch.OutOfMemoryError; the CPU allocator a RuntimeError "can't allocate memory"."""
    if isinstance(error, (torch.OutOfMemoryError, MemoryError)):
        return True
    text = str(error).lower()
    return isinstance(error, RuntimeError) and (
        "out of memory" in text or "can't allocate memory" in text
    )


def _first_sentence(text: str) -> str:
    """The gist of an error: its first sentence, without the C++ "[enforce fail at ...]" prefix
    or the "(Triggered internally at <source file>)" suffix of torch's warnings."""
    text = re.sub(r"\s*\(Triggered internally at [^)]*\)\.?", "", text)
    text = re.sub(r"^\[enforce fail[^\]]*\][^.]*\.\s*", "", text.strip())
    return (text.splitlines() or [""])[0].split(". ")[0][:160]


def _is_unsupported(error: BaseException) -> bool:
    text = str(error)
    return isinstance(error, RuntimeError) and (
        "No viable backend" in text or "No available kernel" in text
    )


def _device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(device: torch.device, threads: int) -> Environment:
    """The facts a reader needs to compare these numbers with theirs."""
    return Environment(
        torch_version=torch.__version__,
        python_version=platform.python_version(),
        platform=platform.platform(),
        device=device.type,
        device_name=_device_name(device),
        threads=threads,
        cuda_version=torch.version.cuda or "",
        memory_method=memory_method(device),
        timestamp=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
    )


# --- the sweep ---------------------------------------------------------------------------------------


@dataclass
class _Case:
    """The inputs and float64 reference shared by every implementation at one (dtype, mode, L)."""

    x: torch.Tensor
    grad_out: torch.Tensor | None
    ref_out: torch.Tensor
    ref_grad: torch.Tensor | None
    n_check: int


def _make_case(
    params64: MHAParams, B: int, L: int, dtype, device, mode: str, n_check: int, seed: int
) -> _Case:
    generator = torch.Generator().manual_seed(seed + L)
    x = torch.randn(B, L, params64.embed_dim, generator=generator, dtype=torch.float64).to(device)
    grad_out = torch.randn(B, L, params64.embed_dim, generator=generator, dtype=torch.float64).to(
        device
    )
    x, grad_out = x.to(dtype), grad_out.to(dtype)
    n_check = min(n_check, L)
    x64 = x.double().requires_grad_(mode == BACKWARD)
    reference = params64.to(device=device).to_torch().eval()
    with torch.set_grad_enabled(mode == BACKWARD):
        ref_out = reference(x64[:, :n_check], x64, x64, need_weights=False)[
            0
        ]  # the first queries only
        ref_grad = None
        if mode == BACKWARD:
            (ref_grad,) = torch.autograd.grad(ref_out, x64, grad_out[:, :n_check].double())
    return _Case(
        x.requires_grad_(mode == BACKWARD),
        grad_out if mode == BACKWARD else None,
        ref_out.detach(),
        ref_grad,
        n_check,
    )


def _relative_error(got: torch.Tensor, ref: torch.Tensor) -> float:
    got = got.detach().double()
    if not torch.isfinite(got).all():
        return math.inf
    return ((got - ref).abs().max() / ref.abs().max().clamp_min(1e-30)).item()


def _gate(run: Callable, case: _Case, mode: str) -> float:
    """The implementation's relative error against the float64 reference (output, input gradient)."""
    with torch.set_grad_enabled(mode == BACKWARD):
        out = run(case.x)
    error = _relative_error(out[:, : case.n_check], case.ref_out)
    if mode == BACKWARD:
        upstream = torch.zeros_like(out)
        upstream[:, : case.n_check] = case.grad_out[:, : case.n_check]
        (grad,) = torch.autograd.grad(out, case.x, upstream)
        error = max(error, _relative_error(grad, case.ref_grad))
    return error


def _call(
    run: Callable, leaves: list[torch.Tensor], case: _Case, mode: str
) -> Callable[[], object]:
    """The thing that is timed: a forward under no_grad, or a forward and its full backward."""
    if mode == FORWARD:

        def forward():
            with torch.no_grad():
                return run(case.x)

        return forward

    def forward_backward():
        out = run(case.x)
        return torch.autograd.grad(out, [case.x, *leaves], case.grad_out)

    return forward_backward


def _measure(
    impl: Implementation,
    params: MHAParams,
    case: _Case,
    base: Result,
    device: torch.device,
    *,
    threads: int,
    min_run_time: float,
    max_run_time: float | None,
) -> Result:
    """Gate, memory, time, for one implementation; failures become a status, never an exception."""
    kernel = contextlib.nullcontext()
    if impl.kernel is not None:
        from torch.nn.attention import sdpa_kernel

        kernel = sdpa_kernel(impl.kernel)
    try:
        with kernel, warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", UserWarning)  # a forced kernel says why it cannot run
            params.requires_grad_(base.mode == BACKWARD)
            run, leaves = impl.build(params)
            error = _gate(run, case, base.mode)
            if not error <= TOLERANCE[case.x.dtype]:
                return dataclasses.replace(
                    base,
                    status="wrong",
                    max_error=error,
                    message=f"relative error {error:.2g} > {TOLERANCE[case.x.dtype]:g}",
                )
            call = _call(run, leaves, case, base.mode)
            peak = peak_memory(call, device)
            median, iqr, runs = time_call(  # the gate and the memory pass were the warm-up calls
                call,
                threads=threads,
                min_run_time=min_run_time,
                max_run_time=max_run_time,
                warmup=0,
            )
    except ImportError as error:
        return dataclasses.replace(base, status="unavailable", message=str(error))
    except Exception as error:  # noqa: BLE001  (a failing implementation must not stop the sweep)
        if device.type == "cuda":
            torch.cuda.empty_cache()
        status = "oom" if _is_oom(error) else "unsupported" if _is_unsupported(error) else "error"
        why = f"{type(error).__name__}: {_first_sentence(str(error))}"
        if (
            status == "unsupported"
        ):  # the kernels' warnings say why (dtype, head size, ...); the error does not
            reasons = [_first_sentence(str(w.message)) for w in caught]
            why = "; ".join(dict.fromkeys(reasons)) or "this device has no such kernel"
        return dataclasses.replace(base, status=status, message=why)
    rate = base.flops / median
    noisy = f"noisy: IQR {100 * iqr / median:.0f}% of the median" if iqr > NOISY * median else ""
    return dataclasses.replace(
        base,
        status="ok",
        message=noisy,
        max_error=error,
        median_s=median,
        iqr_s=iqr,
        runs=runs,
        peak_bytes=peak,
        flop_rate=rate,
        matmul_fraction=rate / base.matmul_flop_rate if base.matmul_flop_rate else None,
    )


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
    min_run_time: float = 0.2,
    max_run_time: float | None = None,
    check_queries: int = 128,
    matmul_n: int | None = None,
    seed: int = 0,
    progress: Callable[[Result], None] | None = None,
) -> Sweep:
    """Benchmark ``implementations`` (default: :func:`standard_implementations`) on self-attention
    of x (batch, L, embed_dim) for every L in ``lengths``, dtype and mode. All share one set of
    weights. Returns a :class:`Sweep` (a list of :class:`Result`) carrying its :class:`Environment`.

    ``dtypes`` defaults to float32 on a CPU, float16 and bfloat16 on a GPU. ``threads`` defaults to
    the current ``torch.get_num_threads()``; it is set for the sweep, recorded, and restored after.
    ``min_run_time``/``max_run_time`` bound each measurement (see :func:`time_call`); the float64
    reference checks the first ``check_queries`` queries; ``matmul_n`` sizes the matmul whose rate
    is the ceiling. ``progress`` is called with each result as it comes.
    """
    device = (
        torch.device(device)
        if device is not None
        else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    if device.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {str(device)!r} was asked for, but this torch sees no CUDA GPU")
    if dtypes is None:
        dtypes = (torch.float16, torch.bfloat16) if device.type == "cuda" else (torch.float32,)
    for mode in modes:
        if mode not in (FORWARD, BACKWARD):
            raise ValueError(f"modes must be {FORWARD!r} or {BACKWARD!r}, got {mode!r}")
    if embed_dim % heads:
        raise ValueError(f"embed_dim {embed_dim} is not divisible by heads {heads}")
    implementations = (
        standard_implementations() if implementations is None else list(implementations)
    )
    threads_before = torch.get_num_threads()
    threads = threads or threads_before
    torch.set_num_threads(threads)
    params64 = MHAParams.random(embed_dim, heads, seed=seed, dtype=torch.float64)
    timing = dict(threads=threads, min_run_time=min_run_time, max_run_time=max_run_time)
    sweep = Sweep(environment=environment(device, threads))
    try:
        for dtype in dtypes:
            params = params64.to(dtype=dtype, device=device)
            for mode in modes:
                given_up: dict[
                    str, int
                ] = {}  # implementation -> the length it ran out of memory at
                for L in sorted(lengths):
                    # the ceiling is measured next to the results it is compared with, at every length:
                    # if it moves during a sweep, something else is using the machine
                    ceiling = matmul_rate(
                        device,
                        dtype,
                        n=matmul_n or (4096 if device.type == "cuda" else 1024),
                        **timing,
                    )
                    base = Result(
                        implementation="",
                        device=device.type,
                        dtype=str(dtype).removeprefix("torch."),
                        mode=mode,
                        batch=batch,
                        length=L,
                        embed_dim=embed_dim,
                        heads=heads,
                        status="",
                        score_bytes=batch * heads * L * L * dtype.itemsize,
                        flops=mha_flops(batch, L, embed_dim, mode),
                        matmul_flop_rate=ceiling,
                    )
                    case = _make_case(params64, batch, L, dtype, device, mode, check_queries, seed)
                    for impl in implementations:
                        result = dataclasses.replace(base, implementation=impl.name)
                        if impl.name in given_up:
                            result.status, result.message = (
                                "oom",
                                f"skipped: out of memory at L={given_up[impl.name]}",
                            )
                        else:
                            result = _measure(impl, params, case, result, device, **timing)
                            if result.status == "oom":
                                given_up[impl.name] = L
                        sweep.append(result)
                        if progress is not None:
                            progress(result)
    finally:
        torch.set_num_threads(threads_before)
    return sweep


def quick_sweep(device=None, threads: int | None = None, **overrides) -> Sweep:
    """A small sweep that takes a few seconds on two CPU cores: two lengths, forward only."""
    settings = dict(
        lengths=(64, 256),
        batch=1,
        embed_dim=128,
        heads=4,
        modes=(FORWARD,),
        min_run_time=0.02,
        max_run_time=0.1,
        check_queries=32,
        matmul_n=512,
    )
    return run_sweep(device=device, threads=threads, **{**settings, **overrides})


def standard_sweep(device=None, threads: int | None = None, **overrides) -> Sweep:
    """The lesson's sweep: d_model = 512, h = 8; L up to 2048 on a CPU (float32), up to 8192 on a
    GPU (float16 and bfloat16, batch 4); forward and forward+backward."""
    device = (
        torch.device(device)
        if device is not None
        else torch.device("cuda" if torch.cuda.is_available() else "cpu")
    )
    if device.type == "cuda":
        settings = dict(lengths=(256, 512, 1024, 2048, 4096, 8192), batch=4, min_run_time=0.5)
    else:
        settings = dict(lengths=(128, 256, 512, 1024, 2048), batch=1, min_run_time=0.2)
    return run_sweep(device=device, threads=threads, **{**settings, **overrides})


# --- reading the results -----------------------------------------------------------------------------


def _select(
    results: Iterable[Result], implementation: str, mode: str | None, dtype: str | None
) -> dict[int, Result]:
    return {
        r.length: r
        for r in results
        if r.implementation == implementation
        and r.status == "ok"
        and (mode is None or r.mode == mode)
        and (dtype is None or r.dtype == dtype)
    }


def ratio(
    results: Iterable[Result],
    implementation: str,
    baseline: str = BASELINE,
    *,
    mode: str = FORWARD,
    dtype: str | None = None,
) -> dict[int, float]:
    """Time of ``implementation`` / time of ``baseline``, per length, same run (> 1 means slower)."""
    results = list(results)
    ours, theirs = (
        _select(results, implementation, mode, dtype),
        _select(results, baseline, mode, dtype),
    )
    return {L: ours[L].median_s / theirs[L].median_s for L in sorted(ours.keys() & theirs.keys())}


def growth_exponent(
    results: Iterable[Result],
    implementation: str,
    quantity: str = "peak_bytes",
    *,
    mode: str = FORWARD,
    dtype: str | None = None,
    min_length: int = 0,
) -> float | None:
    """The slope p of a least-squares fit log(quantity) = p·log(L) + c over lengths ≥ ``min_length``:
    2 means quadratic growth. ``quantity`` is a numeric :class:`Result` field such as "peak_bytes"
    or "median_s". At short lengths the linear terms (projections) still dominate, so the slope
    over the longest lengths is the one that shows the L² term."""
    points = [
        (math.log(L), math.log(getattr(r, quantity)))
        for L, r in sorted(_select(results, implementation, mode, dtype).items())
        if getattr(r, quantity) and L >= min_length
    ]
    if len(points) < 2:
        return None
    mx = sum(x for x, _ in points) / len(points)
    my = sum(y for _, y in points) / len(points)
    return sum((x - mx) * (y - my) for x, y in points) / sum((x - mx) ** 2 for x, _ in points)


def summary(results: Sequence[Result], *, dtype: str | None = None, fit_lengths: int = 3) -> str:
    """The lesson's headline numbers, per mode: package MHA over torch MHA, SDPA over the loop
    (time ratios per length, same run), and a table of how peak memory grows at the long end: the
    least-squares log-log slope over the ``fit_lengths`` longest lengths (2 is quadratic, 1 linear)."""
    lines = []
    modes = list(dict.fromkeys(r.mode for r in results))
    for mode in modes:
        lines.append(f"{mode}:")
        for ours, theirs in (
            ("package MHA", BASELINE),
            ("package MHA, need_weights", f"{BASELINE}, need_weights"),
            ("SDPA", "loop over heads"),
        ):
            ratios = ratio(results, ours, theirs, mode=mode, dtype=dtype)
            if ratios:
                shown = ", ".join(f"{q:.2f} (L={L})" for L, q in ratios.items())
                lines.append(f"  time {ours} / {theirs}: {shown}")
        lengths = sorted({r.length for r in results if r.mode == mode})
        if len(lengths) >= 2:
            fitted = lengths[-max(2, fit_lengths) :]
            slopes = {
                name: growth_exponent(
                    results, name, "peak_bytes", mode=mode, dtype=dtype, min_length=fitted[0]
                )
                for name in dict.fromkeys(r.implementation for r in results if r.mode == mode)
            }
            slopes = {name: p for name, p in slopes.items() if p is not None}
            if slopes:
                lines.append(
                    f"  peak memory ∝ L^p, p fitted over L = {', '.join(map(str, fitted))}:"
                )
                width = max(len(name) for name in slopes)
                lines += [f"    {name:<{width}}  p = {p:.2f}" for name, p in slopes.items()]
    return "\n".join(lines)


def _time(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("µs", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:.3g} {unit}"
    return f"{seconds / 1e-9:.3g} ns"


def _bytes(n: float | None) -> str:
    if n is None:
        return "-"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} B"


def _ceiling(rows: Sequence[Result]) -> str:
    """The matmul rates measured during a block of results, and a warning when they moved."""
    rates = [r.matmul_flop_rate for r in rows if r.matmul_flop_rate]
    if not rates:
        return ""
    low, high = min(rates) / 1e9, max(rates) / 1e9
    text = (
        f", matmul {high:.1f} GFLOP/s"
        if f"{low:.1f}" == f"{high:.1f}"
        else f", matmul {low:.1f} to {high:.1f} GFLOP/s"
    )
    if (
        high > 1.5 * low
    ):  # small matmuls vary by tens of percent on their own; contention costs far more
        text += "\nWARNING: the matmul rate moved during this block: something else was running; rerun for clean numbers"
    return text


def to_table(results: Sequence[Result], environment: Environment | None = None) -> str:
    """A plain-text table, one block per (device, dtype, mode), rows by length then implementation.

    "× torch" is the time over ``torch MHA``'s at the same length; "% matmul" the achieved FLOP/s
    over the square-matmul rate measured in the same run, just before that length.
    """
    environment = environment or getattr(results, "environment", None)
    lines = []
    if environment is not None:
        e = environment
        lines.append(
            f"torch {e.torch_version} | {e.device}: {e.device_name} | {e.threads} thread{'s' if e.threads != 1 else ''} | {e.timestamp}"
        )
        lines.append(f"peak memory: {e.memory_method}")
    header = (
        f"{'implementation':<28}{'L':>6}{'median':>11}{'IQR':>10}{'× torch':>9}{'GFLOP/s':>9}"
        f"{'% matmul':>9}{'peak mem':>11}{'scores':>11}  status"
    )
    groups: dict[tuple, list[Result]] = {}
    for r in results:
        groups.setdefault((r.device, r.dtype, r.mode, r.batch, r.embed_dim, r.heads), []).append(r)
    for (device, dtype, mode, B, E, H), rows in groups.items():
        lines += [
            "",
            f"{mode}, {dtype} on {device}, B={B} E={E} H={H}{_ceiling(rows)}",
            header,
            "-" * len(header),
        ]
        baseline = {
            r.length: r.median_s for r in rows if r.implementation == BASELINE and r.status == "ok"
        }
        order = {name: i for i, name in enumerate(dict.fromkeys(r.implementation for r in rows))}
        for r in sorted(rows, key=lambda r: (r.length, order[r.implementation])):
            vs = (
                f"{r.median_s / baseline[r.length]:.2f}"
                if r.median_s and baseline.get(r.length)
                else "-"
            )
            gflops = f"{r.flop_rate / 1e9:.1f}" if r.flop_rate else "-"
            frac = f"{100 * r.matmul_fraction:.0f}%" if r.matmul_fraction else "-"
            status = f"{r.status}: {r.message}"[:80] if r.message else r.status
            lines.append(
                f"{r.implementation:<28}{r.length:>6}{_time(r.median_s):>11}{_time(r.iqr_s):>10}"
                f"{vs:>9}{gflops:>9}{frac:>9}{_bytes(r.peak_bytes):>11}{_bytes(r.score_bytes):>11}  {status}"
            )
    return "\n".join(lines)


def _environment_of(results, environment):
    environment = environment or getattr(results, "environment", None)
    if environment is None:
        raise ValueError("no environment: pass environment=, or results from run_sweep (a Sweep)")
    return environment


def to_csv(results: Sequence[Result], path, environment: Environment | None = None) -> None:
    """Tidy CSV: one row per result, the environment's fields repeated on every row."""
    env = dataclasses.asdict(_environment_of(results, environment))
    names = [f.name for f in dataclasses.fields(Result)] + list(env)
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=names)
        writer.writeheader()
        for r in results:
            writer.writerow({**dataclasses.asdict(r), **env})


def to_json(results: Sequence[Result], path, environment: Environment | None = None) -> None:
    """``{"environment": {...}, "results": [{...}, ...]}``."""
    env = _environment_of(results, environment)
    with open(path, "w") as f:
        json.dump(
            {
                "environment": dataclasses.asdict(env),
                "results": [dataclasses.asdict(r) for r in results],
            },
            f,
            indent=1,
        )


def _parse(cls, row: dict) -> object:
    """Rebuild a dataclass from CSV strings, using its annotations ("" is None for optional fields)."""
    values = {}
    for f in dataclasses.fields(cls):
        text, kind = row[f.name], str(f.type)
        if text == "" and "None" in kind:
            values[f.name] = None
        elif kind.startswith("int"):
            values[f.name] = int(text)
        elif kind.startswith("float"):
            values[f.name] = float(text)
        else:
            values[f.name] = text
    return cls(**values)


def load(path) -> Sweep:
    """Read a sweep written by :func:`to_csv` or :func:`to_json` (chosen by the file's suffix)."""
    path = os.fspath(path)
    if path.endswith(".json"):
        with open(path) as f:
            data = json.load(f)
        return Sweep([Result(**r) for r in data["results"]], Environment(**data["environment"]))
    with open(path, newline="") as f:
        rows = list(csv.DictReader(f))
    environment = _parse(Environment, rows[0]) if rows else None
    return Sweep([_parse(Result, row) for row in rows], environment)


_MARKERS = "osD^vP*Xh<>p"
_COLORS = [
    "tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
    "tab:pink", "tab:gray", "tab:olive", "tab:cyan", "black", "gold",
]  # fmt: skip


def line_styles(names: Sequence[str]) -> dict[str, dict]:
    """One distinct matplotlib style (color, marker, line style) per implementation name, in
    order, so that lines lying on top of each other stay distinguishable: markers are hollow and
    of different shapes. Pass ``**line_styles(names)[name]`` to ``ax.plot``."""
    return {
        name: dict(
            color=_COLORS[i % len(_COLORS)],
            marker=_MARKERS[i % len(_MARKERS)],
            linestyle=("-", "--", "-.")[(i // len(_COLORS)) % 3],
            markerfacecolor="none",
            markersize=7 if i % 2 else 5,
        )
        for i, name in enumerate(names)
    }


def plot_sweep(
    results: Sequence[Result],
    *,
    mode: str = FORWARD,
    dtype: str | None = None,
    implementations: Sequence[str] | None = None,
    axes=None,
):
    """Log-log plots of median time and peak memory against sequence length L, one line per
    implementation (styles from :func:`line_styles` of ``implementations`` when given, so that a
    name keeps its style across plots), vertical bars one IQR long centred on each
    median time, a dashed L² guide line through the largest value at the longest L, and (memory
    panel) the analytic size of one score matrix. The legend is outside, right of the memory
    panel. Returns the figure."""
    import matplotlib.pyplot as plt

    rows = [
        r
        for r in results
        if r.mode == mode and r.status == "ok" and (dtype is None or r.dtype == dtype)
    ]
    if not rows:
        raise ValueError(f"no successful results with mode={mode!r} and dtype={dtype!r} to plot")
    names = list(dict.fromkeys(r.implementation for r in rows))
    names = [n for n in names if implementations is None or n in implementations]
    styles = line_styles(
        names if implementations is None else implementations
    )  # same in every plot
    if axes is None:
        fig, axes = plt.subplots(1, 2, figsize=(13, 4.5))
    fig = axes[0].figure
    lengths = sorted({r.length for r in rows})
    panels = (
        (axes[0], "median_s", 1.0, "median time per call (s); bars: IQR"),
        (axes[1], "peak_bytes", 2.0**20, "peak memory of one call (MiB)"),
    )
    for ax, quantity, unit, label in panels:
        for name in names:
            mine = sorted(
                (r for r in rows if r.implementation == name and getattr(r, quantity)),
                key=lambda r: r.length,
            )
            if not mine:
                continue
            values = [getattr(r, quantity) / unit for r in mine]
            ax.plot([r.length for r in mine], values, label=name, **styles[name])
            spread = [(r.length, v, r.iqr_s / unit) for r, v in zip(mine, values) if r.iqr_s]
            if quantity == "median_s" and spread:
                L, v, iqr = zip(*spread)
                low = [max(m - q / 2, m / 10) for m, q in zip(v, iqr)]  # a log axis stays > 0
                ax.vlines(L, low, [m + q / 2 for m, q in zip(v, iqr)], color=styles[name]["color"])
        ends = [
            (r.length, getattr(r, quantity) / unit)
            for r in rows
            if r.implementation in names and getattr(r, quantity)
        ]
        if ends:
            L_max = max(L for L, _ in ends)
            top = max(v for L, v in ends if L == L_max)
            ax.plot(
                lengths,
                [top * (L / L_max) ** 2 for L in lengths],
                "k--",
                linewidth=1,
                label="∝ L² (guide)",
            )
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("sequence length L")
        ax.set_ylabel(label)
        ax.grid(True, which="both", alpha=0.3)
    scores = sorted({(r.length, r.score_bytes / 2.0**20) for r in rows})
    axes[1].plot(*zip(*scores), ":", color="grey", label="one (B, H, L, L) score matrix")
    first = rows[0]
    fig.suptitle(
        f"{mode}, {first.dtype if dtype is None else dtype} on {first.device}, "
        f"B={first.batch}, d_model={first.embed_dim}, h={first.heads}"
    )
    axes[1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    fig.tight_layout()
    return fig


# --- command line ------------------------------------------------------------------------------------


def _lengths(text: str) -> tuple[int, ...]:
    try:
        lengths = tuple(int(n) for n in text.split(","))
    except ValueError:
        lengths = ()
    if not lengths or min(lengths) <= 0:
        raise argparse.ArgumentTypeError(
            f"expected positive integers separated by commas, got {text!r}"
        )
    return lengths


def _modes(text: str) -> tuple[str, ...]:
    modes = tuple(BACKWARD if m.strip() == "backward" else m.strip() for m in text.split(","))
    if not set(modes) <= {FORWARD, BACKWARD}:
        raise argparse.ArgumentTypeError(
            f"modes are {FORWARD!r} and {BACKWARD!r} (or 'backward'), got {text!r}"
        )
    return modes


def _dtypes(text: str) -> tuple[torch.dtype, ...]:
    dtypes = tuple(getattr(torch, name.strip(), None) for name in text.split(","))
    if not all(isinstance(d, torch.dtype) and d.is_floating_point for d in dtypes):
        raise argparse.ArgumentTypeError(
            f"expected floating dtypes such as float32,bfloat16, got {text!r}"
        )
    return dtypes


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m mha_course.bench", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--quick", action="store_true", help="a small sweep: a few seconds on two CPU cores"
    )
    p.add_argument("--device", help="cpu or cuda (default: cuda when there is one)")
    p.add_argument(
        "--threads", type=int, help="torch.set_num_threads for the sweep (default: torch's current)"
    )
    p.add_argument(
        "--lengths", type=_lengths, help="comma-separated sequence lengths, e.g. 128,512,2048"
    )
    p.add_argument(
        "--modes", type=_modes, help=f"comma-separated: {FORWARD},{BACKWARD} (or 'backward')"
    )
    p.add_argument("--dtypes", type=_dtypes, help="comma-separated, e.g. float16,bfloat16")
    p.add_argument("--batch", type=int)
    p.add_argument("--embed-dim", type=int)
    p.add_argument("--heads", type=int)
    p.add_argument(
        "--min-run-time",
        type=float,
        help="at least this many seconds of timed calls per measurement",
    )
    p.add_argument("--max-run-time", type=float, help="at most this many seconds per measurement")
    p.add_argument(
        "--compile", action="store_true", help="also time torch.compile versions (meant for a GPU)"
    )
    p.add_argument("--csv", help="write the results to this CSV file")
    p.add_argument("--json", help="write the results to this JSON file")
    p.add_argument("--plot", help="save the forward-pass plot to this image file")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    overrides = {}
    for name in (
        "lengths",
        "modes",
        "dtypes",
        "batch",
        "embed_dim",
        "heads",
        "min_run_time",
        "max_run_time",
    ):
        if getattr(args, name) is not None:
            overrides[name] = getattr(args, name)
    if args.compile:
        overrides["implementations"] = standard_implementations(compile=True)

    def progress(r: Result) -> None:
        print(
            f"  {r.dtype} {r.mode} L={r.length} {r.implementation}: {r.status} {_time(r.median_s)}",
            file=sys.stderr,
            flush=True,
        )

    sweep = (quick_sweep if args.quick else standard_sweep)(
        device=args.device, threads=args.threads, progress=progress, **overrides
    )
    print(to_table(sweep))
    if args.csv:
        to_csv(sweep, args.csv)
    if args.json:
        to_json(sweep, args.json)
    if args.plot:
        plot_sweep(sweep).savefig(args.plot, dpi=120)
    return 0


if __name__ == "__main__":
    sys.exit(main())
