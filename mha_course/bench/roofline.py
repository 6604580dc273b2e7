"""What bounds one step of generation: the bytes it must read at the memory's bandwidth (the
roofline), and the operations it launches one by one (lesson 07).

A decode step makes one token per sequence. It reads every weight of the model once, whatever
the batch, and every sequence's cached keys and values: at a bandwidth of W bytes/s it cannot
take less than bytes / W. :func:`memory_bandwidth` gives W for a device: a GPU's published peak
from :data:`PEAK_BANDWIDTH` where its name is there, else (a CPU, another GPU) the bandwidth of
a large copy measured here (:func:`copy_bandwidth`), which is what a program reaches in
practice. :func:`count_kernels` counts the operations a call runs, views aside: on a GPU each is
(about) one kernel launched from Python.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import NamedTuple

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .measure import time_call

__all__ = ["PEAK_BANDWIDTH", "Bandwidth", "memory_bandwidth", "copy_bandwidth", "count_kernels"]

PEAK_BANDWIDTH = {  # a part of the device's name -> bytes/s, from NVIDIA's data sheets
    "H200": 4.8e12,
    "H100 PCIe": 2.0e12,
    "H100": 3.35e12,  # SXM
    "A100-SXM4-80GB": 2.039e12,
    "A100 80GB PCIe": 1.935e12,
    "A100": 1.555e12,  # 40 GB
    "L4": 300e9,
    "T4": 320e9,
    "A10G": 600e9,
    "V100": 900e9,
}
"""The peak memory bandwidth of GPUs people meet (Colab, clouds), the first matching name first."""


class Bandwidth(NamedTuple):
    """Bytes per second, and where the number comes from (a data sheet, or a measurement)."""

    bytes_per_s: float
    source: str


def memory_bandwidth(device: torch.device | str) -> Bandwidth:
    """The device's memory bandwidth: a known GPU's peak, else a copy measured here."""
    device = torch.device(device)
    if device.type == "cuda":
        name = torch.cuda.get_device_name(device)
        for part, peak in PEAK_BANDWIDTH.items():
            if part in name:
                return Bandwidth(peak, f"the {name}'s peak, from its data sheet")
    n = torch.get_num_threads()
    threads = f" on {n} thread{'s' * (n > 1)}" if device.type == "cpu" else ""
    return Bandwidth(copy_bandwidth(device), f"a 128 MiB copy measured here{threads}")


def copy_bandwidth(device: torch.device | str, mib: int = 128) -> float:
    """Bytes per second read and written by a copy of ``mib`` MiB (more than a CPU's caches hold):
    what a program moving data in and out of memory reaches here (the median of timed copies)."""
    source = torch.empty(mib * 2**20, dtype=torch.uint8, device=device)
    target = torch.empty_like(source)
    source.fill_(1)  # touch every page once before timing
    median, _, _ = time_call(lambda: target.copy_(source), min_run_time=0.2, warmup=2)
    return 2 * source.numel() / median  # each byte is read once and written once


class _Launches(TorchDispatchMode):
    """Counts the operations that run, by name, views (which launch nothing) aside."""

    def __init__(self) -> None:
        super().__init__()
        self.ops: Counter[str] = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if not getattr(func, "is_view", False):
            self.ops[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def count_kernels(fn: Callable, *args, **kwargs) -> Counter[str]:
    """The operations that ``fn(*args, **kwargs)`` runs, views aside, counted by name (their
    total is about the kernels a GPU would be sent, one launch each, from Python)."""
    with torch.no_grad(), _Launches() as launches:
        fn(*args, **kwargs)
    return launches.ops
