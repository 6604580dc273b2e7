"""Triton for lesson 09: is it here, which mode it runs kernels in, and the course's kernel step
named without importing it. :mod:`mha_course.triton_attention` (the attention) and
:mod:`mha_course.triton_launch` (a learner's launch) both read it; the rule it keeps is in
:mod:`mha_course.triton_attention`'s docstring: Triton is imported only when a kernel first runs.
"""

from __future__ import annotations

import functools
import importlib.metadata as metadata
import importlib.util
import os
import platform
import sys
import types

__all__ = [
    "MIN_TRITON",
    "LOG2_E",
    "COURSE_STEP",
    "course_step",
    "triton_unavailable",
    "stand_in_for_triton",
    "interpreting",
]

MIN_TRITON = (3, 1)
"""The oldest Triton the kernel is written for (the one torch 2.5.1, the course's oldest, brings)."""
LOG2_E = 1.4426950408889634
"""log₂(e): the kernel takes its exponentials in base 2, with this folded into the scale."""


def triton_unavailable() -> str | None:
    """None where Triton is installed (at least :data:`MIN_TRITON`); otherwise why not, in one
    line, with the fix. It does not import Triton (see the interpreter rule above): an install
    whose import fails is found by :func:`flash_attention`, which raises ImportError then."""
    stand_in = getattr(sys.modules.get("triton"), STAND_IN, None)
    if stand_in is not None:
        return stand_in
    try:
        found = "triton" in sys.modules or importlib.util.find_spec("triton") is not None
    except (ImportError, ValueError):  # a stand-in module, or a broken package
        found = False
    if not found or sys.modules.get("triton", ...) is None:
        if platform.system() != "Linux":
            return (
                f"Triton is not installed, and has builds for Linux only (this is "
                f"{platform.system()}): run lesson 09 on Linux or Colab"
            )
        return f"Triton is not installed: pip install 'triton>={_dotted(MIN_TRITON)}'"
    version = _triton_version()
    if version is not None and _release(version) < MIN_TRITON:
        return (
            f"Triton {version} is older than {_dotted(MIN_TRITON)}: "
            f"pip install --upgrade 'triton>={_dotted(MIN_TRITON)}'"
        )
    return None


STAND_IN = "__mha_course_stand_in__"  # on a stand-in for Triton: why Triton is not there


def stand_in_for_triton() -> str | None:
    """Where Triton is not installed (macOS, Windows), put a stand-in for it in ``sys.modules``
    so that lesson 09's cells that define kernels (``import triton``, ``@triton.jit``) still run
    there: ``triton.jit`` leaves a function as it is, and every launch and check says why nothing
    runs (:func:`triton_unavailable` gives the reason, as before). Returns that reason; where
    Triton is installed (or cannot be imported for another reason) it does nothing."""
    reason = triton_unavailable()
    already = getattr(sys.modules.get("triton"), STAND_IN, None) is not None
    if reason is None or already or "not installed" not in reason:
        return reason
    language = types.ModuleType("triton.language")
    language.constexpr = type("constexpr", (), {"__doc__": "A stand-in: no Triton here."})
    triton = types.ModuleType("triton", "A stand-in for Triton, which is not installed here.")
    triton.jit = lambda fn=None, **options: fn if fn is not None else (lambda fn: fn)
    triton.cdiv = lambda a, b: -(-a // b)
    triton.language = language
    setattr(triton, STAND_IN, reason)
    sys.modules.update({"triton": triton, "triton.language": language})
    return reason


def interpreting() -> bool:
    """Whether Triton runs kernels in its interpreter in this process: whether
    ``TRITON_INTERPRET`` was on when Triton was first imported. Imports Triton (where it is
    installed), which fixes the answer for the rest of the process."""
    if triton_unavailable() is not None:
        return _interpreter_asked()
    try:
        import triton.language as tl
        from triton.runtime.interpreter import InterpretedFunction
    except Exception:  # a broken install: flash_attention says so (ImportError, with the reason)
        return _interpreter_asked()
    return isinstance(tl.zeros, InterpretedFunction)  # one of Triton's own @jit functions


def _interpreter_asked() -> bool:
    """Whether ``TRITON_INTERPRET`` asks for the interpreter now."""
    return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on", "yes")


def _triton_version() -> str | None:
    """The installed Triton's version, without importing it (PyTorch's ROCm and nightly builds
    name their package differently: pytorch-triton-rocm, pytorch-triton)."""
    module = sys.modules.get("triton")
    if module is not None:
        return getattr(module, "__version__", None)
    for name in metadata.packages_distributions().get("triton", []):
        try:
            return metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return None


def _kernels():
    """:mod:`mha_course.triton_kernels` (importing Triton), or ImportError with the reason."""
    reason = triton_unavailable()
    if reason is None:
        try:
            from . import triton_kernels

            return triton_kernels
        except Exception as error:  # an installed Triton whose import fails, whatever the reason
            reason = f"Triton is installed but its import fails: {type(error).__name__}: {error}"
    raise ImportError(f"flash_attention needs Triton: {reason}")


def _release(version: str) -> tuple[int, ...]:
    return tuple(int(part) for part in version.split("+")[0].split(".")[:2] if part.isdigit())


def _dotted(version: tuple[int, ...]) -> str:
    return ".".join(map(str, version))


class _CourseStep:
    """The course's inner step, :func:`mha_course.triton_kernels.attend_tile`, named without
    importing Triton (which must wait until a lesson has set ``TRITON_INTERPRET``): the registry
    hands it out as the exercise ``attend_tile``'s reference, and every function here that takes a
    step takes it for the course's own."""

    def resolve(self):
        return _kernels().attend_tile

    def __repr__(self) -> str:
        return "<the course's attend_tile, mha_course.triton_kernels.attend_tile>"


COURSE_STEP = _CourseStep()


def course_step(step):
    """``step`` as the kernel takes it: the course's own for None or :data:`COURSE_STEP`."""
    return _kernels().attend_tile if step is None or step is COURSE_STEP else step


# ---------------------------------------------------------------- the mode of a @triton.jit function


def _is_triton_function(function) -> bool:
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    return isinstance(function, (JITFunction, InterpretedFunction))


@functools.cache
def _in_mode(function, interpret: bool):
    """A ``@triton.jit`` function in the mode asked for: Triton fixed its mode when it was
    defined (see the module's docstring); the same Python code, wrapped again if need be."""
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction

    if isinstance(function, InterpretedFunction) == interpret:
        return function
    return (InterpretedFunction if interpret else JITFunction)(function.fn)
