"""The device as the planner sees it: a :class:`DeviceProfile` of what it supports (kernels,
dtypes), its free memory, and (measured by :func:`describe_device` at the start of a budgeted
sweep) its matmul rates and the overhead of a call of each implementation.

A profile can also be written by hand, which is how the decisions that depend on it
(:func:`unsupported_reason` here, the predictions of :mod:`.plan`) are tested without the device:
a Colab T4 is ``DeviceProfile(type="cuda", capability=(7, 5), native_bf16=False)``.

A forced SDPA kernel the device lacks (flash and cuDNN need an Ampere GPU, compute capability 8.0,
or newer; a CPU has only math and flash), and bfloat16 on a GPU without native bfloat16, are
"unsupported" and never run.
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
from .implementations import SDPA_BACKENDS, Implementation, standard_implementations
from .measure import matmul_rate, peak_memory, time_call

__all__ = [
    "DeviceProfile",
    "COLAB_T4",
    "unsupported_reason",
    "profile_dtypes",
    "native_bf16",
    "available_memory",
    "describe_device",
]

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


COLAB_T4 = DeviceProfile(
    type="cuda",
    capability=(7, 5),
    native_bf16=False,
    available_bytes=MEMORY_FRACTION["cuda"] * 15 * 2**30,
    matmul_rate={"float16": 65e12, "float32": 8.1e12, "float64": 8.1e12 / 32},
    matmul_n=4096,
    call_overhead_s={
        (impl.name, mode): seconds * (10 / 3 if impl.name == "loop over heads" else 1)
        for impl in standard_implementations(compile=True)
        for mode, seconds in (("forward", 3e-4), ("forward+backward", 9e-4))
    },
    measurement_overhead_s=0.02,
)
"""Colab's free-tier GPU, an NVIDIA T4, as the planner sees it, written from its published figures
rather than measured: compute capability 7.5 (Turing: no native bfloat16, no flash or cuDNN
attention; SDPA's memory-efficient kernel in float16 and float32); 16 GB of memory, of which Colab
reports 15 GiB free; 65 TFLOP/s in float16 on its tensor cores and 8.1 TFLOP/s in float32 (NVIDIA's
T4 Tensor Core GPU datasheet), float64 at 1/32 of float32 (NVIDIA's Turing architecture
whitepaper). Peak rates: a real sweep measures lower ones. The overhead of a call is not published:
0.3 ms (0.9 ms with backward), and 1 ms (3 ms) for the loop over heads, assume CUDA's launch cost
of about 10 microseconds per kernel times the kernels of one call, and a measurement's fixed cost
20 ms."""


def profile_dtypes(profile: DeviceProfile) -> tuple[torch.dtype, ...]:
    """The dtypes a sweep measures by default on the device ``profile`` describes: float32 on a
    CPU; on a GPU float16, and bfloat16 only where the GPU computes it natively (compute capability
    8.0 or newer: never on a T4, which would only emulate it, slowly)."""
    if profile.type != "cuda":
        return (torch.float32,)
    return (torch.float16, torch.bfloat16) if profile.native_bf16 else (torch.float16,)


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
