"""Device, seeding and environment helpers used by every notebook.

:func:`machine` gathers, in one place, the facts a reader needs to compare numbers with theirs
(Python, torch, CUDA, the device and its name): lesson 00's :func:`environment_report` prints them,
and every benchmark of :mod:`mha_course.bench` records them next to its results.
"""

from __future__ import annotations

import os
import platform
import random
from dataclasses import dataclass

import numpy as np
import torch

__all__ = [
    "get_device",
    "cuda_runs_here",
    "seed_everything",
    "Machine",
    "machine",
    "device_report",
    "environment_report",
]


def get_device(prefer: str | None = None) -> torch.device:
    """The best device here: a CUDA GPU this torch has kernels for, then Apple's MPS, then the CPU.

    The choice follows what the GPU can do (its compute capability against the architectures this
    torch was built for: :func:`cuda_runs_here`), never its name. ``prefer`` (or the environment
    variable ``MHA_COURSE_DEVICE``) forces one, e.g. ``"cpu"``.
    """
    prefer = prefer or os.environ.get("MHA_COURSE_DEVICE")
    if prefer:
        return torch.device(prefer)
    if torch.cuda.is_available() and cuda_runs_here():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def cuda_runs_here(device: int | torch.device | None = None) -> bool:
    """Whether this torch has kernels for the GPU's compute capability: code built for sm_XY runs on
    a GPU of the same major version and minor >= Y; PTX built for compute_XY is compiled for any
    newer GPU when it loads. A torch that lists no architectures (a ROCm build) is trusted."""
    major, minor = torch.cuda.get_device_capability(device)
    built = torch.cuda.get_arch_list()
    if not built:
        return True
    for arch in built:
        kind, _, number = arch.partition("_")
        if not number[:2].isdigit():
            continue
        arch_major, arch_minor = int(number[:-1]), int(number[-1])
        if kind == "sm" and arch_major == major and arch_minor <= minor:
            return True
        if kind == "compute" and (arch_major, arch_minor) <= (major, minor):
            return True
    return False


def seed_everything(seed: int = 0) -> int:
    """Seed Python, NumPy and torch (CPU and every GPU) so a notebook gives the same numbers each run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


@dataclass(frozen=True)
class Machine:
    """Where the code runs: the software, the device, and what the device is."""

    python_version: str  # "3.11.7"
    system: str  # "Linux"
    arch: str  # "x86_64"
    platform: str  # platform.platform(): the OS release too
    torch_version: str
    cuda_version: str  # "" for a CPU build of torch
    device: str  # "cpu", "cuda" or "mps"
    device_name: str  # the GPU's name, or the CPU's model
    device_memory: int | None  # bytes: a CUDA GPU's total memory
    capability: tuple[int, int] | None  # a CUDA GPU's compute capability, (7, 5) for a T4
    threads: int  # torch's CPU threads right now


def _cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine(device: torch.device | str | None = None) -> Machine:
    """The facts about this machine and ``device`` (default: :func:`get_device`)."""
    device = torch.device(device) if device is not None else get_device()
    name, memory, capability = _cpu_name(), None, None
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        name, memory, capability = props.name, props.total_memory, (props.major, props.minor)
    elif device.type == "mps":
        name = "Apple GPU (Metal)"
    return Machine(
        python_version=platform.python_version(),
        system=platform.system(),
        arch=platform.machine(),
        platform=platform.platform(),
        torch_version=torch.__version__,
        cuda_version=torch.version.cuda or "",
        device=device.type,
        device_name=name,
        device_memory=memory,
        capability=capability,
        threads=torch.get_num_threads(),
    )


def _device_line(m: Machine) -> str:
    if m.device == "cuda":
        sm = ".".join(map(str, m.capability)) if m.capability else "?"
        return f"cuda: {m.device_name}, {m.device_memory / 2**30:.1f} GiB, compute capability {sm}"
    if m.device == "mps":
        return f"mps: {m.device_name}"
    return f"cpu: {m.threads} threads (no GPU found)"


def device_report(device: torch.device | None = None) -> str:
    """One line: which device, and for a GPU its name and memory."""
    return _device_line(machine(device))


def environment_report() -> str:
    """Python, torch and the device, one per line: what to paste when asking for help."""
    m = machine()
    build = f", CUDA {m.cuda_version}" if m.cuda_version else ", CPU build"
    lines = [
        f"Python   {m.python_version} ({m.system} {m.arch})",
        f"torch    {m.torch_version}{build}",
        f"device   {_device_line(m)}",
    ]
    return "\n".join(lines)
