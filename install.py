"""Install the course into the active virtual environment: the right torch for this machine, then
the course package with everything the notebooks and tests need.

    python install.py            # what the README's quick start runs
    python install.py --dry-run  # only say what it would run, and why

Which torch, and why:

* a torch >= the course's minimum already here is kept;
* otherwise torch TORCH_VERSION (the version the course is tested with), built for this machine:
  on Linux without an NVIDIA GPU, PyPI's torch is the CUDA build (a 500 MB wheel and about 3 GB of
  CUDA libraries, useless without a GPU), so the small CPU build comes from PyTorch's own index,
  CPU_INDEX; where that index cannot be reached, torch comes from pip's usual sources and this
  script says which build that was. On macOS, Windows, or Linux with an NVIDIA GPU, PyPI's torch
  is the right build.

It uses only the standard library and pip, with pip's own settings (a proxy, a mirror, find-links).
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

TORCH_VERSION = "2.13.0"
"""The torch the course is tested with (CI's quick start): the one installed where there is none."""
MIN_TORCH = (2, 5, 1)
"""pyproject.toml's lower bound: a torch already installed that is at least this is kept."""
CPU_INDEX = "https://download.pytorch.org/whl/cpu"
"""PyTorch's index of CPU-only builds (Linux, Windows)."""
EXTRAS = "dev"
"""The course package's extra: the notebook runner, the tests, lesson 05's reference models."""
ROOT = Path(__file__).resolve().parent


def say(message: str) -> None:
    print(f"[install] {message}", flush=True)


def installed_torch() -> tuple[str, bool] | None:
    """(version, has CUDA) of the torch installed in this Python, or None, without importing it
    here (a broken torch must not stop the installer)."""
    probe = "import torch; print(torch.__version__, bool(torch.version.cuda))"
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True)
    if done.returncode != 0:
        return None
    version, cuda = done.stdout.split()
    return version, cuda == "True"


def _release(version: str) -> tuple[int, ...]:
    parts = []
    for part in version.split("+")[0].split("."):
        digits = "".join(c for c in part if c.isdigit())
        if not digits:
            break
        parts.append(int(digits))
    return tuple(parts)


def has_nvidia_gpu() -> bool:
    """An NVIDIA driver is loaded (Linux) or its tool is on PATH."""
    return Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi") is not None


def wants_cpu_build(system: str, gpu: bool) -> bool:
    """Whether PyPI's torch here would be a CUDA build nobody can use: Linux without an NVIDIA GPU.
    (On macOS PyPI's torch is the CPU and Apple-GPU build; on Windows it is CPU-only.)"""
    return system == "Linux" and not gpu


def reachable(url: str, timeout: float = 10.0) -> str | None:
    """None if ``url`` answers; otherwise why not, in a few words."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError as error:  # it answered: the index is there
        return None if error.code < 500 else f"HTTP {error.code}"
    except (urllib.error.URLError, OSError) as error:
        return str(getattr(error, "reason", error))


def plan(
    torch_here: tuple[str, bool] | None, system: str, gpu: bool, cpu_index_problem: str | None
) -> tuple[list[list[str]], list[str]]:
    """The pip commands to run (argument lists after ``pip install``) and what to tell the user."""
    notes = []
    commands = []
    if torch_here is not None and _release(torch_here[0]) >= MIN_TORCH:
        build = "CUDA" if torch_here[1] else "CPU"
        notes.append(f"keeping the torch already here: {torch_here[0]} ({build} build)")
    elif not wants_cpu_build(system, gpu):
        why = "with an NVIDIA GPU: the CUDA build" if system == "Linux" else f"on {system}"
        notes.append(f"torch {TORCH_VERSION} from PyPI ({why})")
        commands.append([f"torch=={TORCH_VERSION}"])
    elif cpu_index_problem is None:
        notes.append(f"torch {TORCH_VERSION}, CPU build, from {CPU_INDEX} (no NVIDIA GPU here)")
        commands.append([f"torch=={TORCH_VERSION}", "--index-url", CPU_INDEX])
    else:
        notes.append(
            f"{CPU_INDEX} cannot be reached ({cpu_index_problem}): torch {TORCH_VERSION} comes from "
            "pip's usual sources instead. From PyPI that is the CUDA build (about 3 GB more to "
            "download; it runs on the CPU too). To get the small CPU build later, where that index "
            f"can be reached: pip install --force-reinstall torch=={TORCH_VERSION} --index-url "
            f"{CPU_INDEX}"
        )
        commands.append([f"torch=={TORCH_VERSION}"])
    commands.append(["-e", f"{ROOT}[{EXTRAS}]"])
    return commands, notes


def pip_install(arguments: list[str]) -> None:
    command = [sys.executable, "-m", "pip", "install", *arguments]
    say("running: " + " ".join(command[1:]))
    if subprocess.run(command).returncode != 0:
        say(
            "pip failed (its messages are above). With no internet connection, connect and run "
            "`python install.py` again; behind a proxy, set HTTPS_PROXY first."
        )
        sys.exit(1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python install.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--dry-run", action="store_true", help="say what would run, run nothing")
    args = parser.parse_args(argv)
    if sys.prefix == sys.base_prefix and "CONDA_PREFIX" not in os.environ:
        say(
            "note: no virtual environment is active, so this installs into "
            f"{sys.prefix}. The README's first line makes one (.venv) and activates it."
        )
    torch_here = installed_torch()
    system, gpu = platform.system(), has_nvidia_gpu()
    needs_index = torch_here is None or _release(torch_here[0]) < MIN_TORCH
    problem = (
        reachable(CPU_INDEX + "/torch/") if needs_index and wants_cpu_build(system, gpu) else None
    )
    commands, notes = plan(torch_here, system, gpu, problem)
    for note in notes:
        say(note)
    for arguments in commands:
        if args.dry_run:
            say("would run: pip install " + " ".join(arguments))
        else:
            pip_install(arguments)
    if args.dry_run:
        return 0
    version, cuda = installed_torch() or ("none", False)
    say(
        f"done: torch {version} ({'CUDA' if cuda else 'CPU'} build), the course package "
        f"mha-course[{EXTRAS}]. Next: pytest (every test and notebook), then jupyter lab notebooks/"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
