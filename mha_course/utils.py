"""Device and seeding helpers used by every notebook."""

from __future__ import annotations

import os
import random

import numpy as np
import torch

__all__ = ["get_device", "seed_everything", "device_report", "environment_report"]


def get_device(prefer: str | None = None) -> torch.device:
    """The best device here: CUDA, then Apple's MPS, then the CPU.

    ``prefer`` (or the environment variable ``MHA_COURSE_DEVICE``) forces one, e.g. ``"cpu"``.
    """
    prefer = prefer or os.environ.get("MHA_COURSE_DEVICE")
    if prefer:
        return torch.device(prefer)
    if torch.cuda.is_available():
        return torch.device("cuda")
    mps = getattr(torch.backends, "mps", None)
    if mps is not None and mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def seed_everything(seed: int = 0) -> int:
    """Seed Python, NumPy and torch (CPU and every GPU) so a notebook gives the same numbers each run."""
    random.seed(seed)
    np.random.seed(seed)
    torch.manual_seed(seed)  # also seeds every CUDA device
    return seed


def device_report(device: torch.device | None = None) -> str:
    """One line: which device, and for a GPU its name and memory."""
    device = device or get_device()
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"cuda: {props.name}, {props.total_memory / 2**30:.1f} GiB"
    if device.type == "mps":
        return "mps: Apple GPU (Metal)"
    return f"cpu: {torch.get_num_threads()} threads (no GPU found)"


def environment_report() -> str:
    """Python, torch and the device, one per line: what to paste when asking for help."""
    import platform

    device = get_device()
    lines = [
        f"Python   {platform.python_version()} ({platform.system()} {platform.machine()})",
        f"torch    {torch.__version__}"
        + (f", CUDA {torch.version.cuda}" if torch.version.cuda else ", CPU build"),
        f"device   {device_report(device)}",
    ]
    return "\n".join(lines)
